"""torch.cond branches that write tensors they are given, in place (Note [Control flow: a branch
that writes its inputs]): captured under no_grad as new values written back after the cond node;
eager torch.cond is the oracle for the results and for the tensors' values afterwards."""

import pytest
import torch

import kiln
from kiln.exc import Unsupported
from kiln.symbolic import control_ops
from tests.frontend.frontend_helpers import CountingBackend, assert_same

BACKENDS = ["eager", "aot_eager", "kiln"]


class Counter(torch.nn.Module):
    """A module whose cond branches bump a buffer and the operand they are given."""

    def __init__(self):
        super().__init__()
        self.register_buffer("hits", torch.zeros(4))

    def forward(self, flag, x):
        def bump(a):
            a.mul_(3)
            self.hits.add_(1)
            return a - self.hits

        def keep(a):
            return a + self.hits

        y = x * 2
        before = y.sum()
        out = torch.cond(flag, bump, keep, (y,))
        return out, y, before, y + self.hits


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("flag", [True, False])
def test_operand_and_buffer_writes_match_eager(backend, flag):
    x = torch.randn(4)
    with torch.no_grad():
        ref_mod, mod = Counter(), Counter()
        expected = ref_mod(torch.tensor(flag), x)
        kiln.reset()
        counting = CountingBackend()
        compiled = kiln.compile(mod, backend=counting if backend == "eager" else backend)
        for _ in range(2):
            got = compiled(torch.tensor(flag), x)
            again = ref_mod(torch.tensor(flag), x) if _ == 0 else None
            assert_same(expected, got)
            expected = again
    assert_same(ref_mod.hits, mod.hits)
    assert kiln.counters["graph_break"] == {}
    if backend == "eager":
        assert len(counting.graphs) == 1
        (gm,) = counting.graphs
        nodes = list(gm.graph.nodes)
        cond = next(i for i, n in enumerate(nodes) if n.target is control_ops.COND)
        copies = [i for i, n in enumerate(nodes) if n.target == "copy_"]
        assert len(copies) == 2 and all(i > cond for i in copies)  # written back after the cond


def _write_view(flag, x):
    y = x + 1

    def zero_first(a):
        a[0].zero_()
        return a * 2

    out = torch.cond(flag, zero_first, lambda a: a * 3, (y,))
    return out, y


@pytest.mark.parametrize("flag", [True, False])
def test_write_through_a_view_of_the_operand(flag):
    x = torch.randn(3, 2)
    with torch.no_grad():
        expected = _write_view(torch.tensor(flag), x)
        kiln.reset()
        got = kiln.compile(_write_view, backend="aot_eager", fullgraph=True)(torch.tensor(flag), x)
    assert_same(expected, got)


def _write_input(flag, x, w):
    def grow(a):
        a.add_(w)
        return a * w

    return torch.cond(flag, grow, lambda a: a - w, (x,))


def test_written_frame_input_that_shares_memory_with_another_is_recompiled_and_correct():
    with torch.no_grad():
        kiln.reset()
        compiled = kiln.compile(_write_input, backend="aot_eager")
        for shared in [False, True, False]:  # (a view: another input, the same memory)
            got_base, ref_base = torch.arange(4.0), torch.arange(4.0)
            got_w = got_base.view(4) if shared else torch.arange(4.0)
            ref_w = ref_base.view(4) if shared else torch.arange(4.0)
            expected = _write_input(torch.tensor(True), ref_base, ref_w)
            got = compiled(torch.tensor(True), got_base, got_w)
            assert_same(expected, got)
            assert_same(ref_base, got_base)
    assert list(kiln.counters["graph_break"]) == [
        "torch.cond: a branch writes an input of the frame that shares memory with another"
    ]


def _two_views(flag, x):
    y = x * 1
    return torch.cond(flag, lambda a, b: a.add_(1) + b, lambda a, b: a + b, (y, y[:2].view(2)))


def test_write_to_an_operand_another_operand_views_breaks():
    x = torch.randn(2)
    with torch.no_grad():
        kiln.reset()
        with pytest.raises(Unsupported, match="shares memory with others"):
            kiln.compile(_two_views, backend="eager", fullgraph=True)(torch.tensor(True), x)


def _write_in_grad_mode(flag, x):
    y = x * 1
    return torch.cond(flag, lambda a: a.add_(1) * 2, lambda a: a * 2, (y,))


def test_write_in_grad_mode_breaks():
    kiln.reset()  # eager torch.cond refuses it in grad mode: the call runs in Python
    with pytest.raises(Unsupported, match="in grad mode"):
        kiln.compile(_write_in_grad_mode, backend="eager", fullgraph=True)(
            torch.tensor(True), torch.randn(2)
        )


def _reshaped_write(flag, x):
    y = x * 1
    return torch.cond(flag, lambda a: a.reshape(-1).add_(1) * 1, lambda a: a.reshape(-1) * 2, (y,))


def test_write_through_a_layout_dependent_op_breaks():
    with torch.no_grad():
        kiln.reset()
        with pytest.raises(Unsupported, match="layout"):
            kiln.compile(_reshaped_write, backend="eager", fullgraph=True)(
                torch.tensor(True), torch.randn(2, 2)
            )
