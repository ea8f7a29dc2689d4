"""`torch.nn.Parameter(x)` of a tensor the frame was given: made before the graph and fed to it,
a real Parameter (a new leaf on x's storage) that gradients reach (Note [Modules: parameters
made in the frame])."""

import pytest
import torch
from frontend_helpers import assert_same, run_and_compare

import kiln

BACKENDS = ["eager", "aot_eager", "kiln"]


def scaled(x, w):
    p = torch.nn.Parameter(w)
    return (x * p).sum(), p


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_of_an_input_gets_gradients(backend):
    x, w = torch.randn(4), torch.randn(4)
    kiln.reset()
    compiled = kiln.compile(scaled, backend=backend, fullgraph=True)
    for _ in range(2):
        expected, p_eager = scaled(x, w)
        got, p = compiled(x, w)
        assert type(p) is torch.nn.Parameter and p.is_leaf and p.requires_grad
        assert p.data_ptr() == w.data_ptr()  # (w's storage, as eager's)
        expected.backward()
        got.backward()
        assert_same(expected, got)
        assert_same(p_eager.grad, p.grad)
    assert kiln.counters["stats"]["unique_graphs"] == 1


def frozen(x):
    p = torch.nn.Parameter(x, requires_grad=False)
    return x * p, p.requires_grad, isinstance(p, torch.nn.Parameter)


def test_parameter_without_grad_under_inference_mode():
    with torch.inference_mode():
        run_and_compare(frozen, torch.rand(4), backend="eager", fullgraph=True, expected_graphs=1)


class Holder:
    pass


def stored(x, w, holder):
    holder.p = torch.nn.Parameter(w, requires_grad=False)
    return x * holder.p


def test_parameter_stored_on_an_object_is_the_real_one():
    x, w, holder = torch.randn(3), torch.randn(3), Holder()
    expected = stored(x, w, Holder())
    kiln.reset()
    got = kiln.compile(stored, backend="aot_eager", fullgraph=True)(x, w, holder)
    assert_same(expected, got)
    assert type(holder.p) is torch.nn.Parameter and not holder.p.requires_grad
    assert holder.p.data_ptr() == w.data_ptr()


def of_a_frame_tensor(x):
    return torch.nn.Parameter(x + 1) * 2


def written_first(x):
    x.add_(1)
    return torch.nn.Parameter(x) * 2


@pytest.mark.parametrize("fn", [of_a_frame_tensor, written_first])
def test_parameter_of_a_value_made_or_written_in_the_frame_breaks(fn):
    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported, match=r"torch.nn.Parameter\(\) of a tensor"):
        kiln.compile(fn, fullgraph=True)(torch.randn(3))
    run_and_compare(fn, torch.randn(3), expected_breaks=1)


class Rebound(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.new_weight = torch.randn(2, 3)

    def forward(self, x):
        self.lin.weight = torch.nn.Parameter(self.new_weight, requires_grad=False)
        return self.lin(x)


def _rebound_pair():
    eager, mod = Rebound(), Rebound()
    mod.load_state_dict(eager.state_dict())
    mod.new_weight = eager.new_weight.clone()
    return eager, mod


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_replaced_on_a_module(backend):
    x = torch.randn(4, 3)
    eager, mod = _rebound_pair()
    kiln.reset()
    compiled = kiln.compile(mod, backend=backend, fullgraph=True)
    for _ in range(2):
        assert_same(eager(x), compiled(x))
        assert type(mod.lin.weight) is torch.nn.Parameter and not mod.lin.weight.requires_grad
        assert mod.lin.weight.data_ptr() == mod.new_weight.data_ptr()
        assert_same(dict(eager.named_parameters()), dict(mod.named_parameters()))
    stats = kiln.counters["stats"]
    assert stats["unique_graphs"] == 1 and stats["recompiles"] == 0


def replaced_then_listed(mod, x):
    mod.lin.weight = torch.nn.Parameter(mod.new_weight)
    return mod.lin(x), [p.shape for p in mod.lin.parameters()]


def test_parameters_listed_after_a_replacement_break():
    x = torch.randn(4, 3)
    eager, mod = _rebound_pair()
    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported, match="after a parameter was replaced"):
        kiln.compile(replaced_then_listed, fullgraph=True)(mod, x)
    eager, mod = _rebound_pair()
    kiln.reset()
    assert_same(replaced_then_listed(eager, x), kiln.compile(replaced_then_listed)(mod, x))
    assert_same(dict(eager.named_parameters()), dict(mod.named_parameters()))
