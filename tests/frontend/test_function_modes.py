"""Frames called under a TorchFunctionMode (Note [Frames: under a user's torch function mode]): a
user's mode sees the calls eager makes, never kiln's guards or wrapper; torch's default-device
mode compiles, guarded, and never reaches the compiled code; meta inputs never reach a kernel."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from frontend_helpers import Recorder
from torch.overrides import TorchFunctionMode

import kiln


def body(x, w):
    return torch.relu(x @ w).sum(0).view(-1) + 1


@pytest.mark.parametrize("backend", ["kiln", "eager"])
def test_user_mode_sees_what_eager_runs(backend):
    x, w = torch.randn(8, 4), torch.randn(4, 3)
    with Recorder() as eager_mode:
        expected = body(x, w)
    kiln.reset()
    compiled = kiln.compile(body, backend=backend)
    compiled(x, w)  # compiled outside the mode first: the entry must not run under it
    for _ in range(2):
        with Recorder() as mode:
            actual = compiled(x, w)
        assert mode.seen == eager_mode.seen == ["matmul", "relu", "sum", "view", "add"]
        torch.testing.assert_close(actual, expected)


def test_meta_inputs_never_reach_a_kernel():
    # (a C++ kernel wrote through the meta tensors' null pointers: a crash)
    f = kiln.compile(lambda a, b: (a * 2).sin() + b.sum())
    out = f(torch.ones(3, device="meta"), torch.randn(2))
    assert out.device.type == "meta" and out.shape == (3,)


def ones_plus(x):
    return torch.ones(3) + x.sum()


def test_default_device_context_matches_eager():
    x = torch.randn(2)
    compiled = kiln.compile(ones_plus)
    kiln.reset()
    with torch.device("meta"):
        expected = ones_plus(x)
        actual = compiled(x)
    assert actual.device == expected.device == torch.device("meta")
    out = compiled(x)  # outside the context again: CPU, as eager
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, ones_plus(x))


def scale(x):
    return (x * 2).cos()


def test_entry_compiled_outside_is_not_run_under_a_device_context():
    counts = []

    def backend(gm, example_inputs):
        counts.append(1)
        return gm.forward

    x = torch.randn(4)
    compiled = kiln.compile(scale, backend=backend)
    torch.testing.assert_close(compiled(x), scale(x))
    with torch.device("meta"):
        torch.testing.assert_close(compiled(x), scale(x))  # the guard checks the default device
    assert len(counts) == 2
    torch.testing.assert_close(compiled(x), scale(x))
    assert len(counts) == 2  # (the first entry serves again)


def enters_a_mode(x):
    y = x.sin()
    mode = Recorder()
    with mode:  # (a graph break: the rest runs in resume functions, under the mode)
        z = y.cos() * 2
    return z + 1, mode.seen


def test_mode_entered_inside_the_frame():
    x = torch.randn(3)
    expected, expected_seen = enters_a_mode(x)
    compiled = kiln.compile(enters_a_mode)
    for _ in range(2):
        actual, seen = compiled(x)
        assert seen == expected_seen == ["cos", "mul"]
        torch.testing.assert_close(actual, expected)


# --- frames compiled through the user's modes (Note [Frames: tracing a user's torch function
# modes]): each frame below must compile (fullgraph=True, graphs counted) and match eager


def counting_backend():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def many_calls(x, w):
    y = torch.relu(x @ w).sum(0).view(-1) + 1
    ops = x**2, 2**x, ~(x > 0), abs(x), x @ w  # (torch hands Tensor.__pow__, add, gt ...)
    return y, x.shape[0], -x, 1 - x, len(x), F.softmax(x, dim=-1), x.t().mul(2), *ops


def test_recording_mode_compiles_and_sees_eager_calls():
    x, w = torch.randn(8, 4), torch.randn(4, 3)
    with Recorder() as eager_mode:
        expected = many_calls(x, w)
    graphs, backend = counting_backend()
    compiled = kiln.compile(many_calls, backend=backend, fullgraph=True)
    for _ in range(2):
        with Recorder() as mode:
            actual = compiled(x, w)
        assert mode.seen == eager_mode.seen
        assert "__get__" in mode.seen and "softmax" in mode.seen  # (a getter, an F function)
        for a, e in zip(actual, expected, strict=True):
            torch.testing.assert_close(a, e)
    assert len(graphs) == 1  # compiled once, under the mode


class Rewriter(TorchFunctionMode):
    """torch.add returns zeros; Tensor.mul multiplies by `factor` instead; sin runs twice."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.add:
            return torch.zeros_like(args[0])
        if func is torch.Tensor.mul:
            return func(args[0], self.factor, **kwargs)
        if func is torch.sin:
            return func(func(*args, **kwargs))
        return func(*args, **kwargs)


