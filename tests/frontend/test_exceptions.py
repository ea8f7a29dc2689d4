"""Exceptions raised and caught inside compiled code (Note [Blocks: exceptions while tracing])."""

import contextlib
import os

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare


def t(*shape):
    return torch.randn(*shape)


class MyError(ValueError):
    pass


class CodedError(Exception):
    code = 7

    def describe(self):
        return f"coded {self.args[0]}"


def raise_and_catch(x):
    try:
        raise ValueError("a")
    except ValueError:
        x = x + 1
    return x * 2


def catch_as_e(x):
    try:
        raise KeyError("k")
    except KeyError as e:
        msg = str(e)
        args = e.args
    return x + len(msg), args


def catch_by_base_class(x):
    try:
        raise MyError("mine", 3)
    except LookupError:
        return x - 1
    except ValueError as e:
        return x * e.args[1], type(e) is MyError, isinstance(e, MyError)


def catch_tuple_of_types(x):
    try:
        raise IndexError
    except (KeyError, IndexError) as e:
        return x + 1, type(e).__name__


def user_exception_methods(x):
    try:
        raise CodedError("c")
    except CodedError as e:
        return x * e.code, e.describe(), f"{e}"


def helper_raises(x):
    y = x.sin()
    if y.shape[0] == 3:
        raise KeyError("missing")
    return y


def callee_raises_caller_catches(x):
    try:
        return helper_raises(x)
    except KeyError:
        return x.cos() + 1


def deep(x, n):
    if n == 0:
        raise RuntimeError("bottom")
    return deep(x + 1, n - 1)


def nested_callees(x):
    try:
        y = deep(x, 3)
    except RuntimeError as e:
        y = x * 10 if str(e) == "bottom" else x
    return y


def nested_try(x):
    try:
        try:
            raise ValueError("inner")
        except KeyError:
            x = x * 100  # not taken
        finally:
            x = x + 1
    except ValueError:
        x = x * 2
    return x


def finally_runs(x):
    log = []
    try:
        try:
            raise TypeError("t")
        finally:
            log.append("finally")
    except TypeError:
        log.append("caught")
    return x + len(log), log


def reraise(x):
    try:
        try:
            raise ValueError("v")
        except ValueError:
            x = x + 1
            raise
    except ValueError as e:
        return x * 3, str(e)


def raise_from(x):
    try:
        try:
            raise KeyError("a")
        except KeyError as e:
            raise ValueError("b") from e
    except ValueError as e:
        return x + 1, type(e.__cause__).__name__, e.__suppress_context__


def context_is_set(x):
    try:
        try:
            raise KeyError("a")
        except KeyError:
            raise ValueError("b")  # noqa: B904 (the implicit context is what is tested)
    except ValueError as e:
        return x + 1, type(e.__context__).__name__


def raise_class(x):
    try:
        raise StopIteration
    except StopIteration as e:
        return x + 1, e.value


def uncaught_in_root(x):
    y = x * 2
    if y.shape[0] == 3:
        raise ValueError(f"bad size {y.shape[0]}")
    return y


def uncaught_from_callee(x):
    y = x + 1
    return helper_raises(y)


def mismatched_handler(x):
    y = x + 1
    try:
        raise ValueError("no match")
    except KeyError:
        y = y * 0
    return y


# (made with exec: pytest rewrites the assert statements of test modules)
_asserts = {}
exec(
    compile(
        "def assert_passes(x):\n"
        "    assert x.shape[0] == 3, 'three'\n"
        "    return x + 1\n"
        "def assert_fails(x):\n"
        "    y = x + 1\n"
        "    assert y.shape[0] == 4, 'need four'\n"
        "    return y\n",
        __file__ + ":asserts",
        "exec",
    ),
    _asserts,
)
assert_passes, assert_fails = _asserts["assert_passes"], _asserts["assert_fails"]


def ops_in_try(x):
    try:
        y = x.sin() * 2
        z = y.sum()
    except RuntimeError:
        z = x
    return z + 1


def ops_in_try_finally(x):
    out = []
    try:
        y = x.cos()
        out.append(1)
    finally:
        out.append(2)
    return y, out


def handler_uses_caught_value(x):
    d = {"a": 1}
    try:
        raise KeyError("b")
    except KeyError as e:
        d[e.args[0]] = 2
    return x * d["b"], d


def except_else(x):
    try:
        y = x + 1
    except ValueError:
        y = x
    else:
        y = y * 5
    return y


def loop_with_raise(x):
    total = 0
    for i in range(4):
        try:
            if i % 2:
                raise ValueError(i)
            total += i
        except ValueError as e:
            x = x + e.args[0]
    return x * total


