"""A compiled module pickles as its original module and compile arguments, and loads compiled."""

import io
import pickle

import pytest
import torch
import torch.nn as nn

import kiln


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)
        self.register_buffer("shift", torch.arange(3.0))

    def forward(self, x):
        return torch.tanh(self.lin(x)) + self.shift


def counted_backend(gm, example_inputs):
    """A module-level (so picklable) backend that counts the graphs it compiles."""
    counted_backend.graphs += 1
    return gm.forward


counted_backend.graphs = 0


def _round_trip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(backend="eager"),
        dict(backend="aot_eager", fullgraph=True),
        dict(backend="kiln", dynamic=False),
        dict(backend="kiln", mode="max-autotune-no-cudagraphs"),
    ],
)
def test_loaded_module_is_compiled_with_same_arguments(kwargs):
    mod = Net()
    opt = kiln.compile(mod, **kwargs)
    x = torch.randn(4, 5)
    opt(x)
    loaded = _round_trip(opt)
    assert isinstance(loaded, kiln.OptimizedModule)
    assert loaded._orig_mod is not mod  # a copy: its own parameters
    torch.testing.assert_close(loaded._orig_mod.lin.weight, mod.lin.weight)
    s, t = opt._kiln_settings, loaded._kiln_settings
    assert (t.backend_name, t.fullgraph, t.dynamic, t.mode, t.options) == (
        s.backend_name,
        s.fullgraph,
        s.dynamic,
        s.mode,
        s.options,
    )
    torch.testing.assert_close(loaded(x), mod(x))


def test_loaded_module_compiles_its_own_frames():
    counted_backend.graphs = 0
    opt = kiln.compile(Net(), backend=counted_backend)
    x = torch.randn(2, 5)
    opt(x)
    assert counted_backend.graphs == 1
    loaded = pickle.loads(pickle.dumps(opt))
    assert loaded._kiln_settings.backend is counted_backend
    kiln.reset()
    torch.testing.assert_close(loaded(x), loaded._orig_mod(x))
    assert counted_backend.graphs == 2  # the loaded module ran compiled, not eagerly


def test_unpicklable_backend_fails_to_pickle():
    def local_backend(gm, example_inputs):
        return gm.forward

    opt = kiln.compile(Net(), backend=local_backend)
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(opt)


def test_state_changes_after_compile_are_pickled():
    mod = Net()
    opt = kiln.compile(mod, backend="eager")
    x = torch.randn(3, 5)
    opt(x)
    with torch.no_grad():
        mod.lin.bias.fill_(2.0)
    loaded = _round_trip(opt)
    torch.testing.assert_close(loaded(x), mod(x))
