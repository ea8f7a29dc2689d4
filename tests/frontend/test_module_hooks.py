"""Forward pre-hooks and forward hooks on submodules are traced (Note [Modules: forward hooks]);
adding or removing a hook recompiles."""

import torch
import torch.nn as nn

import kiln


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1 = nn.Linear(4, 4)
        self.lin2 = nn.Linear(4, 2)

    def forward(self, x):
        return self.lin2(torch.relu(self.lin1(x)))


def make():
    torch.manual_seed(0)
    return Net()


def record_shape(mod, inputs, output):
    mod.last_shape = tuple(output.shape)  # (a stored attribute: replayed, not guarded)


def add_one(mod, inputs, output):
    return output + 1


def double_input(mod, args):
    return (args[0] * 2,)


def scale_single(mod, args):
    return args[0] * 0.5  # not a tuple: wrapped like Module.__call__ does


def test_forward_hooks_traced_in_one_graph():
    eager, comp = make(), make()
    for m in (eager, comp):
        m.lin1.register_forward_hook(record_shape)
        m.lin1.register_forward_hook(add_one)
        m.lin2.register_forward_pre_hook(double_input)
        m.lin2.register_forward_pre_hook(scale_single)
    x = torch.randn(3, 4)
    expected = eager(x)
    kiln.reset()
    opt = kiln.compile(comp, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(opt(x), expected)
    assert comp.lin1.last_shape == eager.lin1.last_shape == (3, 4)
    assert kiln.counters["stats"]["unique_graphs"] == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["recompiles"] == 0


def test_removing_a_hook_recompiles():
    m = make()
    handle = m.lin1.register_forward_hook(add_one)
    x = torch.randn(3, 4)
    kiln.reset()
    opt = kiln.compile(m, backend="eager")
    torch.testing.assert_close(opt(x), m(x))
    handle.remove()
    torch.testing.assert_close(opt(x), m(x))
    m.lin2.register_forward_pre_hook(double_input)
    torch.testing.assert_close(opt(x), m(x))
    assert kiln.counters["stats"]["recompiles"] == 2
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_hook_with_kwargs_runs_in_python():
    m, ref = make(), make()
    for mod in (m, ref):
        mod.lin1.register_forward_hook(lambda mod_, args, kw, out: out * 3, with_kwargs=True)
    x = torch.randn(3, 4)
    kiln.reset()
    torch.testing.assert_close(kiln.compile(m, backend="eager")(x), ref(x))


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale=1.0, bias=None):
        y = self.lin(x) * scale
        return y if bias is None else y + bias


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Scaled()

    def forward(self, x, b):
        return self.inner(x, bias=b).relu()


def pre_with_kwargs(mod, args, kwargs):
    kwargs = dict(kwargs)
    kwargs["scale"] = 2.0
    return (args[0] + 1,), kwargs


def post_with_kwargs(mod, args, kwargs, out):
    return out - kwargs["bias"] * args[0].sum()


def _outer_pair():
    torch.manual_seed(0)
    m = Outer()
    torch.manual_seed(0)
    ref = Outer()
    for mod in (m, ref):
        mod.inner.register_forward_pre_hook(pre_with_kwargs, with_kwargs=True)
        mod.inner.register_forward_hook(post_with_kwargs, with_kwargs=True)
    return m, ref


def test_hooks_with_kwargs_on_a_submodule_are_traced():
    m, ref = _outer_pair()
    x, b = torch.randn(3, 4), torch.randn(4)
    kiln.reset()
    opt = kiln.compile(m, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(opt(x, b), ref(x, b))
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1


def test_hooks_of_the_compiled_module_run_in_python_around_its_compiled_forward():
    calls = []
    torch.manual_seed(0)
    m = Scaled()
    torch.manual_seed(0)
    ref = Scaled()
    for mod in (m, ref):
        mod.register_forward_pre_hook(pre_with_kwargs, with_kwargs=True)
        mod.register_forward_hook(lambda mod_, args, out: calls.append(1))
    x, b = torch.randn(3, 4), torch.randn(4)
    kiln.reset()
    opt = kiln.compile(m, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(opt(x, bias=b), ref(x, bias=b))
    assert len(calls) == 4  # once per call, compiled and eager
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == 0 and stats["unique_graphs"] == 1  # the forward (hooks: Python)


def test_a_break_in_a_hook_keeps_the_submodule_forward_compiled():
    def pre_breaking(mod, args, kwargs):
        kiln.graph_break()
        return pre_with_kwargs(mod, args, kwargs)

    m, ref = _outer_pair()
    for mod in (m, ref):
        mod.inner._forward_pre_hooks.clear()
        mod.inner._forward_pre_hooks_with_kwargs.clear()
        mod.inner.register_forward_pre_hook(pre_breaking, with_kwargs=True)
    x, b = torch.randn(3, 4), torch.randn(4)
    kiln.reset()
    opt = kiln.compile(m, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(opt(x, b), ref(x, b))
    # Outer.forward before and after the call, and Scaled.forward (hooks in Python around it)
    assert kiln.counters["stats"]["unique_graphs"] >= 2
    assert kiln.counters["stats"]["graph_breaks"] == 1
