"""Builtins that raise inside compiled code (StopIteration, IndexError, AttributeError...) and
the small exception idioms of model code, compared with eager (outputs, exceptions, counts).

PYTEST_DONT_REWRITE: the traced functions' `assert` statements stay Python's own."""

import collections
import contextlib
import enum

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare


def t(*shape):
    return torch.randn(*shape)


class A(Exception):
    pass


class B(Exception):
    pass


class Scale:
    def __init__(self, k):
        self.k = k

    def __call__(self, x, bias=0):
        return x * self.k + bias


class Plain:
    pass


class Color(enum.Enum):
    RED = 1
    GREEN = 2
    CRIMSON = 1  # an alias of RED


# --- StopIteration ----------------------------------------------------------------------------
def next_exhausted_caught(x):
    it = iter([1])
    x = x + next(it)
    try:
        next(it)
    except StopIteration:
        x = x * 2
    return x


def next_default(x):
    return x + next(iter([]), 5) + next(iter((1, 2)), 9)


def zip_next_exhausted(x):
    it = zip([1], [2])
    a, b = next(it)
    try:
        next(it)
    except StopIteration as e:
        return x + a + b + (e.value is None)
    return x


def manual_iteration_loop(x):
    it = iter([1, 2, 3])
    total = 0
    while True:
        try:
            total += next(it)
        except StopIteration:
            break
    return x + total


def inlined_next_raises(x):
    def first(it):
        return next(it)

    try:
        return first(iter([]))
    except StopIteration:
        return x - 1


# --- IndexError / KeyError / ValueError from containers --------------------------------------
def list_index_out_of_range(x):
    items = [1, 2]
    try:
        return x + items[5]
    except IndexError as e:
        return x + len(str(e))


def tuple_and_range_out_of_range(x):
    n = 0
    for seq in ((1, 2), range(2), collections.deque([1])):
        try:
            seq[7]
        except IndexError as e:
            n += len(e.args[0])
    return x + n


def shape_index_out_of_range(x):
    try:
        return x + x.shape[5]
    except IndexError:
        return x + 1


def list_methods_raise(x):
    items = [1, 2]
    caught = []
    for op in (lambda: [].pop(), lambda: items.pop(9), lambda: items.remove(7)):
        try:
            op()
        except (IndexError, ValueError) as e:
            caught.append(str(e))
    try:
        items.index(3)
    except ValueError as e:
        caught.append(str(e))
    try:
        (1, 2).index(3)
    except ValueError as e:
        caught.append(str(e))
    items.remove(1)
    return x + len(items), caught


def list_remove_mutates_input(x, items):
    items.remove(2)
    return x + len(items)


def set_and_deque_raise(x):
    caught = []
    for op in (lambda: set().pop(), lambda: {1}.remove(2), lambda: collections.deque().popleft()):
        try:
            op()
        except (KeyError, IndexError) as e:
            caught.append(repr(e))
    return x + 1, caught


def unpack_mismatch(x):
    caught = []
    try:
        _a, _b, _c = (1, 2)
    except ValueError as e:
        caught.append(str(e))
    try:
        _a, _b = [1, 2, 3]
    except ValueError as e:
        caught.append(str(e))
    try:
        _a, _b, *_rest, _c = (1, 2)
    except ValueError as e:
        caught.append(str(e))
    return x + 1, caught


def uncaught_index_error(x):
    y = x + 1
    items = [1]
    return y + items[3]


def uncaught_stop_iteration(x):
    return x + next(iter([]))


# --- attributes and calls of user objects ------------------------------------------------------
def getattr_missing_new_object(x):
    s = Scale(2)
    try:
        getattr(s, "missing")  # noqa: B009
    except AttributeError as e:
        return x + len(str(e)) + hasattr(s, "k") + hasattr(s, "missing")
    return x


def getattr_missing_input(x, obj):
    try:
        return x + obj.missing
    except AttributeError as e:
        return x - len(e.args[0])


def hasattr_input(x, obj):
    return x + (10 if hasattr(obj, "extra") else 20)


def call_new_object(x):
    s = Scale(3)
    return s(x, bias=1) + callable(s) + callable(Scale) + callable(3)


def call_uncallable_new_object(x):
    p = Plain()
    try:
        p(x)
    except TypeError as e:
        return x + len(str(e)) + callable(p)
    return x