def rewritten(x):
    return torch.add(x, 1) + x.mul(3) + torch.sin(x)


def test_mode_rewrites_calls_and_results():
    x = torch.randn(5)
    graphs, backend = counting_backend()
    compiled = kiln.compile(rewritten, backend=backend, fullgraph=True)
    for factor in (10, 10, 7):  # (the mode's attribute is guarded: 7 compiles again)
        with Rewriter(factor):
            expected = rewritten(x)
            actual = compiled(x)
        torch.testing.assert_close(actual, expected)
    assert len(graphs) == 2
    torch.testing.assert_close(compiled(x), rewritten(x))  # no mode: as written


class Tagger(TorchFunctionMode):
    """Appends (tag, func name) to a shared log, then runs func."""

    def __init__(self, tag, log):
        super().__init__()
        self.tag, self.log = tag, log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.log.append((self.tag, func.__name__))
        return func(*args, **(kwargs or {}))


def two_ops(x):
    return torch.cos(x) * 2


def test_nested_modes_innermost_first():
    x = torch.randn(3)
    expected_log, actual_log = [], []
    graphs, backend = counting_backend()
    compiled = kiln.compile(two_ops, backend=backend, fullgraph=True)
    with Tagger("outer", expected_log), Tagger("inner", expected_log):
        expected = two_ops(x)
    with Tagger("outer", actual_log), Tagger("inner", actual_log):
        actual = compiled(x)
    assert actual_log == expected_log
    assert expected_log[:2] == [("inner", "cos"), ("outer", "cos")]
    torch.testing.assert_close(actual, expected)
    assert len(graphs) == 1


class Plain1(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class Plain2(Plain1):
    pass


def test_recompile_when_the_mode_stack_changes():
    x = torch.ones(2, 2)
    graphs, backend = counting_backend()
    compiled = kiln.compile(lambda t: t + 1, backend=backend)
    stacks = [(), (Plain1,), (Plain1, Plain2), (Plain2, Plain1), (Plain1,), ()]
    counts = []
    for stack in stacks:
        with contextlib.ExitStack() as es:
            for cls in stack:
                es.enter_context(cls())
            torch.testing.assert_close(compiled(x), x + 1)
        counts.append(len(graphs))
    assert counts == [1, 2, 3, 4, 4, 4]


def enters_given_mode(x, mode):
    with mode:
        y = torch.add(x, 3)
    return torch.add(y, 1)


def test_mode_passed_in_and_entered_inside_the_frame():
    x = torch.randn(3)
    eager_mode, mode = Rewriter(2), Rewriter(2)
    expected = enters_given_mode(x, eager_mode)
    graphs, backend = counting_backend()
    compiled = kiln.compile(enters_given_mode, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x, mode), expected)  # (zeros + 1: the mode's add)
    assert torch.overrides._get_current_function_mode_stack() == []
    assert len(graphs) == 1


def records_inside(x, mode):
    with mode:
        y = x.sin() + 1
    return y.cos()


def test_recording_mode_entered_inside_the_frame():
    x = torch.randn(3)
    eager_mode, mode = Recorder(), Recorder()
    expected = records_inside(x, eager_mode)
    compiled = kiln.compile(records_inside, fullgraph=True)
    torch.testing.assert_close(compiled(x, mode), expected)
    assert mode.seen == eager_mode.seen == ["sin", "add"]


def _handle(self, func, types, args=(), kwargs=None):
    return func(*args, **(kwargs or {}))


class _Handler:
    """A descriptor that binds _handle (a method made at lookup: no function kiln can read)."""

    def __get__(self, obj, cls=None):
        return _handle.__get__(obj, cls)


class CHandler(TorchFunctionMode):
    """A mode whose __torch_function__ is no Python function (kiln does not trace it)."""

    __torch_function__ = _Handler()


