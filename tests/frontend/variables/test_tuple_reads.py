"""A tuple input is guarded by the items the trace reads (Note [Tuples: inputs guarded by the
items read]): changes in items never read reuse the compiled entry; whole-tuple reads guard all."""

import pytest
import torch

import kiln


@pytest.fixture
def strict():
    """error_on_recompile for the calls after it is switched on."""
    yield lambda: setattr(kiln.config, "error_on_recompile", True)
    kiln.config.error_on_recompile = False


def picks(x, t):
    return torch.sin(x) * t[1] + t[-1] + len(t)


def test_items_not_read_change_without_recompiling(strict):
    kiln.reset()
    compiled = kiln.compile(picks, backend="eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, (1, 2, torch.ones(3))), picks(x, (1, 2, torch.ones(3))))
    strict()
    for t in [(11, 2, torch.ones(3)), ("s", 2, torch.zeros(3)), (torch.ones(5), 2, torch.ones(3))]:
        torch.testing.assert_close(compiled(x, t), picks(x, t))


def test_an_item_read_is_guarded():
    kiln.reset()
    compiled = kiln.compile(picks, backend="eager")
    x = torch.randn(3)
    compiled(x, (0, 2, torch.ones(3)))
    for t in [(0, 5, torch.ones(3)), (0, 2.5, torch.ones(3)), (0, 2, torch.ones(2, 3))]:
        torch.testing.assert_close(compiled(x, t), picks(x, t))
    assert kiln.counters["stats"]["recompiles"] >= 3


def test_the_length_is_guarded():
    kiln.reset()
    compiled = kiln.compile(picks, backend="eager")
    x = torch.randn(3)
    compiled(x, (0, 2, torch.ones(3)))
    t = (0, 2, 7, torch.ones(3))
    torch.testing.assert_close(compiled(x, t), picks(x, t))


def summed(x, t):
    total = x
    for v in t:
        total = total + v
    return total, t[1:], t


def test_a_whole_read_guards_every_item():
    kiln.reset()
    compiled = kiln.compile(summed, backend="eager")
    x = torch.randn(2)
    for t in [(1, torch.ones(2)), (2, torch.ones(2)), (2.5, torch.ones(2)), ("a", torch.ones(2))]:
        if isinstance(t[0], str):
            with pytest.raises(TypeError):
                summed(x, t)
            with pytest.raises(TypeError):
                compiled(x, t)
            continue
        out, ref = compiled(x, t), summed(x, t)
        torch.testing.assert_close(out, ref)
        assert out[2] is t  # (the tuple itself comes back)


def test_an_out_of_range_index_raises_as_eager():
    kiln.reset()
    compiled = kiln.compile(picks, backend="eager")
    with pytest.raises(IndexError):
        compiled(torch.randn(3), (1,))
