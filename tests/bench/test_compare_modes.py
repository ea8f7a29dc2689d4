"""`--compare kiln@reduce-overhead`: a compile mode per compiler in the bench."""

import pytest

from kiln_bench.compilers import parse_compare


def test_compare_names_a_mode_per_compiler():
    got = [(c.name, getattr(c, "mode", None)) for c in parse_compare("kiln,kiln@reduce-overhead")]
    assert got == [("eager", None), ("kiln", None), ("kiln@reduce-overhead", "reduce-overhead")]
    (tc,) = parse_compare("torch.compile@max-autotune")[1:]
    assert (tc.name, tc.mode, tc.backend) == (
        "torch.compile@max-autotune",
        "max-autotune",
        "inductor",
    )


def test_kiln_compiler_passes_its_mode():
    import torch

    (k,) = parse_compare("kiln@max-autotune-no-cudagraphs")[1:]
    model = torch.nn.Linear(3, 2)
    compiled = k.compile(model)
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(x), model(x))
    with pytest.raises(Exception, match="unknown mode"):
        parse_compare("kiln@fastest")[1].compile(model)
