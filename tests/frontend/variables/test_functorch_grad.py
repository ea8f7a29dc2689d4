"""torch.func.grad and grad_and_value traced as one call that differentiates the traced body
(Note [Grad: the body traced, torch.func.grad applied at run time]), alone and under vmap."""

import pytest
import torch
from frontend_helpers import LogCapture, run_and_compare
from torch import nn
from torch.func import functional_call, grad, grad_and_value, vmap

import kiln
from kiln import logs


def f(x, y):
    return (x.sin() * y).sum()


def f_aux(x, y):
    return (x * y).sum(), {"cos": x.cos(), "pair": (y * 2, x)}


CASES = {
    "grad": lambda x, y: grad(f)(x, y),
    "argnums_tuple": lambda x, y: grad(f, argnums=(0, 1))(x, y),
    "negative_argnum": lambda x, y: grad(f, argnums=-1)(x, y),
    "grad_and_value": lambda x, y: grad_and_value(f)(x, y),
    "has_aux": lambda x, y: grad(f_aux, has_aux=True)(x, y),
    "value_and_aux": lambda x, y: grad_and_value(f_aux, argnums=1, has_aux=True)(x, y),
    "second_order": lambda x, y: grad(lambda a: grad(lambda b: (b**3 * y).sum())(a).sum())(x),
    "closure": lambda x, y: grad(lambda a: (a * y.exp()).sum())(x),
}


@pytest.mark.parametrize("case", list(CASES))
def test_grad_forms_are_one_graph(case):
    fn = CASES[case]
    run_and_compare(fn, torch.randn(4), torch.randn(4), fullgraph=True, expected_graphs=1)


def test_a_dict_of_parameters_gets_a_dict_of_gradients():
    def loss(p, x):
        return (x @ p["w"] + p["b"]).tanh().sum()

    def fn(p, x):
        return grad(loss)(p, x)

    p = {"w": torch.randn(3, 2), "b": torch.randn(2)}
    run_and_compare(fn, p, torch.randn(5, 3), fullgraph=True, expected_graphs=1)


def test_per_sample_gradients():
    model = nn.Linear(3, 2)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, x, y):
        out = functional_call(model, p, (x.unsqueeze(0),))
        return nn.functional.mse_loss(out, y.unsqueeze(0))

    def per_sample(p, xs, ys):
        return vmap(grad(loss), in_dims=(None, 0, 0))(p, xs, ys)

    run_and_compare(
        per_sample, params, torch.randn(8, 3), torch.randn(8, 2), fullgraph=True, expected_graphs=1
    )


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_backends_and_gradients_through_the_result(backend):
    """MAML's inner step: the outer gradient flows through torch.func.grad's result."""
    w = torch.randn(3, requires_grad=True)

    def inner(w, x):
        return (x @ w).pow(2).sum()

    def outer(w, x):
        fast = w - 0.1 * grad(inner)(w, x)
        return (x @ fast).sum()

    x = torch.randn(4, 3)
    expected = torch.autograd.grad(outer(w, x), w)[0]
    kiln.reset()
    out = kiln.compile(outer, backend=backend, fullgraph=True)(w, x)
    torch.testing.assert_close(out, outer(w, x))
    torch.testing.assert_close(torch.autograd.grad(out, w)[0], expected)


def test_a_non_scalar_result_raises_as_eager():
    def fn(x):
        return grad(lambda a: a * 2)(x)

    run_and_compare(fn, torch.randn(3))


def test_an_integer_input_raises_as_eager():
    def fn(x):
        return grad(lambda a: a.sum())(x)

    run_and_compare(fn, torch.arange(3))


def test_metadata_queries_in_the_body_break():
    def fn(x):
        return grad(lambda a: a.sum() * (2 if a.requires_grad else 3))(x)

    run_and_compare(fn, torch.randn(3))


def two(x, y):
    return x * y, (x + y).sum()


def two_aux(x, y):
    return x * y.sin(), [x.cos(), y]


JACOBIANS = {
    "jacrev": lambda x, y: torch.func.jacrev(f)(x, y),
    "jacrev_argnums": lambda x, y: torch.func.jacrev(f, argnums=(0, 1))(x, y),
    "jacfwd": lambda x, y: torch.func.jacfwd(lambda a, b: a.sin() * b, argnums=1)(x, y),
    "hessian": lambda x, y: torch.func.hessian(lambda a: (a**3 * y).sum())(x),
    "two_outputs": lambda x, y: torch.func.jacrev(two)(x, y),
    "vmap_hessian": lambda x, y: vmap(torch.func.hessian(lambda p: (p.sin() * p.cos()).sum()))(
        torch.stack([x, y])
    ),
    "jacrev_has_aux": lambda x, y: torch.func.jacrev(
        lambda a: (a.sin() * y, {"cos": a.cos(), "pair": (y * 2, a)}), has_aux=True
    )(x),
    "jacfwd_has_aux": lambda x, y: torch.func.jacfwd(two_aux, argnums=(0, 1), has_aux=True)(x, y),
    "jacrev_two_outputs_aux": lambda x, y: torch.func.jacrev(
        lambda a: ((a * y, a.sum()), a.exp()), has_aux=True
    )(x),
}


