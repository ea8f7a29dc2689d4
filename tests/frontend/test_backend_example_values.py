"""A user backend that compiles for its example values: kiln specialises the frame's size
symbols so another value never reuses it (Note [Output graph: backends that read example
values])."""

import torch
from torch._functorch.aot_autograd import aot_module_simplified

import kiln


def _scaled_add(a, b, k):
    return torch.add(a, b, alpha=k)


def _torch_aot(gm, example_inputs):
    return aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, _: g.forward)


def _baking(gm, example_inputs):
    """Runs gm with the ints it was compiled for (a backend that specialises on its examples)."""
    baked = list(example_inputs)

    def run(*args):
        return gm(*[b if isinstance(b, int) else a for a, b in zip(args, baked)])

    return run


def test_dynamic_int_is_not_baked_by_a_user_backend():
    for backend in (_torch_aot, _baking):
        kiln.reset()
        f = kiln.compile(_scaled_add, backend=backend, dynamic=True)
        a = torch.arange(3.0, requires_grad=True)
        for k in (5, 6, 7):
            torch.testing.assert_close(f(a, a, k), _scaled_add(a, a, k))
        b = torch.ones(5)
        torch.testing.assert_close(f(b, b, 2), _scaled_add(b, b, 2))


def test_graph_returned_as_is_stays_generic():
    calls = []

    def counting(gm, example_inputs):
        calls.append(gm)
        return gm.forward

    kiln.reset()
    f = kiln.compile(_scaled_add, backend=counting, dynamic=True)
    a = torch.arange(3.0)
    for k in (5, 6, 7):
        torch.testing.assert_close(f(a, a, k), _scaled_add(a, a, k))
    assert len(calls) == 1


def test_kiln_backends_stay_generic():
    for backend in ("aot_eager", "kiln"):
        kiln.reset()
        f = kiln.compile(_scaled_add, backend=backend, dynamic=True)
        a = torch.arange(3.0)
        for k in (5, 6, 7):
            torch.testing.assert_close(f(a, a, k), _scaled_add(a, a, k))
        assert kiln.counters["stats"]["unique_graphs"] == 1
