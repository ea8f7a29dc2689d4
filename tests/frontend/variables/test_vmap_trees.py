"""torch.vmap over arguments and results that are trees of tensors (Note [Vmap: arguments and
results as trees]): tuples, lists and dicts, in_dims and out_dims as tree prefixes."""

import copy

import pytest
import torch
from frontend_helpers import run_and_compare
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

import kiln


def test_an_ensemble_from_stack_module_state_is_one_graph():
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)) for _ in range(5)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")

    def one(params, buffers, x):
        return functional_call(base, (params, buffers), (x,))

    def ensemble(params, buffers, x):
        return vmap(one, in_dims=(0, 0, None))(params, buffers, x)

    run_and_compare(ensemble, params, buffers, torch.randn(6, 3), fullgraph=True, expected_graphs=1)


def test_dict_in_dims_per_key_and_nested_sequences():
    def f(d, pair):
        (a, b), c = pair
        return d["w"] * a + d["s"] - b.sum() + c[0]

    def fn(d, pair):
        return vmap(f, in_dims=({"w": 0, "s": None}, ((0, None), [1])))(d, pair)

    d = {"w": torch.randn(4, 3), "s": torch.randn(3)}
    pair = ((torch.randn(4, 3), torch.randn(2)), [torch.randn(3, 4)])
    run_and_compare(fn, d, pair, fullgraph=True, expected_graphs=1)


@pytest.mark.parametrize("out_dims", [0, 1, {"sum": 0, "parts": (1, 0)}])  # (a list: one dim)
def test_results_as_trees(out_dims):
    def f(x, y):
        return {"sum": x + y, "parts": (x.sin(), [y.cos(), x * 2])}

    def fn(x, y):
        return vmap(f, out_dims=out_dims)(x, y)

    run_and_compare(fn, torch.randn(4, 3), torch.randn(4, 3), fullgraph=True, expected_graphs=1)


def test_constants_in_a_tree_stay_constants():
    def f(cfg, x):
        return x * cfg["scale"] + cfg["shift"][1]

    def fn(x):
        return vmap(f, in_dims=(None, 0))({"scale": 3.0, "shift": (1, 2)}, x)

    run_and_compare(fn, torch.randn(5, 2), fullgraph=True, expected_graphs=1)


def test_in_dims_that_do_not_match_raise_as_eager():
    def fn(d):
        return vmap(lambda d: d["a"] * 2, in_dims=({"b": 0},))(d)

    run_and_compare(fn, {"a": torch.randn(3, 2)})


def test_gradients_through_a_vmapped_dict():
    def loss(p, x):
        def f(p, x):
            return (x @ p["w"] + p["b"]).tanh().sum()

        return vmap(f, in_dims=(0, None))(p, x).sum()

    p = {"w": torch.randn(4, 3, 2, requires_grad=True), "b": torch.randn(4, 2, requires_grad=True)}
    x = torch.randn(5, 3)
    expected = torch.autograd.grad(loss(p, x), list(p.values()))
    for backend in ("eager", "aot_eager", "kiln"):
        kiln.reset()
        out = kiln.compile(loss, backend=backend, fullgraph=True)(p, x)
        for e, g in zip(expected, torch.autograd.grad(out, list(p.values()))):
            torch.testing.assert_close(g, e)
