"""Ops with an `out=` tuple that return None (`torch.unbind_copy(x, out=(a, b, c))`): one node
that writes the tensors of `out`, None as the result (Note [Torch: out= ops that return None])."""

import pytest
import torch

import kiln


def unbind_into(eye, out):
    result = torch.unbind_copy(eye, out=out)
    return result, out[1] * 2


def zeros3():
    return tuple(torch.zeros(3) for _ in range(3))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_unbind_copy_out_writes_the_inputs(backend):
    eye = torch.eye(3)
    out_ref, out_res = zeros3(), zeros3()
    expected = unbind_into(eye, out_ref)
    kiln.reset()
    got = kiln.compile(unbind_into, backend=backend, fullgraph=True)(eye, out_res)
    assert got[0] is None and expected[0] is None
    torch.testing.assert_close((got[1], out_res), (expected[1], out_ref))
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_unbind_copy_out_made_in_the_frame():
    def f(x):
        out = (torch.empty(2), torch.empty(2))
        torch.unbind_copy(x.sin(), out=out)
        return out[0] + out[1]

    x = torch.randn(2, 2)
    expected = f(x)
    kiln.reset()
    got = kiln.compile(f, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(got, expected)


def test_unbind_copy_out_resized_breaks_and_stays_right():
    eye = torch.eye(3)
    out_ref = tuple(torch.zeros(0) for _ in range(3))
    out_res = tuple(torch.zeros(0) for _ in range(3))
    expected = unbind_into(eye, out_ref)
    kiln.reset()
    got = kiln.compile(unbind_into, backend="eager")(eye, out_res)
    torch.testing.assert_close((got[1], out_res), (expected[1], out_ref))
    assert kiln.counters["stats"]["graph_breaks"] >= 1