# --- exception idioms ----------------------------------------------------------------------------
def repr_of_exception(x):
    try:
        raise ValueError("bad", 3)
    except ValueError as e:
        r = repr(e)
    return x + len(r), r, repr([1, "a"]), repr(Scale)


def format_exception(x):
    try:
        raise KeyError("k")
    except KeyError as e:
        return x + 1, "error: %s" % e, f"{e!r}", "%r" % e  # noqa: UP031


def isinstance_tuple_and_type_name(x):
    try:
        raise B("b")
    except Exception as e:
        hit = isinstance(e, (A, B))
        name = type(e).__name__ + e.__class__.__name__
    return x + hit + len(name)


def raise_from_none(x):
    try:
        try:
            raise A("a")
        except A:
            raise B("b") from None
    except B as e:
        return x + (e.__cause__ is None) + e.__suppress_context__


def assert_constant(x):
    n = 3
    assert n > 2, "n too small"
    try:
        assert n < 2, f"n={n}"
    except AssertionError as e:
        return x + len(str(e))
    return x


def try_except_else_finally(x):
    log = []
    try:
        y = x + 1
    except ValueError:
        log.append("except")
    else:
        log.append("else")
    finally:
        log.append("finally")
    return y, log


def suppress_key_error(x):
    d = {}
    with contextlib.suppress(KeyError):
        x = x + d["k"]
    return x + 1


def enum_by_value(x):
    try:
        Color(7)
    except ValueError as e:
        msg = str(e)
    return x + Color(2).value + (Color(1) is Color.RED is Color.CRIMSON), msg


CASES = [
    (enum_by_value, (t(3),)),
    (next_exhausted_caught, (t(3),)),
    (next_default, (t(3),)),
    (zip_next_exhausted, (t(3),)),
    (manual_iteration_loop, (t(3),)),
    (list_index_out_of_range, (t(3),)),
    (tuple_and_range_out_of_range, (t(3),)),
    (shape_index_out_of_range, (t(3),)),
    (list_methods_raise, (t(3),)),
    (list_remove_mutates_input, (t(3), [1, 2, 3])),
    (set_and_deque_raise, (t(3),)),
    (unpack_mismatch, (t(3),)),
    (getattr_missing_new_object, (t(3),)),
    (call_new_object, (t(3),)),
    (call_uncallable_new_object, (t(3),)),
    (repr_of_exception, (t(3),)),
    (format_exception, (t(3),)),
    (isinstance_tuple_and_type_name, (t(3),)),
    (raise_from_none, (t(3),)),
    (assert_constant, (t(3),)),
    (try_except_else_finally, (t(3),)),
    (suppress_key_error, (t(3),)),
]


@pytest.mark.parametrize("fn,args", CASES, ids=[c[0].__name__ for c in CASES])
def test_no_break(fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_breaks=0)


def test_inlined_next_raises_into_caller():
    run_and_compare(inlined_next_raises, t(3), expected_graphs=1, expected_breaks=0)


@pytest.mark.parametrize("fn", [uncaught_index_error, uncaught_stop_iteration])
def test_uncaught_builtin_error_raises_as_eager(fn):
    run_and_compare(fn, t(3))
    with pytest.raises((IndexError, StopIteration)):
        kiln.compile(fn, backend="eager")(t(3))


def test_missing_attribute_of_input_is_guarded():
    obj = Plain()
    compiled = run_and_compare(getattr_missing_input, t(3), obj, expected_graphs=1)
    obj.missing = 5  # the attribute now exists: a recompile, not the stale handler
    x = t(3)
    torch.testing.assert_close(compiled(x, obj), x + 5)


def test_hasattr_of_input_is_guarded():
    obj = Plain()
    compiled = run_and_compare(hasattr_input, t(3), obj, expected_graphs=1)
    x = t(3)
    obj.extra = 1
    torch.testing.assert_close(compiled(x, obj), x + 10)
    del obj.extra
    torch.testing.assert_close(compiled(x, obj), x + 20)


class Settings:
    flag = 1


def class_attribute_or_default(x):
    try:
        Settings.missing  # noqa: B018
    except AttributeError as e:
        x = x + len(str(e))
    return x + getattr(Settings, "extra", 2) + hasattr(Settings, "flag")