@pytest.mark.parametrize(
    "fn,args",
    [
        (raise_and_catch, (t(3),)),
        (catch_as_e, (t(3),)),
        (catch_by_base_class, (t(3),)),
        (catch_tuple_of_types, (t(3),)),
        (user_exception_methods, (t(3),)),
        (callee_raises_caller_catches, (t(3),)),
        (nested_callees, (t(3),)),
        (nested_try, (t(3),)),
        (finally_runs, (t(3),)),
        (reraise, (t(3),)),
        (raise_from, (t(3),)),
        (context_is_set, (t(3),)),
        (raise_class, (t(3),)),
        (ops_in_try, (t(3),)),
        (ops_in_try_finally, (t(3),)),
        (handler_uses_caught_value, (t(3),)),
        (except_else, (t(3),)),
        (loop_with_raise, (t(3),)),
        (assert_passes, (t(3),)),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else None,
)
def test_caught_in_one_graph(fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_breaks=0)


@pytest.mark.parametrize(
    "fn", [uncaught_in_root, uncaught_from_callee, mismatched_handler, assert_fails]
)
def test_uncaught_raises_as_eager(fn):
    # the graph before the raise is compiled; Python raises the same exception
    run_and_compare(fn, t(3))


def test_uncaught_in_root_is_a_break_at_the_raise():
    run_and_compare(uncaught_in_root, t(3), expected_graphs=1, expected_breaks=1)


def test_raise_inside_handler_runs_eagerly():
    # mismatched handler: the exception leaves through RERAISE, no break is possible there
    run_and_compare(mismatched_handler, t(3), expected_graphs=0, expected_breaks=1)


def indexing_in_try(x, i):
    try:
        y = x[i]  # data-dependent: out of range raises only at run time
    except IndexError:
        y = x * 0
    return y


def test_data_dependent_op_under_catching_handler_reruns_eagerly_on_error():
    # Note [Blocks: ops inside try blocks]: compiled; an error at run time reruns it in Python
    run_and_compare(indexing_in_try, t(3), torch.tensor([1]), expected_graphs=1)
    run_and_compare(indexing_in_try, t(3), torch.tensor([7]), expected_graphs=1)
    assert kiln.counters["frames"]["eager_reruns"] == 2


def indexing_in_try_key_error(x, i):
    try:
        y = x[i] + 1
    except KeyError:  # cannot catch what indexing raises: the op stays in the graph
        y = x
    return y


def test_op_under_handler_that_cannot_catch_torch_errors_is_traced():
    run_and_compare(indexing_in_try_key_error, t(3), torch.tensor([1]), expected_graphs=1)


def test_trace_time_shape_error_runs_handler():
    def shape_error(x):
        try:
            y = x @ x.t().t()  # (3, 4) @ (3, 4): raises
        except RuntimeError:
            y = x + 1
        return y

    run_and_compare(shape_error, t(3, 4))


def test_exception_with_tensor_arg_escapes():
    def f(x):
        y = x * 2
        raise ValueError(y.shape[0])

    run_and_compare(f, t(3), expected_graphs=1)


def test_fullgraph_raise_names_exception():
    f = kiln.compile(uncaught_in_root, backend="eager", fullgraph=True)
    with pytest.raises(kiln.exc.Unsupported, match="ValueError raised and not caught"):
        f(t(3))


def test_printed_text_order(capsys):
    def f(x):
        try:
            print("before")
            raise ValueError("x")
        except ValueError:
            print("handler")
        return x + 1

    run_and_compare(f, t(3), calls=1)
    assert capsys.readouterr().out == "before\nhandler\n" * 2


def dict_key_error(x, d):
    try:
        v = d["missing"]
    except KeyError as e:
        v = len(e.args[0])
    return x * v


def dict_pop_key_error(x):
    d = {"a": 1}
    try:
        d.pop("b")
    except KeyError:
        d["c"] = 3
    return x + len(d), d


def int_of_bad_string(x, s):
    try:
        n = int(s)
    except ValueError as e:
        n = -1
        msg = str(e)
    else:
        msg = ""
    return x * n, msg


def callee_mutates_then_raises(log):
    log.append("before")
    raise LookupError("gone")


def caller_keeps_callee_mutations(x, log):
    try:
        callee_mutates_then_raises(log)
    except LookupError:
        log.append("handled")
    return x + 1


@pytest.mark.parametrize(
    "fn,args",
    [
        (dict_key_error, (t(3), {"a": 1})),
        (dict_pop_key_error, (t(3),)),
        (int_of_bad_string, (t(3), "12")),
        (int_of_bad_string, (t(3), "x1")),
        (caller_keeps_callee_mutations, (t(3), [])),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else None,
)
def test_modelled_builtins_raise(fn, args):
    run_and_compare(fn, *args, expected_graphs=1, expected_breaks=0)


def break_inside_try(x):
    y = x.sin() * 2
    try:
        z = y + 1
        print("in try")
    except RuntimeError:
        z = y
    return z.cos()


def risky_op_inside_try(x, i):
    y = x.sin()
    try:
        z = y[i]
    except IndexError:
        z = y * 0
    return z + 1


def test_break_inside_try_is_placed_before_it(capsys):
    # Note [Blocks: rewinding to a try block]: the graph before the try statement; the
    # resume function holding the try statement runs eagerly
    run_and_compare(break_inside_try, t(3), expected_graphs=1, expected_breaks=2)
    assert capsys.readouterr().out == "in try\n" * 3


def test_risky_op_inside_try_is_compiled_whole():
    # Note [Blocks: ops inside try blocks]: one graph; an index out of range reruns in Python
    for i, reruns in ((torch.tensor([1]), 0), (torch.tensor([5]), 2)):
        run_and_compare(risky_op_inside_try, t(3), i, expected_graphs=1, expected_breaks=0)
        assert kiln.counters["frames"]["eager_reruns"] == reruns


def no_grad_inside_try(x):
    y = x * 2
    try:
        with torch.no_grad():
            z = y + 1
            print("no grad")
    except KeyError:
        z = y
    return y + z


def test_break_in_no_grad_inside_try_keeps_grad_mode():
    run_and_compare(no_grad_inside_try, t(3).requires_grad_(), expected_graphs=1)


def risky_op_in_finally_inside_except(x, i):
    try:
        try:
            y = x[i]
        finally:
            x = x + 1
    except IndexError:
        y = x * 0
    return y


def risky_op_in_user_manager_inside_except(x, i):
    log = []
    try:
        with contextlib.nullcontext():
            y = x[i]
    except IndexError:
        y = x * 0
    return y, log


@pytest.mark.parametrize(
    "fn", [risky_op_in_finally_inside_except, risky_op_in_user_manager_inside_except]
)
def test_outer_handler_of_risky_op_is_kept(fn):
    run_and_compare(fn, t(3), torch.tensor([7]), expected_graphs=1)
    assert kiln.counters["frames"]["eager_reruns"] == 2  # (the handler runs in Python)


def test_caught_exception_returned_runs_eagerly():
    def f(x):
        try:
            raise ValueError("kept")
        except ValueError as e:
            err = e
        return x + 1, err

    kiln.reset()
    g = kiln.compile(f, backend="eager")
    out, err = g(t(3))
    assert type(err) is ValueError and err.__traceback__ is not None


def test_exception_made_and_returned():
    def f(x):
        return x + 1, KeyError("made, never raised")

    kiln.reset()
    g = kiln.compile(f, backend="eager")
    out, err = g(t(3))
    assert type(err) is KeyError and err.args == ("made, never raised",)
    assert kiln.counters["stats"]["unique_graphs"] == 1


class DetailedError(RuntimeError):
    def __init__(self, msg, code):
        super().__init__(f"{msg} [{code}]")
        self.code = code


def custom_init_caught(x):
    try:
        raise DetailedError("bad", 4)
    except DetailedError as e:
        return x * e.code, str(e), e.args


def custom_init_escapes(x):
    y = x + 1
    raise DetailedError("escaping", y.shape[0])


def test_exception_with_python_init():
    run_and_compare(custom_init_caught, t(3), expected_graphs=1, expected_breaks=0)


def test_exception_with_python_init_escapes():
    run_and_compare(custom_init_escapes, t(3), expected_graphs=1, expected_breaks=1)
    kiln.reset()
    with pytest.raises(DetailedError) as info:
        kiln.compile(custom_init_escapes, backend="eager")(t(3))
    assert info.value.code == 3 and str(info.value) == "escaping [3]"


def _divide_by_zero():
    return 1 / 0


_KILN_DIR = os.path.dirname(kiln.__file__) + os.sep


def traceback_lines(x, fn):
    try:
        fn()
    except ZeroDivisionError as ex:
        tb = ex.__traceback__
    lines = []
    while tb is not None:
        # (kiln's own frames are left out: a callee of this frame, which kiln runs in Python,
        # is called through kiln's wrapper, Note [Frames: callees of a frame run in Python])
        if not tb.tb_frame.f_code.co_filename.startswith(_KILN_DIR):
            lines.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return x + len(lines), lines


def test_traceback_of_caught_exception_is_the_real_one():
    # Note [Exceptions: tracebacks are not traced]: never None in place of eager's traceback
    run_and_compare(traceback_lines, t(3), _divide_by_zero)
