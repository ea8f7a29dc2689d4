"""What the frontend does not capture: the frame runs eagerly (correctly), or fullgraph raises."""

import pytest
import torch
from frontend_helpers import LogCapture, run_and_compare

import kiln
from kiln import logs
from kiln.exc import Unsupported


def prints(x):
    y = x + 1
    print("hello")
    return y


def item_branch(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def uses_item(x):
    return x * round(x.sum().item())  # (round() needs the value in Python: a break)


def mutates_input_list(xs):
    xs.append(xs[0] * 2)
    return xs


def sets_attribute(obj, x):
    obj.last = x
    return x + 1


class Obj:
    pass


def with_block(x):
    with torch.no_grad():
        return x * 2


def raises(x):
    raise ValueError("boom")


def calls_numpy(x):
    import numpy as np

    return np.add(1, 2) + x


@pytest.mark.parametrize(
    "fn,args,graphs,frames,breaks",
    [
        # a graph break: graph so far, the instruction in Python, a compiled resume function
        (prints, (torch.randn(3),), 1, 2, 1),
        (item_branch, (torch.randn(3),), 2, 2, 1),
        (uses_item, (torch.randn(3),), 2, 2, 1),
        (mutates_input_list, ([torch.randn(2)],), 1, 1, 0),  # replayed side effect
        # grad-mode `with` blocks are traced into the graph
        (with_block, (torch.randn(2),), 1, 1, 0),
        # an exception leaving the frame: a break at the raise, which Python runs
        (raises, (torch.randn(2),), 0, 1, 1),
        # an already-imported module is imported while tracing; numpy is traced (it ran in
        # Python with 2 breaks before Note [NumPy: arrays as tensors])
        (calls_numpy, (torch.randn(2),), 1, 1, 0),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else None,
)
def test_unsupported_is_correct(fn, args, graphs, frames, breaks):
    run_and_compare(
        fn, *args, expected_graphs=graphs, expected_frames=frames, expected_breaks=breaks
    )


def test_setattr_is_replayed_after_the_graph():
    o = Obj()
    kiln.reset()
    f = kiln.compile(sets_attribute, backend="eager")
    x = torch.randn(2)
    torch.testing.assert_close(f(o, x), x + 1)
    assert o.last is x


def test_fullgraph_error_names_reason_file_line_and_source():
    f = kiln.compile(prints, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported) as info:
        f(torch.randn(2))
    msg = str(info.value)
    assert "print" in msg
    line = prints.__code__.co_firstlineno + 2
    assert f"test_unsupported.py:{line}" in msg
    assert 'print("hello")' in msg


def test_fullgraph_error_inside_inlined_call_names_inner_line():
    def outer(x):
        return uses_item(x) + 1

    f = kiln.compile(outer, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported, match="item") as info:
        f(torch.randn(2))
    assert f"test_unsupported.py:{uses_item.__code__.co_firstlineno + 1}" in str(info.value)
    assert "return x * round(x.sum().item())" in str(info.value)


def test_graph_break_call_falls_back_and_is_logged():
    def fn(x):
        temp = x + 10
        kiln.graph_break()
        return temp.sum()

    logs.set_logs("graph_breaks")
    try:
        with LogCapture("graph_breaks") as cap:
            run_and_compare(fn, torch.randn(4), expected_breaks=1)
    finally:
        logs.set_logs("")
    assert any("kiln.graph_break() called" in m for m in cap.messages["graph_breaks"])
    assert kiln.counters["graph_break"]["kiln.graph_break() called"] == 1


def test_unsupported_carries_state_for_resume():
    def fn(x, n):
        y = x * n
        print(y.shape)
        return y

    kiln.reset()
    f = kiln.compile(fn, backend="eager", fullgraph=True)
    with pytest.raises(Unsupported) as info:
        f(torch.randn(2), 3)
    e = info.value
    assert e.root_index is not None and isinstance(e.root_stack, list)
    assert set(e.root_locals) >= {"x", "n", "y"}
    assert e.frames[-1][0] is fn.__code__


def try_block(x):
    try:
        y = x[torch.tensor([5])]  # out of range: raises at run time, not on meta
    except IndexError:
        y = x * 0
    return y


def test_try_block_keeps_its_handler():
    # Note [Blocks: ops inside try blocks]: compiled; the failing call runs again in Python
    run_and_compare(try_block, torch.randn(3), expected_graphs=1, expected_breaks=0)
    assert kiln.counters["frames"]["eager_reruns"] == 2


class Config:
    flag = False


def try_finally(x, cfg):
    old = cfg.flag
    cfg.flag = True
    try:
        y = x * 2 if cfg.flag else x
    finally:
        cfg.flag = old
    return y + 1


def test_try_finally_normal_path_is_traced():
    cfg = Config()
    run_and_compare(try_finally, torch.randn(3), cfg, expected_graphs=1, expected_breaks=0)
    assert cfg.flag is False


def swallows(x):
    try:
        y = x[torch.tensor([7])]
    except IndexError:
        y = x
    return y * 2


def constant_try(x, n):
    try:
        k = int("5") + n
    except ValueError:
        k = 0
    return x * k


def test_tensor_op_inside_try_except_reruns_in_python_when_it_raises():
    run_and_compare(swallows, torch.randn(3), expected_graphs=1, expected_breaks=0)
    assert kiln.counters["frames"]["eager_reruns"] == 2


def test_constant_code_inside_try_except_is_traced():
    run_and_compare(constant_try, torch.randn(3), 2, expected_graphs=1, expected_breaks=0)


def test_global_state_setters_are_not_run_while_tracing(monkeypatch):
    calls = []
    real = torch.set_printoptions

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    spy.__module__ = "torch._tensor_str"
    spy.__name__ = "set_printoptions"
    monkeypatch.setattr(torch, "set_printoptions", spy)

    def f(x):
        y = x * 2
        torch.set_printoptions(precision=4)
        return y + 1

    kiln.reset()
    cf = kiln.compile(f, backend="eager")
    torch.testing.assert_close(cf(torch.ones(2)), torch.full((2,), 3.0))
    assert len(calls) == 1  # once, by the transformed code: never while tracing
    assert kiln.counters["stats"]["graph_breaks"] == 1
    real(profile="default")


def test_wrapped_root_function_binds_its_own_signature():
    import functools

    def base(a, b=2):
        return a * b

    @functools.wraps(base)
    def wrapper(*args, **kwargs):
        return base(*args, **kwargs) + 1

    run_and_compare(wrapper, torch.randn(3), b=3, expected_graphs=1, expected_breaks=0)


def test_torch_objects_are_not_ops_and_train_step_matches_eager():
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    for optcls in (torch.optim.SGD, torch.optim.Adam):
        m1, m2 = copy.deepcopy(model), copy.deepcopy(model)
        o1, o2 = optcls(m1.parameters(), lr=0.1), optcls(m2.parameters(), lr=0.1)

        def step(m, o, x, y):
            o.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            o.step()
            return loss

        kiln.reset()
        cstep = kiln.compile(step, backend="eager")
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        for _ in range(3):
            torch.testing.assert_close(cstep(m1, o1, x, y), step(m2, o2, x, y))
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(p, q)
        assert kiln.counters["stats"]["unique_graphs"] >= 1


def test_fullgraph_rejects_backward_without_compiled_autograd():
    """Only compiled autograd captures a .backward(); without it, fullgraph names the call."""
    assert not kiln.config.compiled_autograd
    w = torch.randn(3, requires_grad=True)

    def step(x):
        loss = (w * x).sum()
        loss.backward()
        return loss

    with pytest.raises(Unsupported, match=r"Tensor\.backward\(\)"):
        kiln.compile(step, backend="eager", fullgraph=True)(torch.randn(3))
