"""Values of torch's own that compiled code reaches: TorchScript functions (traced as the Python
function they came from), `torch._check_is_size`, `torch.broadcast_shapes` of known sizes,
objects of a traced library's module (torch.distributions' constraints)."""

import pytest
import torch
from torch.distributions import constraints

import kiln
from tests.frontend.frontend_helpers import run_and_compare


def scaled_sum(a, b):
    return a + b * 0.67


SCRIPTED = torch.jit.script(scaled_sum)
TRACED = torch.jit.trace(scaled_sum, [torch.zeros(4), torch.zeros(4)])


@pytest.mark.parametrize("script_fn", [SCRIPTED, TRACED], ids=["script", "trace"])
def test_torchscript_function_is_traced_as_its_python(script_fn):
    def f(a, b):
        return script_fn(a, b).relu() + 1

    run_and_compare(f, torch.randn(4), torch.randn(4), expected_graphs=1, fullgraph=True)


def difference(a, b):
    return a - b


def test_another_torchscript_function_recompiles():
    other = torch.jit.script(difference)
    fns = {"f": SCRIPTED}

    def f(a, b):
        return fns["f"](a, b)

    kiln.reset()
    compiled = kiln.compile(f, backend="eager", fullgraph=True)
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(compiled(a, b), SCRIPTED(a, b))
    fns["f"] = other
    torch.testing.assert_close(compiled(a, b), a - b)


def sized_view(t, scale):
    u0 = t[0].item()
    u1 = t[1].item()
    torch._check_is_size(u0)
    torch._check_is_size(u1, max=8)
    return torch.ones(u0, u1) * scale


def test_check_is_size_of_values_read_from_data(monkeypatch):
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)
    kiln.reset()
    compiled = kiln.compile(sized_view, backend="eager", fullgraph=True)
    t = torch.tensor([2, 4], dtype=torch.int32)
    torch.testing.assert_close(compiled(t, 8), sized_view(t, 8))
    for bad in ([-1, 4], [2, 9]):  # (eager raises the check's RuntimeError)
        with pytest.raises(RuntimeError):
            sized_view(torch.tensor(bad, dtype=torch.int32), 8)
        with pytest.raises(RuntimeError):
            compiled(torch.tensor(bad, dtype=torch.int32), 8)


def broadcast(x, y):
    shape = torch.broadcast_shapes(x.shape, (1, 5), y.shape)
    return x.expand(shape) + y, shape


def test_broadcast_shapes_of_known_sizes_folds():
    run_and_compare(broadcast, torch.randn(3, 1), torch.randn(5), expected_breaks=0)


def test_constraint_object_of_a_traced_library():
    def f(x):
        return constraints.real.check(x) & constraints.positive.check(x)

    run_and_compare(f, torch.tensor([1.0, -1.0, float("inf")]), expected_breaks=0)


def test_compiling_a_torchscript_function_compiles_its_python():
    compiled = kiln.compile(SCRIPTED, backend="eager", fullgraph=True)
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(compiled(a, b), SCRIPTED(a, b))


@pytest.mark.parametrize("make", ["script", "trace", "freeze"])
def test_compiling_a_torchscript_module_is_a_clear_error(make):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3)).eval()
    if make == "trace":
        scripted = torch.jit.trace(model, torch.randn(1, 3))
    else:
        scripted = torch.jit.script(model)
        if make == "freeze":
            scripted = torch.jit.freeze(scripted)
    with pytest.raises(RuntimeError, match="does not compile a TorchScript module"):
        kiln.compile(scripted)
