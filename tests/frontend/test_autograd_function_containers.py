"""A forward that changes a list it reaches itself (a global): with the eager backend the real
forward makes the change at run time (Note [Autograd functions: containers the forward
changes]); outputs, gradients and the list equal eager's."""

import pytest
import torch

import kiln

SEEN = []


class Records(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        inner = torch.sin(x)
        SEEN.append(inner)
        total = torch.tensor(0.0)
        total += x.sum()
        return total

    @staticmethod
    def backward(ctx, g):
        return g.expand(4)


def _run(fn, compiled, x, **kw):
    SEEN.clear()
    x = x.detach().clone().requires_grad_(True)
    f = kiln.compile(fn, **kw) if compiled else fn
    out = f(x)
    (out[0] if isinstance(out, tuple) else out).backward()
    return out, x.grad, list(SEEN)


def _same(a, b):
    out_a, grad_a, seen_a = a
    out_b, grad_b, seen_b = b
    torch.testing.assert_close(out_a, out_b)
    torch.testing.assert_close(grad_a, grad_b)
    assert len(seen_a) == len(seen_b)
    for p, q in zip(seen_a, seen_b):
        torch.testing.assert_close(p, q)
        assert p.requires_grad == q.requires_grad


def test_forward_appending_to_a_global_list_is_captured():
    def fn(x):
        return Records.apply(x * 2)

    x = torch.randn(4)
    for _ in range(2):
        got = _run(fn, True, x, backend="eager", fullgraph=True)
        _same(got, _run(fn, False, x))


def test_list_read_after_the_apply_runs_in_python():
    def fn(x):
        out = Records.apply(x)
        return out, SEEN[-1] * 2

    x = torch.randn(4)
    with pytest.raises(
        kiln.exc.Unsupported, match="list that .*Records.forward changes when the graph runs"
    ):
        _run(fn, True, x, backend="eager", fullgraph=True)
    got = _run(fn, True, x, backend="eager")
    _same(got, _run(fn, False, x))
    torch.testing.assert_close(got[0][1], _run(fn, False, x)[0][1])


def test_list_read_before_the_apply_still_breaks():
    def fn(x):
        n = len(SEEN)
        return Records.apply(x) + n

    x = torch.randn(4)
    with pytest.raises(kiln.exc.Unsupported, match="side effects outside ctx"):
        _run(fn, True, x, backend="eager", fullgraph=True)
    _same(_run(fn, True, x, backend="eager"), _run(fn, False, x))


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_tracing_backends_break(backend):
    def fn(x):
        return Records.apply(x - 1)

    x = torch.randn(4)
    with pytest.raises(kiln.exc.Unsupported, match="side effects outside ctx"):
        _run(fn, True, x, backend=backend, fullgraph=True)
    _same(_run(fn, True, x, backend=backend), _run(fn, False, x))


def test_view_kept_in_a_closure_list_breaks_with_a_clear_reason():
    kept = []

    class KeepsHead(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            kept.append(x[:2])  # a view of the input, kept outside ctx
            return x * 3

        @staticmethod
        def backward(ctx, g):
            return g * 3

    def fn(x):
        y = KeepsHead.apply(x)
        return y.sum() + kept[-1].sum()

    def run(f):
        kept.clear()
        x = torch.arange(4.0, requires_grad=True)
        out = f(x)
        out.backward()
        return out, x.grad, len(kept)

    with pytest.raises(kiln.exc.Unsupported, match="changes when the graph runs") as info:
        run(kiln.compile(fn, backend="eager", fullgraph=True))
    assert "return the value from forward" in str(info.value)  # the hint
    got, want = run(kiln.compile(fn, backend="eager")), run(fn)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert got[2] == want[2] == 1
