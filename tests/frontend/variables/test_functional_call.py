"""torch.func.functional_call traced as the module's call with the given tensors in its state
(Note [Modules: functional_call]): one graph, the originals untouched, torch's errors."""

import pytest
import torch
from frontend_helpers import run_and_compare
from torch import nn
from torch.func import functional_call

import kiln


class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.ModuleDict({"b": nn.ModuleDict({"e": nn.Linear(6, 6, bias=False)})})
        self.bn = nn.BatchNorm1d(6)

    def forward(self, x, scale=1.0):
        return self.bn(self.a.b.e(x)) * scale


def call(m, state, x):
    return functional_call(m, state, x)


def test_linear_with_new_weights_is_one_graph():
    m = nn.Linear(3, 3)

    def fn(w, b, x):
        return functional_call(m, {"weight": w, "bias": b}, x)

    run_and_compare(
        fn, torch.randn(3, 3), torch.randn(3), torch.randn(2, 3), fullgraph=True, expected_graphs=1
    )


def test_nested_names_and_buffers_update_the_given_tensors():
    m = Nested()  # (training: BatchNorm updates the running stats given, not its own)
    state = {k: v.clone() for k, v in m.state_dict().items()}
    run_and_compare(call, m, state, torch.randn(4, 6), fullgraph=True, expected_graphs=1)


def test_the_modules_own_state_is_untouched():
    m = Nested()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    state = {
        k: torch.randn_like(v) if v.is_floating_point() else v.clone()
        for k, v in m.state_dict().items()
    }
    eager_state = {k: v.clone() for k, v in state.items()}
    x = torch.randn(4, 6)
    out = kiln.compile(call, fullgraph=True)(m, state, x)
    torch.testing.assert_close(out, call(m, eager_state, x))
    for k, v in m.state_dict().items():
        torch.testing.assert_close(v, before[k])


def test_some_names_only_args_tuple_kwargs_and_list_of_dicts():
    m = Nested()

    def fn(w, x):
        return functional_call(m, ({"a.b.e.weight": w}, {"bn.bias": w[0]}), (x,), {"scale": 2.0})

    run_and_compare(fn, torch.randn(6, 6), torch.randn(4, 6), fullgraph=True, expected_graphs=1)


def test_new_weights_change_without_recompiling():
    m = nn.Linear(3, 2)
    compiled = kiln.compile(call, backend="eager", fullgraph=True)
    kiln.reset()
    x = torch.randn(5, 3)
    for _ in range(3):
        state = {"weight": torch.randn(2, 3), "bias": torch.randn(2)}
        torch.testing.assert_close(compiled(m, state, x), call(m, state, x))
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_gradients_flow_to_the_given_tensors():
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    params = {k: v.detach().requires_grad_() for k, v in m.named_parameters()}

    def loss(params, x):
        return functional_call(m, params, (x,)).pow(2).sum()

    x = torch.randn(5, 3)
    expected = torch.autograd.grad(loss(params, x), list(params.values()))
    for backend in ("eager", "aot_eager", "kiln"):
        kiln.reset()
        out = kiln.compile(loss, backend=backend, fullgraph=True)(params, x)
        got = torch.autograd.grad(out, list(params.values()))
        for e, g in zip(expected, got):
            torch.testing.assert_close(g, e)


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 4)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, i):
        return self.head(self.emb(i))


@pytest.mark.parametrize("tie", [True, False])
def test_tied_weights(tie):
    t = Tied()

    def fn(w, i):
        return functional_call(t, {"emb.weight": w}, i, tie_weights=tie)

    run_and_compare(fn, torch.randn(5, 4), torch.tensor([1, 3]), fullgraph=True)


def test_untying_later_recompiles():
    t = Tied()

    def fn(w, i):
        return functional_call(t, {"emb.weight": w}, i)

    compiled = kiln.compile(fn, backend="eager")
    w, i = torch.randn(5, 4), torch.tensor([0, 2])
    torch.testing.assert_close(compiled(w, i), fn(w, i))
    t.head.weight = nn.Parameter(torch.randn(5, 4))
    torch.testing.assert_close(compiled(w, i), fn(w, i))


@pytest.mark.parametrize(
    "state",
    [
        {"weight": torch.ones(2, 3)},  # missing bias
        {"weight": torch.ones(2, 3), "bias": torch.ones(2), "extra": torch.ones(1)},
    ],
)
def test_strict_errors_as_eager(state):
    m = nn.Linear(3, 2)

    def fn(x):
        return functional_call(m, state, (x,), strict=True)

    run_and_compare(fn, torch.randn(1, 3))


def test_a_name_in_two_dicts_raises_as_eager():
    m = nn.Linear(3, 2)

    def fn(w, x):
        return functional_call(m, ({"weight": w}, {"weight": w}), (x,))

    run_and_compare(fn, torch.randn(2, 3), torch.randn(1, 3))


def test_parameter_listings_inside_the_call_break():
    class UsesParameters(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x) * sum(p.sum() for p in self.parameters())

    m = UsesParameters()

    def fn(w, x):
        return functional_call(m, {"lin.weight": w}, (x,)) + 1

    run_and_compare(fn, torch.randn(3, 3), torch.randn(2, 3))


def test_a_state_dict_itself():
    m = Nested().eval()
    run_and_compare(call, m, m.state_dict(), torch.randn(4, 6), fullgraph=True, expected_graphs=1)


def test_a_name_the_module_lacks_is_set_for_the_call():
    class ReadsExtra(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            scale = self.extra if hasattr(self, "extra") else 1.0
            return self.lin(x) * scale

    m = ReadsExtra()

    def fn(s, x):
        return functional_call(m, {"extra": s}, (x,)) + functional_call(m, {}, (x,))

    run_and_compare(fn, torch.randn(3), torch.randn(2, 3), fullgraph=True, expected_graphs=1)
