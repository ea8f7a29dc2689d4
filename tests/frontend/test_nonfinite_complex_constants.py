"""Complex constants with nan or inf parts in a graph's code (Note [Graphs: complex constants that
are not finite]): their repr, "(1+nanj)", must evaluate to them again."""

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare

VALUES = [complex(1.0, float("nan")), complex(float("inf"), 2.0), complex(-1.0, float("-inf"))]


def add_across_breaks(x):
    a, b = VALUES[0], VALUES[2]
    kiln.graph_break()
    x = x + a
    kiln.graph_break()
    return x * b


def in_one_graph(x):
    return [x * v for v in VALUES] + [x + complex(float("nan"), float("nan"))]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_nonfinite_complex_constants(backend):
    x = torch.tensor([0.5 + 1j, -2.0 + 0j])
    run_and_compare(in_one_graph, x, backend=backend, expected_breaks=0)
    run_and_compare(add_across_breaks, x, backend=backend)
