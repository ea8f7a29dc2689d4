"""AOT: an input requiring grad that no differentiable output depends on is no edge of the node."""

import torch

import kiln


def test_detached_input_is_not_an_edge():
    def f(w, h):
        return (w * h.detach()).sum()

    src = torch.randn(3, requires_grad=True)
    h = src * 2  # requires grad, has a history
    w = torch.randn(3, requires_grad=True)
    out = kiln.compile(f, backend="aot_eager")(w, h)
    edges = [fn for fn, _ in out.grad_fn.next_functions if fn is not None]
    assert len(edges) == 1 and type(edges[0]).__name__ == "AccumulateGrad"
    out.backward()
    torch.testing.assert_close(w.grad, h.detach())
    assert src.grad is None


def test_second_backward_after_history_freed():
    # a generator loss backward frees e's history; the second loss uses e.detach() only
    def step(a, b):
        e = a @ torch.full((2, 2), 0.5)
        loss_g = (e - 1).abs().mean()
        loss_g.backward()
        loss_d = (b @ e.detach()).mean()
        loss_d.backward()
        return loss_g.detach(), loss_d.detach()

    torch.manual_seed(0)
    a1, b1 = torch.randn(2, 2, requires_grad=True), torch.randn(2, 2, requires_grad=True)
    a2 = a1.detach().clone().requires_grad_(True)
    b2 = b1.detach().clone().requires_grad_(True)
    ref = step(a1, b1)
    got = kiln.compile(step, backend="aot_eager")(a2, b2)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(a2.grad, a1.grad)  # accumulated once, not twice
    torch.testing.assert_close(b2.grad, b1.grad)


def test_input_with_gradient_keeps_its_edge():
    def f(w, h):
        return (w * h).sum() + h.detach().sum()

    h0 = torch.randn(3, requires_grad=True)
    h = h0 * 3
    w = torch.randn(3, requires_grad=True)
    kiln.compile(f, backend="aot_eager")(w, h).backward()
    torch.testing.assert_close(h0.grad, 3 * w.detach())
