"""torch called the ways libraries and test suites call it: unbound Tensor methods held in
objects, torch's Python functions that ask `has_torch_function`, non-strided tensor inputs."""

import torch
from frontend_helpers import run_and_compare


class Holder:
    """An object holding a callable, as an op table (OpInfo) does."""

    def __init__(self, fn):
        self.fn = fn


def test_unbound_tensor_method_from_an_attribute():
    h = Holder(torch.Tensor.add)

    def f(x, y):
        return h.fn(x, y, alpha=2) * 3

    run_and_compare(f, torch.randn(4), torch.randn(4), expected_graphs=1, expected_breaks=0)


def test_unbound_tensor_slot_wrapper_from_an_attribute():
    h = Holder(torch.Tensor.__getitem__)

    def f(x):
        return h.fn(x, (slice(1, None), 0)).sin()

    run_and_compare(f, torch.randn(4, 3), expected_graphs=1, expected_breaks=0)


def test_einsum_and_meshgrid_fold_has_torch_function():
    def f(a, b):
        gx, gy = torch.meshgrid(a, b, indexing="ij")
        return torch.einsum("i,j->ij", a, b) + gx * gy

    run_and_compare(f, torch.randn(3), torch.randn(5), expected_graphs=1, expected_breaks=0)


def test_has_torch_function_of_a_subclass_is_not_folded():
    class Traced(torch.Tensor):
        pass

    def f(x):
        return torch.einsum("ij->ji", x)

    run_and_compare(f, torch.randn(2, 3).as_subclass(Traced))


def test_sparse_input_breaks_and_runs_eagerly():
    def f(x, y):
        return torch.sparse.mm(x, y) + 1

    x = torch.eye(3).to_sparse()
    run_and_compare(f, x, torch.randn(3, 2), expected_graphs=0)
