"""A namedtuple class with its own __getitem__: its items are read as tuple storage (an input's
graph inputs), and `p[i]` in the frame runs the class's method, as eager does."""

import typing

import torch
from frontend_helpers import run_and_compare


class Pair(typing.NamedTuple):
    first: torch.Tensor
    second: torch.Tensor

    def __getitem__(self, index):
        """Indexes both fields (a batch of pairs), not the tuple."""
        return Pair(self.first[index], self.second[index])


def test_input_fields_read_as_storage():
    def fn(p):
        return p.first + 1, p.second * 2

    run_and_compare(fn, Pair(torch.randn(3), torch.randn(3)), fullgraph=True, expected_graphs=1)


def test_subscript_of_an_input_runs_the_method():
    def fn(p):
        q = p[1]
        return q.first + q.second

    run_and_compare(fn, Pair(torch.randn(4), torch.randn(4)), fullgraph=True)


def test_subscript_of_one_made_in_the_frame():
    def fn(x):
        p = Pair(x, x * 2)
        q = p[0:2]
        return q.first, q.second, len(p)

    run_and_compare(fn, torch.randn(5), fullgraph=True)
