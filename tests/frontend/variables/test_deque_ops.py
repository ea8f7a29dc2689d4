"""`+`, `*`, `*=`, `del` and iterators of deques (and lists) traced as Python runs them: a deque's
maxlen holds for the new deque, `*=` changes the object in place, and an iterator raises once its
deque changed (Note [Sequences: + and *], Note [Deques: iterators])."""

from collections import deque

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def _add_keeps_left_maxlen(x):
    left = deque([x, x + 1, x + 2, x + 3], maxlen=3)
    both = left + deque([x * 2, x * 3])
    return list(both), both.maxlen, len(left)


def _add_other_kind_raises(x):
    try:
        return deque([x]) + [x]
    except TypeError as e:
        return str(e)


def _list_add_tuple_raises(x):
    try:
        return [x] + (x,)
    except TypeError as e:
        return str(e)


def _repeat_keeps_maxlen(x):
    d = deque([x, x + 1, x + 2], maxlen=5)
    return list(d * 2), list(3 * d), (d * 2).maxlen, list(d * 0), list(d * -1)


def _imul_in_place(x):
    d = deque([x, x + 1], maxlen=3)
    alias = d
    d *= 3
    xs = [x]
    ys = xs
    xs *= 3
    return d is alias, list(alias), alias.maxlen, xs is ys, len(ys)


def _iadd_any_iterable(x):
    d = deque([x], maxlen=2)
    alias = d
    d += (x + 1, x + 2)
    return d is alias, list(alias)


def _del_then_search(x):
    d = deque([1, 2, 3, 4, 5])
    del d[2]
    return 3 in d, list(d), x + 1


@pytest.mark.parametrize(
    "fn",
    [
        _add_keeps_left_maxlen,
        _add_other_kind_raises,
        _list_add_tuple_raises,
        _repeat_keeps_maxlen,
        _imul_in_place,
        _iadd_any_iterable,
        _del_then_search,
    ],
)
def test_deque_operators_match_eager(fn):
    run_and_compare(fn, torch.randn(3), expected_breaks=0)


def _mutate_while_iterating(op):
    def fn(x):
        d = deque([1, 2, 3, 4])
        it = iter(d)
        next(it)
        op(d)
        try:
            rest = list(it)
        except RuntimeError as e:
            rest = str(e)
        try:
            again = next(it)
        except RuntimeError as e:
            again = str(e)
        except StopIteration:
            again = "stopped"
        return x + 1, rest, again, type(it).__name__

    return fn


def _del(d):
    del d[1]


def _imul2(d):
    d *= 2


_COUNTED = [lambda d: d.append(9), lambda d: d.popleft(), lambda d: d.rotate(0), _del, _imul2]
_NOT_COUNTED = [lambda d: d.__setitem__(1, 7), lambda d: d.reverse(), lambda d: d.extend([])]


_IDS = ["append", "popleft", "rotate0", "del", "imul2", "setitem", "reverse", "extend_nothing"]


@pytest.mark.parametrize("op", _COUNTED + _NOT_COUNTED, ids=_IDS)
def test_deque_iterator_sees_changes_as_python(op):
    run_and_compare(_mutate_while_iterating(op), torch.randn(3), expected_breaks=0)


def _empty_then_append(x):
    d = deque()
    it = iter(d)
    d.append(x)
    try:
        next(it)
        return "no error"
    except RuntimeError as e:
        return str(e)


def _reversed_live(x):
    d = deque([1, 2, 3])
    r = reversed(d)
    first = next(r)
    d[0] = 10
    return first, list(r), type(r).__name__, x * 2


@pytest.mark.parametrize("fn", [_empty_then_append, _reversed_live])
def test_deque_iterators_match_eager(fn):
    run_and_compare(fn, torch.randn(3), expected_breaks=0)


def _set_first(d, x):
    d[0] = x
    d.reverse()
    return len(d)


def test_items_set_in_an_input_deque_keep_its_iterators():
    # (replayed as d[i] = v: clear/extend would count as changes and break `it`)
    compiled = kiln.compile(_set_first, backend="eager")
    for _ in range(2):
        d = deque([1, 2, 3])
        it = iter(d)
        assert compiled(d, 7) == 3
        assert list(it) == [3, 2, 7]
