"""Python `random` draws in a graph: drawn at run time before the graph runs, fed to it as inputs.

Note [Random: draws before the graph]
`x * random.uniform(0, 1)` in a compiled frame must draw a new value on every call and leave
Python's generator where eager leaves it. torch.compile makes each draw a graph input that its
generated code draws right before calling the graph. kiln does the same for the module-level
float draws (`random.random`, `random.uniform`: bound methods of the module's hidden Random
instance): the transformed code first calls them, in trace order, with the same constant
arguments, each result into a temporary (`___kiln_draw_<i>`), then calls the graph, which reads
them as float inputs. Nothing else the graph part of a frame does runs Python code, so drawing
them first leaves the generator in eager's state, with eager's values.
  - The value is a SymFloatVariable whose source is that temporary: tensor ops and float
    arithmetic take it as a graph value; a read as a Python constant (a comparison, `int()`,
    formatting) cannot be specialised on (the next call draws another value): a graph break.
  - A traced draw advances a private copy of the generator (the value for meta runs is the one
    this call will draw), never Python's own.
  - The draws are kept with the side effects (SideEffects.draws) and rolled back with them: a
    break placed at an instruction that drew inside it (a call of a function that draws, then
    breaks) drops those draws, since Python runs the instruction and draws them itself; a
    speculative trace that drew counts as one with effects.
Other draws (`randint`, `randrange`, `choice`, a user's own `random.Random`) are not modelled:
they break the graph and run in Python.
"""

import random
import types

import numpy as np
import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import NumpyTensorSource, Source
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.numpy_vars import NumpyNdarrayVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.unspec_float import DrawSource, SymFloatVariable
from kiln.symbolic.fake import fake_like

_FLOAT_DRAWS = ("random", "uniform")
_NUMPY_DRAWS = ("uniform", "rand", "randn", "random", "random_sample", "normal", "standard_normal")


def _owner(value):
    """(module, its hidden generator, the draws modelled) of a module-level draw, else None."""
    if type(value) not in (types.MethodType, types.BuiltinMethodType):
        return None  # (never getattr on other objects: a user __getattr__ would run)
    owner = value.__self__
    if owner is random._inst:
        return random, _FLOAT_DRAWS
    if owner is np.random.mtrand._rand:
        return np.random, _NUMPY_DRAWS
    return None


def wrap(tx, value, source):
    """A RandomDrawVariable for a float draw of `random` / `np.random`, else None."""
    owner = _owner(value)
    if owner is None:
        return None
    name = value.__name__
    if name not in owner[1] or getattr(owner[0], name, None) is not value:
        return None
    if source is not None:
        tx.output.guards.add(GuardKind.ID_MATCH, source, value)
    return RandomDrawVariable(value, source=source)


def _mirror(output, module):
    """A copy of `module`'s generator: tracing never advances the real one."""
    mirrors = output.__dict__.setdefault("random_mirrors", {})
    if module not in mirrors:
        if module is random:
            rng = random.Random()
            rng.setstate(random.getstate())
        else:
            rng = np.random.RandomState()
            rng.set_state(np.random.get_state())
        mirrors[module] = rng
    return mirrors[module]


def _is_arg(value):
    if type(value) is tuple:
        return all(type(v) is int for v in value)
    return value is None or type(value) in (int, float)


class RandomDrawVariable(VariableTracker):
    """`random.random` / `random.uniform` (Note [Random: draws before the graph])."""

    def __init__(self, fn, **kw):
        super().__init__(**kw)
        self.fn = fn

    def python_type(self):
        return type(self.fn)

    def as_python_constant(self):
        return self.fn

    def is_python_constant(self):
        return True

    def call_function(self, tx, args, kwargs):
        values = []
        for a in (*args, *kwargs.values()):
            if not a.is_python_constant() or not _is_arg(a.as_python_constant()):
                unimplemented(f"random.{self.fn.__name__}() of a non-constant argument ({a})")
            values.append(a.as_python_constant())
        call_args = tuple(values[: len(args)])
        call_kwargs = dict(zip(kwargs, values[len(args) :]))
        output = tx.output
        draws = output.side_effects.draws
        rng = _mirror(output, _owner(self.fn)[0])
        try:
            value = getattr(rng, self.fn.__name__)(*call_args, **call_kwargs)
        except (TypeError, ValueError, OverflowError) as e:
            unimplemented(f"random.{self.fn.__name__}() raises {e}")
        source = DrawSource(f"___kiln_draw_{len(draws)}")
        if type(value) is np.ndarray and value.dtype == np.float64:
            draws.append((source, self.fn, call_args, call_kwargs))
            return _array_input(output, value, source)
        if type(value) is not float:
            unimplemented(f"random.{self.fn.__name__}() gives a {type(value).__name__}")
        draws.append((source, self.fn, call_args, call_kwargs))
        node = output._placeholder(source)
        node.meta["example_value"] = value
        node.meta["source"] = source.name()
        node.meta["lift_float"] = True  # a new value per call: never a plan per value
        output.graph_inputs.append((source, value, node))
        return SymFloatVariable(output, node, value, [(source, value)], source=source)

    def __repr__(self):
        return f"RandomDrawVariable(random.{self.fn.__name__})"


def _array_input(output, value, source):
    """An ndarray drawn at run time: a tensor input `torch.from_numpy(<temp>)` (no guards)."""
    tensor_source = NumpyTensorSource(source)
    node = output._placeholder(tensor_source)
    t = torch.from_numpy(value)
    if output.fake_inputs:
        example = fake_like(t)
    else:
        example = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    node.meta["example_value"] = example
    node.meta["source"] = tensor_source.name()
    output.graph_inputs.append((tensor_source, t, node))
    tensor = TensorVariable(node, example, t.device, source=tensor_source)
    return NumpyNdarrayVariable(tensor, source=source)


def emit_draws(output, cg):
    """The draws of the graph's frame, in trace order, each into its temporary; their names."""
    names = []
    for source, fn, args, kwargs in output.side_effects.draws:
        cg.load_object(fn, push_null=True)
        for a in args:  # (a Source: a value the frame was given, Note [Modules: parameters ...])
            if isinstance(a, Source):
                a.reconstruct(cg)
            else:
                cg.extend(emit.load_const(a))
        if kwargs:
            for a in kwargs.values():
                cg.extend(emit.load_const(a))
            cg.extend(emit.call_kw(len(args) + len(kwargs), tuple(kwargs)))
        else:
            cg.extend(emit.call(len(args)))
        cg.extend(emit.store_fast(source.temp))
        names.append(source.temp)
    return names