def _one_graph(fn, backend):
    """fn(x, y) on two vectors: one graph under fullgraph=True, equal to eager."""
    run_and_compare(
        fn, torch.randn(3), torch.randn(3), fullgraph=True, expected_graphs=1, backend=backend
    )


@pytest.mark.parametrize("backend", ["eager", "kiln"])
@pytest.mark.parametrize("case", list(JACOBIANS))
def test_jacobians_are_one_graph(case, backend):
    """(jacfwd's graph holds `_efficientzerotensor`: real zeros in kiln's kernels)"""
    _one_graph(JACOBIANS[case], backend)


TREE_JACOBIANS = {
    "jacrev_dict": lambda p, x: torch.func.jacrev(lambda p: (p["w"] * x).sin())(p),
    "jacfwd_tuple_argnums": lambda p, x: torch.func.jacfwd(
        lambda p, x: (p["w"] * x + p["b"]).tanh(), argnums=(0, 1)
    )(p, x),
    "hessian_dict": lambda p, x: torch.func.hessian(lambda p: (p["w"] * p["b"] * x).sum())(p),
    "two_outputs": lambda p, x: torch.func.jacrev(lambda p: (p["w"] * x, p["b"].sum()))(p),
}


@pytest.mark.parametrize("case", list(TREE_JACOBIANS))
def test_jacobians_with_respect_to_trees(case):
    p = {"w": torch.randn(3), "b": torch.randn(3)}
    run_and_compare(
        TREE_JACOBIANS[case], p, torch.randn(3), fullgraph=True, expected_graphs=1, backend="kiln"
    )


def test_empirical_ntk_style_jacobians():
    """torch.func's NTK recipe: vmap(jacrev(f)) over a model's parameter dict."""
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def one(params, x):
        return functional_call(model, params, (x.unsqueeze(0),)).squeeze(0)

    def fn(params, xs):
        return vmap(torch.func.jacrev(one), (None, 0))(params, xs)

    run_and_compare(fn, params, torch.randn(5, 3), fullgraph=True, expected_graphs=1)


def test_the_graph_code_log_shows_each_body():
    def fn(w, xs):
        return vmap(grad(lambda w, x: (x @ w).sin().sum()), in_dims=(None, 0))(w, xs)

    logs.set_logs("graph_code")
    try:
        with LogCapture("graph_code") as cap:
            kiln.compile(fn, backend="eager")(torch.randn(3), torch.randn(4, 3))
    finally:
        logs.set_logs("")
    graph, vmap_body, grad_body = cap.messages["graph_code"]
    assert "functorch_vmap_vmap(l_w_, l_xs_)" in graph, graph
    assert "functorch_grad_grad(arg0, arg1)" in vmap_body, vmap_body
    assert "sin = matmul.sin()" in grad_body and "return sum_1" in grad_body, grad_body


JVPS = {
    "one": lambda x, v: torch.func.jvp(torch.sin, (x,), (v,)),
    "two_outputs": lambda x, v: torch.func.jvp(lambda a, b: (a * b, a.sin()), (x, x * 2), (v, v)),
    "under_vmap": lambda x, v: vmap(
        lambda t: torch.func.jvp(lambda a: (a**2).sum(), (x,), (t,))[1]
    )(torch.eye(3)),
    "has_aux": lambda x, v: torch.func.jvp(
        lambda a: (a.sin(), {"c": a.cos()}), (x,), (v,), has_aux=True
    ),
    "two_outputs_has_aux": lambda x, v: torch.func.jvp(
        lambda a, b: ((a * b, a.sum()), [b.exp()]), (x, x * 2), (v, v), has_aux=True
    ),
}


@pytest.mark.parametrize("backend", ["eager", "kiln"])
@pytest.mark.parametrize("case", list(JVPS))
def test_jvp_is_one_graph(case, backend):
    _one_graph(JVPS[case], backend)


def test_jvp_with_tangents_of_another_shape_raises_as_eager():
    def fn(x):
        return torch.func.jvp(torch.sin, (x,), (torch.ones(2),))

    run_and_compare(fn, torch.randn(3))


def test_has_aux_without_a_pair_raises_as_eager():
    fn = lambda x: torch.func.jacrev(lambda a: a.sin(), has_aux=True)(x)  # noqa: E731
    run_and_compare(fn, torch.randn(3))
