"""kiln.compile's mode= and options=: validation, list_mode_options, options that take effect."""

import logging

import pytest
import torch

import kiln
from kiln import config, modes
from kiln.exc import KilnError


def test_unknown_mode_lists_the_valid_ones():
    with pytest.raises(KilnError, match="unknown mode 'fast'.*'reduce-overhead'.*'max-autotune'"):
        kiln.compile(lambda x: x, mode="fast")


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(KilnError, match="unknown option 'bogus'; valid options: .*cpu_backend"):
        kiln.compile(lambda x: x, options={"bogus": 1})


@pytest.mark.parametrize(
    "options,match",
    [
        ({"num_threads": "4"}, "takes a int"),
        ({"cudagraphs": 1}, "takes a bool"),
        ({"cpu_backend": "cuda"}, "'cpp' or 'triton'"),
    ],
)
def test_option_values_are_checked(options, match):
    with pytest.raises(KilnError, match=match):
        kiln.compile(lambda x: x, options=options)


def test_list_mode_options():
    assert kiln.list_mode_options("reduce-overhead") == {"cudagraphs": True}
    assert kiln.list_mode_options("max-autotune") == {"max_autotune": True, "cudagraphs": True}
    assert kiln.list_mode_options("default") == {}
    every = kiln.list_mode_options()
    assert set(every) == {
        "default",
        "reduce-overhead",
        "max-autotune",
        "max-autotune-no-cudagraphs",
    }
    with pytest.raises(KilnError, match="unknown mode"):
        kiln.list_mode_options("turbo")


def test_options_apply_while_compiling_and_are_restored(tmp_path):
    """An option that is a config setting holds for the graph's compile (seen by a backend
    wrapped with kiln.modes.with_options), and the setting is restored afterwards."""
    seen = []

    def backend(gm, example_inputs, opts=None):
        seen.append((config.num_threads, modes.current("max_autotune"), opts))
        return gm.forward

    backend.with_options = modes.with_options(backend)
    old = config.num_threads
    f = kiln.compile(lambda x: x.sin() + 1, backend=backend, options={"num_threads": 3})
    x = torch.randn(4)
    torch.testing.assert_close(f(x), x.sin() + 1)
    assert seen == [(3, False, {"num_threads": 3})]
    assert config.num_threads == old
    g = kiln.compile(lambda x: x.cos(), backend=backend, mode="max-autotune-no-cudagraphs")
    g(x)
    assert seen[-1][1] is True and modes.current("max_autotune") is False


def _kiln_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "kiln.warnings"]


def test_reduce_overhead_on_cpu_says_so_once(caplog, monkeypatch):
    monkeypatch.setattr(modes, "_said", set())
    logging.getLogger("kiln.warnings").addHandler(caplog.handler)
    try:
        x = torch.randn(8)
        for k in range(2):  # two functions, two graphs: one message
            f = kiln.compile(lambda x, k=k: (x + k).relu(), mode="reduce-overhead")
            torch.testing.assert_close(f(x), (x + k).relu())
    finally:
        logging.getLogger("kiln.warnings").removeHandler(caplog.handler)
    said = [m for m in _kiln_warnings(caplog) if "nothing to do for CPU graphs" in m]
    assert len(said) == 1, _kiln_warnings(caplog)


def test_mode_is_kept_in_training():
    """The backward graph (compiled at .backward()) is compiled under the same options."""
    x = torch.randn(6, requires_grad=True)
    f = kiln.compile(lambda x: (x * x).sum(), mode="reduce-overhead")
    f(x).backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())
