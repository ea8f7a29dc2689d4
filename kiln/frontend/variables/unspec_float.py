"""Python floats traced as graph inputs, not specialised per value (automatic dynamic floats).

Note [Shapes: unspecialised floats]
A float argument of a frame is a constant at first (a guard on its value), as torch.compile does.
When a call brings another value (a learning rate, `x.mean().item()` handed to a resume function
after the break `.item()` makes), the next entry takes it as a graph input instead: a placeholder
fed the Python float on each call, guarded on its type only, so one entry serves every value
(torch.compile: a SymFloat input; repro 16: 3 graphs, not one per value until the cache limit).
  - Tensor ops take it as their scalar argument (`x * scale`): the node reads the placeholder.
    Ops whose result *shape* may follow the float (no tensor argument: `torch.arange(s)`,
    `torch.tensor(s)`; interpolate / upsample) take its value instead, with a guard.
  - `+ - * / ** //` with numbers or other such floats are nodes too (operator functions on
    Python floats, so the value is Python's own).
  - A comparison of a float input with a number (`if lr > 0.25`) is answered and guarded by
    the same comparison (GuardKind.FLOAT_COMPARE), as torch.compile guards on a SymFloat fact.
  - Anything else (another comparison, `bool`, `int()`, `math.*`, formatting, a Python constant wanted
    by kiln) specialises: the value, with a guard on each float input it was computed from.
The frame cache learns which float sources changed (FrameShapes, kind "float"); NaN is equal to
NaN there and in guards, so a NaN argument does not recompile.
"""

import dataclasses
import operator

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, GetItemSource, LocalSource, Source
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable

ARITH = {
    operator.add: operator.add,
    operator.iadd: operator.add,
    operator.sub: operator.sub,
    operator.isub: operator.sub,
    operator.mul: operator.mul,
    operator.imul: operator.mul,
    operator.truediv: operator.truediv,
    operator.itruediv: operator.truediv,
    operator.pow: operator.pow,
    operator.ipow: operator.pow,
}

_COMPARE = {
    operator.lt: "<",
    operator.le: "<=",
    operator.gt: ">",
    operator.ge: ">=",
    operator.eq: "==",
    operator.ne: "!=",
}
_FLIPPED = {operator.lt: operator.gt, operator.le: operator.ge, operator.gt: operator.lt}
_FLIPPED.update({operator.ge: operator.le, operator.eq: operator.eq, operator.ne: operator.ne})

# Tensor ops whose output shape may depend on a float argument: they get its value.
_SHAPE_FROM_FLOAT = ("interpolate", "upsample", "upsample_nearest", "upsample_bilinear")


@dataclasses.dataclass(frozen=True)
class DrawSource(Source):
    """A float drawn by `random` at run time, before the graph (Note [Random: draws before the
    graph]): the transformed code's temporary holding it. Never guarded (a new value per call)."""

    temp: str

    def name(self):
        return self.temp

    def reconstruct(self, cg):
        cg.extend(emit.load_fast(self.temp))


class SymFloatVariable(VariableTracker):
    """A float that is a value in the graph (Note [Shapes: unspecialised floats])."""

    def __init__(self, output, proxy, value, inputs, parts=None, **kw):
        super().__init__(**kw)
        self.output = output
        self.proxy = proxy
        self.value = value  # this call's value (for meta runs and specialisation)
        self.inputs = tuple(inputs)  # ((source, value), ...) of the float inputs it is made of
        self.parts = parts  # (operator, a, b) it was computed by, or None for an input

    def python_type(self):
        return float

    def drawn(self):
        """Whether it is made of a value drawn at run time (never specialised on)."""
        return any(isinstance(source, DrawSource) for source, _ in self.inputs)

    def is_python_constant(self):
        # code kiln does not model reads the value: a specialisation (guarded)
        return not self.drawn()

    def as_python_constant(self):
        """The value; from now on the float inputs it depends on are guarded on theirs."""
        if self.drawn():
            unimplemented("a float drawn by `random` at run time read as a Python constant")
        for source, value in self.inputs:
            self.output.guards.add(GuardKind.CONSTANT_MATCH, source, value)
        return self.value

    def truthy(self, tx):
        return bool(self.as_python_constant())

    def call_method(self, tx, name, args, kwargs):
        """float's own methods (`is_integer()`, `hex()`, `as_integer_ratio()`): on the value, a
        specialisation like any Python use the graph does not model."""
        if callable(getattr(float, name, None)) and not self.drawn():
            return ConstantVariable(self.as_python_constant()).call_method(tx, name, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg):
        """An input from its source; a computed float by the same Python operations again."""
        if self.source is not None:
            self.source.reconstruct(cg)
            return
        if self.parts is None:
            cg.reconstruct(ConstantVariable(self.as_python_constant()))
            return
        op, a, b = self.parts
        cg.load_object(op, push_null=True)
        cg.reconstruct(a)
        cg.reconstruct(b)
        cg.extend(emit.call(2))

    def __repr__(self):
        return f"SymFloatVariable({self.proxy.name}={self.value!r})"


