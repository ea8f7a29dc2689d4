"""kiln.leaf_function: one opaque kiln::leaf_call node whose real body runs at run time."""

import pytest
import torch

import kiln

CALLS = []


@kiln.leaf_function
def scale_and_sum(x, y, k):
    CALLS.append(1)
    return (x * y + k, x.sum())


@scale_and_sum.register_fake
def _scale_and_sum_fake(x, y, k):
    return (torch.empty_like(x), x.new_empty(()))


def use_leaf(x, y):
    a, b = scale_and_sum(x.sin(), y, 2)
    return a.cos() + b


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_outputs_side_effects_and_gradients_match_eager(backend):
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    ref = use_leaf(x, y)
    ref.sum().backward()
    grads = (x.grad, y.grad)
    x.grad = y.grad = None
    CALLS.clear()
    compiled = kiln.compile(use_leaf, backend=backend, fullgraph=True)
    out = compiled(x, y)
    assert len(CALLS) == 1  # the real body ran once, at run time
    out.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close((x.grad, y.grad), grads)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, y), use_leaf(x, y))
    assert len(CALLS) == 3


@kiln.leaf_function
def no_fake(x):
    return (x + 1,)


def test_a_leaf_without_a_fake_raises_in_eager():
    with pytest.raises(ValueError, match="requires a fake implementation"):
        no_fake(torch.ones(2))


def test_mutates_args_must_name_a_parameter():
    with pytest.raises(ValueError, match="not a parameter"):
        kiln.leaf_function(lambda x: x, mutates_args={"buf"})


@kiln.leaf_function(mutates_args={"buf"})
def accumulate(x, buf):
    buf.add_(x)
    return {"double": x * 2, "total": x.sum()}


@accumulate.register_fake
def _accumulate_fake(x, buf):
    return {"double": torch.empty_like(x), "total": x.new_empty(())}


def uses_accumulate(x, buf):
    out = accumulate(x.cos(), buf)
    return out["double"] + out["total"], buf * 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_mutated_argument_and_dict_output_match_eager(backend):
    x = torch.randn(3)
    expected_buf, got_buf = torch.zeros(3), torch.zeros(3)
    expected = uses_accumulate(x, expected_buf)
    got = kiln.compile(uses_accumulate, backend=backend, fullgraph=True)(x, got_buf)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_buf, expected_buf)  # the mutation reached the caller's tensor