def test_missing_class_attribute_is_guarded():
    compiled = run_and_compare(class_attribute_or_default, t(3), expected_graphs=1)
    x = t(3)
    Settings.extra = 5  # a class attribute added later: a recompile, not the stale default
    try:
        torch.testing.assert_close(compiled(x), class_attribute_or_default(x))
    finally:
        del Settings.extra
    torch.testing.assert_close(compiled(x), class_attribute_or_default(x))


class Lazy:
    def __init__(self, ready):
        self.ready = ready

    @property
    def value(self):
        if not self.ready:
            raise AttributeError("not ready")
        return 3


LAZY = Lazy(False)


def hasattr_runs_property(x):
    made = Lazy(False), Lazy(True)
    return (
        x + hasattr(made[0], "value") + 2 * hasattr(made[1], "value") + 4 * hasattr(LAZY, "value")
    )


def test_hasattr_runs_the_property_getter():
    compiled = run_and_compare(hasattr_runs_property, t(3), expected_graphs=1, expected_breaks=0)
    x = t(3)
    LAZY.ready = True  # read by the inlined getter: guarded
    try:
        torch.testing.assert_close(compiled(x), hasattr_runs_property(x))
    finally:
        LAZY.ready = False


class CodeError(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code

    def __str__(self):
        return f"code {self.code}"

    def __repr__(self):
        return f"CodeError<{self.code}>"


class QuietError(KeyError):
    def __repr__(self):
        return "quiet"


def exception_with_python_str(x):
    try:
        raise CodeError(4)
    except CodeError as e:
        text = str(e) + repr(e)
    try:
        raise QuietError("k")
    except KeyError as e:
        text += str(e) + repr(e)  # KeyError's own __str__, the class's __repr__
    return x + len(text), text


def python_str_exception_escapes(x):
    y = x + 1
    raise CodeError(int(y.shape[0]))


def test_exception_with_python_str():
    run_and_compare(exception_with_python_str, t(3), expected_graphs=1, expected_breaks=0)


def test_exception_with_python_str_escapes():
    run_and_compare(python_str_exception_escapes, t(3))
    with pytest.raises(CodeError, match="code 3"):
        kiln.compile(python_str_exception_escapes, backend="eager")(t(3))


def zip_strict(x):
    total = sum(a * b for a, b in zip([1, 2], [3, 4], strict=True))
    caught = []
    for args in (([1], [1, 2]), ([1, 2], [1]), ([1], [1], [1, 2])):
        try:
            for _ in zip(*args, strict=True):
                total += 1
        except ValueError as e:
            caught.append(str(e))
    return x + total, caught


def dict_and_set_changed_while_iterated(x):
    d, s = {"a": 1}, {1}
    caught = []
    try:
        for k in d:
            d[k + "x"] = 2
    except RuntimeError as e:
        caught.append(str(e))
    try:
        for v in s:
            s.add(v + 1)
    except RuntimeError as e:
        caught.append(str(e))
    for k in d:
        d[k] = 3  # (same keys: no error)
    return x + len(d), caught, d


def zip_strict_escapes(x, a, b):
    y = x + 1
    return y + len(list(zip(a, b, strict=True)))


def dict_changed_escapes(x, d):
    y = x + 1
    for k in d:
        d[k + "x"] = 1
    return y


@pytest.mark.parametrize("fn", [zip_strict, dict_and_set_changed_while_iterated])
def test_iterator_end_errors(fn):
    run_and_compare(fn, t(3), expected_graphs=1, expected_breaks=0)


def test_iterator_end_errors_escape():
    run_and_compare(zip_strict_escapes, t(3), [1], [1, 2])
    run_and_compare(dict_changed_escapes, t(3), {"a": 1})


def dict_views_changed_while_iterated(x):
    d = {"a": 1, "b": 2}
    caught = []
    for view in (d.keys, d.values, d.items):
        try:
            for _ in view():
                d[f"k{len(d)}"] = 0
        except RuntimeError as e:
            caught.append(str(e))
    for k, v in d.items():
        d[k] = v + 1  # (same size: no error)
    return x + len(d), caught, d


def view_made_before_change(x):
    d = {"a": 1}
    keys = d.keys()
    d["b"] = 2
    return x + len([k for k in keys])


def test_dict_views_changed_while_iterated():
    run_and_compare(dict_views_changed_while_iterated, t(3), expected_graphs=1, expected_breaks=0)
    run_and_compare(view_made_before_change, t(3))
