"""OrderedDict's own methods on OrderedDicts and on subclass instances made while tracing:
keywords where OrderedDict takes them (dict's take none), popitem(last=False) and move_to_end in
order, and copy of a subclass instance as a break (Note [Dicts: OrderedDict's methods])."""

import collections

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


class Sub(collections.OrderedDict):
    pass


class PlainSub(dict):
    pass


def _od_keywords(x):
    od = collections.OrderedDict(a=1)
    first = od.setdefault("g", default=9)
    popped = od.pop(key="a", default=0)
    missing = od.pop("zz", default=5)
    return first, popped, missing, list(od.items()), x + 1


def _sub_keywords(x):
    od = Sub(a=1, b=2, c=3)
    first = od.setdefault("g", default=9)
    oldest = od.popitem(last=False)
    od.move_to_end("b")
    return first, oldest, list(od.items()), x + 1


def _dict_rejects_keywords(x):
    d = PlainSub(a=1)
    try:
        d.setdefault("g", default=9)
    except TypeError as e:
        first = str(e)
    try:
        {"a": 1}.get("a", default=3)
    except TypeError as e:
        second = str(e)
    return first, second, x + 1


@pytest.mark.parametrize("fn", [_od_keywords, _sub_keywords, _dict_rejects_keywords])
def test_ordered_dict_methods_match_eager(fn):
    run_and_compare(fn, torch.randn(3), expected_breaks=0)


def _sub_copy(x):
    od = Sub(a=1)
    c = od.copy()
    return type(c).__name__, list(c.items()), type(PlainSub(a=1).copy()).__name__, x + 1


def test_ordered_dict_subclass_copy_is_the_subclass():
    run_and_compare(_sub_copy, torch.randn(3))  # (a break: type(self)() and its __setitem__)


class Counting(collections.OrderedDict):
    """Counts the calls of its own values() (user code, as in a pure-Python OrderedDict)."""

    reads = 0

    def values(self):
        type(self).reads += 1
        return super().values()


def _store(d, x):
    d["k"] = x
    return len(d)


def test_calling_with_a_dict_subclass_runs_none_of_its_methods():
    # (the frame cache looked for marked tensors through the class's own values())
    kiln.reset()
    compiled = kiln.compile(_store, backend="eager")
    for _ in range(2):
        d = Counting(a=1, b=2)
        Counting.reads = 0
        assert compiled(d, 1) == 3
        assert Counting.reads == 0
        assert list(dict.items(d)) == [("a", 1), ("b", 2), ("k", 1)]


def _iterate_after_delete(kind):
    def fn(x):
        d = kind.fromkeys("abc")
        it = iter(d)
        del d[next(it)]
        out = []
        for _ in range(2):
            try:
                out.append(next(it))
            except (RuntimeError, StopIteration) as e:
                out.append(repr(e))
        return out, x + 1

    return fn


@pytest.mark.parametrize("kind", [collections.OrderedDict, Sub, dict], ids=lambda k: k.__name__)
def test_iterator_after_a_delete_raises_as_python(kind):
    # an OrderedDict's raises once then ends; a dict's raises again
    run_and_compare(_iterate_after_delete(kind), torch.randn(3), expected_breaks=0)