def is_dynamic_float(output, source):
    """Whether the float at `source` changed value before (automatic dynamic), and may be an
    input: an argument or an item of one (object attributes stay constants, as in torch), or an
    optimizer's hyper-parameter (Note [Optimizers: float hyper-parameters])."""
    if output.dynamic is False or 0 not in output.frame_shapes.dynamic.get(source.name(), ()):
        return False
    if is_param_group_item(source):
        return True
    while isinstance(source, GetItemSource):
        source = source.source
    return isinstance(source, LocalSource)


# Note [Optimizers: float hyper-parameters]
# An LR scheduler writes a new float into `opt.param_groups[i]["lr"]` before every step. Like a
# float argument (Note [Shapes: unspecialised floats]), an item of a `param_groups` entry whose
# value changed becomes a graph input; its placeholder is marked `lift_float` so that the AOT
# layer passes it to the traced graph as a 0-d float64 tensor instead of specialising the plan on
# its value (Note [AOT: floats lifted to tensors]): 20 steps of a cosine schedule are two frames
# and three plans (the step that creates the state, the first lr, every later lr), not one per
# value up to the cache limit.
def is_param_group_item(source):
    """Whether source is `<x>.param_groups[i][key]...` (an optimizer's hyper-parameter)."""
    while isinstance(source, GetItemSource):
        base = source.source
        if isinstance(base, GetItemSource) and isinstance(base.index, int):
            if isinstance(base.source, AttrSource) and base.source.attr == "param_groups":
                return True
        source = base
    return False


def float_input(tx, value, source):
    """A float input made dynamic: a placeholder, guarded on its type."""
    output = tx.output
    output.guards.add(GuardKind.TYPE_MATCH, source, float)
    for prev_source, _, node in output.graph_inputs:
        if prev_source == source:
            return SymFloatVariable(output, node, value, [(source, value)], source=source)
    node = output._placeholder(source)
    node.meta["example_value"] = value
    node.meta["source"] = source.name()
    if is_param_group_item(source):
        node.meta["lift_float"] = True  # Note [Optimizers: float hyper-parameters]
    output.graph_inputs.append((source, value, node))
    return SymFloatVariable(output, node, value, [(source, value)], source=source)


def _operand(v):
    """(graph argument, value, inputs) of an arithmetic operand, or None."""
    if isinstance(v, SymFloatVariable):
        return v.proxy, v.value, v.inputs
    if isinstance(v, ConstantVariable) and type(v.value) in (int, float):
        return v.value, v.value, ()
    return None


def compare(tx, fn, a, b):
    """`s < 0.5` of a float input and a number: the answer, guarded by the same comparison
    (not by the value: `if lr > 0.25` recompiles only when the answer changes); else None."""
    if not isinstance(a, SymFloatVariable):
        a, b, fn = b, a, _FLIPPED[fn]
    if (
        a.source is None
        or a.drawn()
        or not isinstance(b, ConstantVariable)
        or type(b.value) not in (int, float)
    ):
        return None
    answer = fn(a.value, b.value)
    tx.output.guards.add(GuardKind.FLOAT_COMPARE, a.source, (_COMPARE[fn], b.value, answer))
    return ConstantVariable(answer)


def unary(tx, fn, a):
    """`-s`, `+s`, `abs(s)` of a SymFloatVariable: a node (SGD's `alpha=-lr`); else None."""
    if fn not in (operator.neg, operator.pos, abs) or not isinstance(a, SymFloatVariable):
        return None
    value = fn(a.value)
    node = tx.output.create_node("call_function", fn, (a.proxy,), {})
    node.meta["example_value"] = value
    return SymFloatVariable(tx.output, node, value, a.inputs, parts=None)


def binary(tx, fn, a, b):
    """`a <op> b` with a SymFloatVariable and a number (or another): a node; else None."""
    if fn in _COMPARE:
        return compare(tx, fn, a, b)
    op = ARITH.get(fn)
    pa, pb = _operand(a), _operand(b)
    if op is None or pa is None or pb is None:
        return None
    try:
        value = op(pa[1], pb[1])
    except (ArithmeticError, ValueError):
        return None  # raised on this value: specialised, so Python raises it
    if not isinstance(value, float):
        return None  # (a complex power): specialised
    node = tx.output.create_node("call_function", op, (pa[0], pb[0]), {})
    node.meta["example_value"] = value
    return SymFloatVariable(tx.output, node, value, pa[2] + pb[2], parts=(op, a, b))


def settle_args(target, args, kwargs, has_tensor):
    """A tensor op's arguments, with floats it may not read as graph values specialised."""
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if has_tensor and not any(s in name for s in _SHAPE_FROM_FLOAT):
        return args, kwargs

    def settle(v):
        if hasattr(v, "op_argument"):  # a float read by `.item()`: no value to settle on
            v.as_python_constant()  # (raises: the data-dependent break)
        return ConstantVariable(v.as_python_constant()) if isinstance(v, SymFloatVariable) else v

    return [settle(a) for a in args], {k: settle(v) for k, v in kwargs.items()}
