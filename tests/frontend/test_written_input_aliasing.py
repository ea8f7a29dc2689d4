"""An input the graph writes in place, passed again in another place, recompiles (Note [Output
graph: inputs the graph writes]), as torch.compile's aliasing guard does; eager is the oracle."""

import torch
from frontend_helpers import CountingBackend

import kiln


def _add_into_first(a, b, c):
    a.add_(b)
    return c + 1


def _run(fn, compiled, *make_args):
    eager_args, comp_args = make_args[0](), make_args[0]()
    expected, got = fn(*eager_args), compiled(*comp_args)
    torch.testing.assert_close(got, expected)
    for e, c in zip(eager_args, comp_args):
        torch.testing.assert_close(c, e)


def test_a_written_input_passed_twice_recompiles_and_matches_eager():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(_add_into_first, backend=backend, fullgraph=True)
    x, y, z = torch.randn(3), torch.randn(3), torch.randn(3)
    _run(_add_into_first, compiled, lambda: (x.clone(), y.clone(), z.clone()))
    _run(_add_into_first, compiled, lambda: (z.clone(), y.clone(), x.clone()))
    assert len(backend.graphs) == 1  # distinct inputs again: the same entry

    def aliased():
        t = x.clone()
        return t, y.clone(), t

    _run(_add_into_first, compiled, aliased)  # c is a: eager returns the written a plus one
    assert len(backend.graphs) == 2  # a new entry traced with one input in both places
    placeholders = [n for n in backend.graphs[1].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 2


def test_inputs_that_are_only_read_get_no_distinct_guard():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(lambda a, c: a * 2 + c, backend=backend, fullgraph=True)
    x = torch.randn(3)
    compiled(x, torch.randn(3))
    torch.testing.assert_close(compiled(x, x), x * 3)
    assert len(backend.graphs) == 1  # (nothing is written: passing x twice needs no new trace)
