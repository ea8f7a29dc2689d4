"""Eager-vs-compiled test helper for the frontend: outputs, mutated inputs, exceptions, counts."""

import copy
import logging

import torch
from torch.overrides import TorchFunctionMode

import kiln


class Recorder(TorchFunctionMode):
    """A torch function mode that records the name of every torch function it sees."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class CountingBackend:
    """A backend that records every graph it is given and runs it as it is."""

    def __init__(self):
        self.graphs = []
        self.example_inputs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    @property
    def calls(self):
        return len(self.graphs)


def _clone(value):
    if isinstance(value, torch.Tensor):
        c = value.detach().clone()
        c.requires_grad_(value.requires_grad)
        return c
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_clone(v) for v in value)
    if isinstance(value, dict) and type(value) is dict:
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value)
    return value


def assert_same(a, b, path="out"):
    """Structural equality with assert_close for tensors."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"{path}: {type(b).__name__} is not a tensor"
        torch.testing.assert_close(b, a, equal_nan=True, msg=lambda m: f"{path}: {m}")
        assert a.shape == b.shape and a.dtype == b.dtype, path
        assert a.requires_grad == b.requires_grad, f"{path}: requires_grad"
        return
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, torch.nn.Module):
        assert_same(a.state_dict(), b.state_dict(), f"{path}.state_dict()")
    else:
        assert a == b or (a != a and b != b), f"{path}: {a!r} != {b!r}"


def _run(fn, args, kwargs):
    try:
        return fn(*args, **kwargs), None
    except Exception as e:  # compared with the compiled run
        return None, e


def run_and_compare(
    fn,
    *args,
    expected_graphs=None,
    expected_frames=None,
    expected_breaks=None,
    backend=None,
    fullgraph=False,
    calls=2,
    **kwargs,
):
    """Run `fn` eagerly and compiled (twice: compile, then a cache hit) and compare everything.

    Returns the compiled function. `expected_graphs` counts graphs given to the backend,
    `expected_frames` frames compiled ok, `expected_breaks` frames that fell back.
    """
    kiln.reset()
    backend = backend or CountingBackend()
    compiled = kiln.compile(fn, backend=backend, fullgraph=fullgraph)
    eager_args, eager_kwargs = _clone(args), _clone(kwargs)
    expected, expected_exc = _run(fn, eager_args, eager_kwargs)
    for _ in range(calls):
        comp_args, comp_kwargs = _clone(args), _clone(kwargs)
        got, got_exc = _run(compiled, comp_args, comp_kwargs)
        if expected_exc is not None:
            assert got_exc is not None, f"eager raised {expected_exc!r}, compiled did not"
            assert type(got_exc) is type(expected_exc), f"{got_exc!r} != {expected_exc!r}"
            assert str(got_exc) == str(expected_exc)
        else:
            if got_exc is not None:
                raise got_exc
            assert_same(expected, got)
        assert_same(eager_args, comp_args, "args (mutated)")
        assert_same(eager_kwargs, comp_kwargs, "kwargs (mutated)")
    counters = kiln.counters
    if expected_graphs is not None:
        assert counters["stats"]["unique_graphs"] == expected_graphs, dict(counters)
        if isinstance(backend, CountingBackend):
            assert backend.calls == expected_graphs
    if expected_frames is not None:
        assert counters["frames"]["ok"] == expected_frames, dict(counters)
    if expected_breaks is not None:
        assert counters["stats"]["graph_breaks"] == expected_breaks, dict(counters)
    assert counters["stats"]["recompiles"] == 0, dict(counters)
    return compiled


class LogCapture(logging.Handler):
    """Collects the messages of kiln log channels (they do not propagate to the root logger)."""

    def __init__(self, *channels):
        super().__init__(logging.DEBUG)
        self.channels = channels
        self.messages = {c: [] for c in channels}

    def emit(self, record):
        self.messages[record.name.split(".", 1)[1]].append(record.getMessage())

    def __enter__(self):
        for c in self.channels:
            logging.getLogger(f"kiln.{c}").addHandler(self)
        return self

    def __exit__(self, *exc):
        for c in self.channels:
            logging.getLogger(f"kiln.{c}").removeHandler(self)


def run_on_fresh_objects(fn, make, x):
    """fn(x, obj) eagerly, then compiled twice, each on a fresh `make()`: the results (or the
    exception raised) and each object's attributes afterwards equal eager's; the backend."""
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    results = []
    for f in (fn, compiled, compiled):
        obj = make()
        try:
            out = f(x, obj)
        except Exception as e:
            out = (type(e).__name__, str(e))
        results.append((out, dict(vars(obj)) if hasattr(obj, "__dict__") else None))
    for got in results[1:]:
        assert_same(results[0], got)
    return backend


def counted_compile(fn, fullgraph=False, backend=None):
    """kiln.compile(fn) after a reset, with a list that receives each graph; the graphs then run
    as they are, or through kiln's backend of the name `backend`."""
    kiln.reset()
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward if backend is None else kiln.lookup_backend(backend)(gm, example_inputs)

    return kiln.compile(fn, backend=count, fullgraph=fullgraph), graphs
