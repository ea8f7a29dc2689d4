"""kiln.export of an autocast region: the graph itself switches autocast on and off again."""

import torch

import kiln


class _Mixed(torch.nn.Module):
    def forward(self, a, b, d):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            e = torch.mm(a, b)
            f = torch.mm(d, e)
        return f, f.float() + a  # the add runs outside the region, in float32


def test_exported_graph_runs_its_autocast_region():
    m = _Mixed()
    args = tuple(torch.randn(8, 8) for _ in range(3))
    expected = m(*args)
    prog = kiln.export(m, args)
    assert not torch.is_autocast_enabled("cpu")
    got = prog(*args)  # called with autocast off: the graph enters and leaves it itself
    assert got[0].dtype == expected[0].dtype == torch.bfloat16
    assert got[1].dtype == expected[1].dtype == torch.float32
    torch.testing.assert_close(got, expected)
    assert not torch.is_autocast_enabled("cpu")
    other = tuple(torch.randn(8, 8) for _ in range(3))
    torch.testing.assert_close(prog.module()(*other), m(*other))