def test_fullgraph_names_a_mode_kiln_cannot_trace():
    compiled = kiln.compile(lambda t: t + 1, fullgraph=True)
    with CHandler(), pytest.raises(kiln.exc.Unsupported, match="CHandler: a __torch_function__"):
        compiled(torch.ones(2))
    with Plain1(), pytest.raises(kiln.exc.Unsupported, match="default-device"):
        with torch.device("cpu"):  # (a user mode with the default-device mode: runs eagerly)
            compiled(torch.ones(2))
    not_full = kiln.compile(lambda t: t + 1)
    with CHandler():  # (eagerly, as before)
        torch.testing.assert_close(not_full(torch.ones(2)), torch.ones(2) + 1)


class ReadsTypes(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n = len(types)
        return func(*args, **(kwargs or {}))


def test_mode_reading_types_breaks_with_the_reason():
    x = torch.randn(3)
    compiled = kiln.compile(lambda t: t.sin() + 1, fullgraph=True)
    with ReadsTypes(), pytest.raises(kiln.exc.Unsupported, match="`types`"):
        compiled(x)
    compiled = kiln.compile(lambda t: t.sin() + 1)  # (not fullgraph: eager's answer)
    with ReadsTypes() as eager_mode:
        expected = x.sin() + 1
    with ReadsTypes() as mode:
        actual = compiled(x)
    torch.testing.assert_close(actual, expected)
    assert mode.n == eager_mode.n == 0  # (Tensor.add's, the last call)


def breaks_in_the_middle(x, log):
    y = x.sin() * torch.device("cpu").type.__len__()  # (torch.device goes to the mode too)
    log.append(torch._C._len_torch_function_stack())  # (the depth, as eager sees it)
    print("", end="")  # (a graph break: the rest compiles again, under the mode)
    return y.cos() + len(log)


def test_graph_break_under_a_mode_resumes_through_it():
    x = torch.randn(3)
    expected_log, actual_log = [], []
    graphs, backend = counting_backend()
    compiled = kiln.compile(breaks_in_the_middle, backend=backend)
    with Recorder() as eager_mode:
        expected = breaks_in_the_middle(x, expected_log)
    with Recorder() as mode:
        actual = compiled(x, actual_log)
    assert mode.seen == eager_mode.seen
    assert "device" in mode.seen and actual_log == expected_log == [1]
    torch.testing.assert_close(actual, expected)
    assert len(graphs) == 2  # (both halves compiled)


class AddIsOnes(torch.Tensor):
    """torch.add on it returns ones (its own __torch_function__)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.add:
            return torch.ones(2)
        return super().__torch_function__(func, types, args, kwargs or {})


def add_three(x):
    return torch.add(x, 3)


@pytest.mark.parametrize(
    "disable", [torch._C.DisableTorchFunction, torch._C.DisableTorchFunctionSubclass]
)
def test_called_with_torch_function_disabled(disable):
    x = torch.zeros(2).as_subclass(AddIsOnes)
    graphs, backend = counting_backend()
    compiled = kiln.compile(add_three, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x), add_three(x))  # (ones: the class's handler)
    with disable():
        expected = add_three(x)
        actual = compiled(x)  # (the handler is off: 3s, compiled again)
    torch.testing.assert_close(actual.as_subclass(torch.Tensor), torch.full((2,), 3.0))
    torch.testing.assert_close(actual.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
    torch.testing.assert_close(compiled(x), add_three(x))
    assert len(graphs) == 2


def test_modes_under_disable_torch_function():
    x = torch.randn(2)
    graphs, backend = counting_backend()
    compiled = kiln.compile(add_three, backend=backend, fullgraph=True)
    with Rewriter(5):
        with torch._C.DisableTorchFunction():  # (the mode is not called: compiled without it)
            torch.testing.assert_close(compiled(x), add_three(x))
        torch.testing.assert_close(compiled(x), torch.zeros(2))  # (the mode's torch.add)
    assert len(graphs) == 2


def writes_items(x):
    y = x + 1
    y[0] = 5
    y.__setitem__(1, 6)
    return y


@pytest.mark.parametrize("backend", ["kiln", "eager"])
def test_user_mode_sees_item_stores(backend):
    # (`y[0] = v` hands the mode Tensor.__setitem__, as eager does; it made its node unseen)
    x = torch.randn(3)
    with Recorder() as eager_mode:
        expected = writes_items(x)
    kiln.reset()
    with Recorder() as mode:
        actual = kiln.compile(writes_items, backend=backend, fullgraph=True)(x)
    assert mode.seen == eager_mode.seen == ["add", "__setitem__", "__setitem__"]
    torch.testing.assert_close(actual, expected)
