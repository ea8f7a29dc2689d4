"""Traceable wrapper tensor subclasses (`__tensor_flatten__`/`__tensor_unflatten__`) as graph
inputs and values: a fake of the subclass built on fake inner tensors (Note [Tensors: wrapper
subclass inputs])."""

import inspect

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, FlattenSpecSource
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.tensor import (
    TensorVariable,
    register_subclass_variable,
    tensor_variable,
)
from kiln.frontend.variables.torch import INPLACE_DUNDERS
from kiln.symbolic.fake import fake_like

# Note [Tensors: wrapper subclass inputs]
# A traceable wrapper subclass (TwoTensor, DTensor, float8 tensors) says what it is made of:
# `__tensor_flatten__()` gives the attribute names of its inner tensors and a ctx (its other
# state), and `type(x).__tensor_unflatten__(inners, ctx, outer_size, outer_stride)` rebuilds it.
# Such an input is one placeholder whose example value is a fake of the subclass: the same
# unflatten over a fake (ProxyTensor) per inner tensor, so an op traced on it runs the subclass's
# own __torch_dispatch__ on the fakes and its results have the types eager gives. Guards: the
# outer tensor's (its exact type among them), the flatten spec (inner names and ctx, by
# equality), each inner tensor's as a plain input's, nested subclasses recursively. What kiln does
# not model stays a break with its reason: a `__torch_function__` of the subclass's own, a
# Tensor method, operator or property the subclass overrides (Python code kiln would not run), a
# method or descriptor the subclass defines, in-place writes to a subclass value, a ctx that is
# not made of literals. Its sizes stay static (a recompile per
# size, automatic dynamic shapes and dynamic=True notwithstanding: torch's wrapper constructor
# takes ints, so the fake cannot carry kiln's size symbols); dims marked dynamic break. Plain
# subclasses (as_subclass, __torch_function__ only) are not wrappers: torch_function.py traces
# them. The
# backends: `eager` runs the graph on the real inputs; AOT autograd desugars the subclass into its
# inner tensors (kiln/autograd/subclasses.py).

# Note [Tensors: a wrapper's own state]
# `x.a` of an inner tensor named by `__tensor_flatten__` is a graph node `getattr(x, "a")` whose
# example is the fake's inner fake: the eager backend reads the real one, AOT's desugared graph
# the inner input (a write into it reaches the input's inner tensor as any input write does).
# One variable per (value, name), so `x.a is x.a`; an input's inner tensor has its source
# (`x.a`), so returning it gives the object itself. Any other attribute of the fake that is a
# literal (`x.scale`) is a constant: the fake was unflattened from the ctx and the class, both
# guarded, and a value the graph made from them.
_DEFAULT_TORCH_FUNCTIONS = (
    torch._C._disabled_torch_function_impl,
    torch.Tensor.__torch_function__.__func__,
)


def is_wrapper_subclass(value):
    """Whether a tensor is a traceable wrapper subclass (not one of our own fakes)."""
    return is_traceable_wrapper_subclass(value)


def _own_torch_function(cls):
    tf = inspect.getattr_static(cls, "__torch_function__", None)
    tf = getattr(tf, "__func__", tf)
    return tf not in _DEFAULT_TORCH_FUNCTIONS


def _ctx_ok(ctx):
    """Whether a flatten ctx is compared by value in a guard (literals, and lists/dicts of them)."""
    if isinstance(ctx, (list, tuple)) and type(ctx) in (list, tuple):
        return all(_ctx_ok(c) for c in ctx)
    if type(ctx) is dict:
        return all(is_literal(k) and _ctx_ok(v) for k, v in ctx.items())
    return is_literal(ctx) or type(ctx) is torch.Size


# What a wrapper subclass may define of Tensor's own names: the rest (an operator, a method, a
# property such as `shape`) changes what Tensor's behaviour kiln traces would give, so it breaks.
_OWN_NAMES = frozenset(
    {
        "__new__",
        "__init__",
        "__repr__",
        "__torch_dispatch__",
        "__torch_function__",  # (checked on its own)
        "__tensor_flatten__",
        "__tensor_unflatten__",
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__slots__",
        "__annotations__",
        "__firstlineno__",
        "__static_attributes__",
    }
)


# (Parameter's own methods are torch's, like Tensor's: a subclass of it is measured from it)
_TENSOR_BASES = (torch.nn.Parameter, torch.Tensor, torch._C.TensorBase)


def tensor_overrides(cls, allowed):
    """The names of Tensor's attributes that `cls` (or a base of it below Tensor) defines, but
    those in `allowed`."""
    for k in cls.__mro__:
        if k in _TENSOR_BASES:
            break
        for attr in vars(k):
            if attr not in allowed and hasattr(torch.Tensor, attr):
                yield attr


def defined_below_tensor(cls, name):
    """Whether `cls` or a base of it below torch.Tensor defines `name`."""
    for k in cls.__mro__:
        if k in _TENSOR_BASES:
            return False
        if name in vars(k):
            return True
    return False


def check_class(cls, what="a tensor subclass"):
    """Break unless a wrapper subclass type changes nothing of Tensor's but its dispatch."""
    if _own_torch_function(cls):
        unimplemented(f"{what} ({cls.__name__}) with its own __torch_function__")
    for attr in tensor_overrides(cls, _OWN_NAMES):
        unimplemented(f"{what} ({cls.__name__}) overrides Tensor.{attr}")


def check_subclass(value):
    """Break unless `value` is a wrapper subclass kiln traces (nested ones recursively)."""
    cls = type(value)
    name = cls.__name__
    if not is_wrapper_subclass(value):
        unimplemented(f"a tensor subclass input ({name}) is not traced")
    check_class(cls, "a tensor subclass input")
    names, ctx = value.__tensor_flatten__()
    if not _ctx_ok(ctx):
        unimplemented(
            f"a tensor subclass input ({name}) whose flatten ctx is a {type(ctx).__name__}"
        )
    for n in names:
        inner = getattr(value, n)
        if type(inner) in (torch.Tensor, torch.nn.Parameter):
            if inner.layout != torch.strided:
                unimplemented(
                    f"a tensor subclass input ({name}) with a {inner.layout} inner tensor"
                )
            continue
        if not isinstance(inner, torch.Tensor):
            unimplemented(f"a tensor subclass input ({name}) whose inner {n!r} is no tensor")
        check_subclass(inner)
    return names, ctx


def fake_subclass(guards, value, source):
    """The fake of a wrapper subclass input, installing the guards of its flatten spec and of its
    inner tensors (the outer tensor's TENSOR_MATCH is the caller's)."""
    names, ctx = value.__tensor_flatten__()
    guards.add(GuardKind.CONSTANT_MATCH, FlattenSpecSource(source), [list(names), ctx])
    inners = {}
    for n in names:
        inner = getattr(value, n)
        s = AttrSource(source, n)
        guards.add(GuardKind.TENSOR_MATCH, s, inner)
        if is_wrapper_subclass(inner):
            inners[n] = fake_subclass(guards, inner, s)
        else:
            inners[n] = fake_like(inner, requires_grad=inner.requires_grad)
    fake = type(value).__tensor_unflatten__(inners, ctx, value.size(), value.stride())
    if value.requires_grad and not fake.requires_grad and fake.is_leaf:
        fake.requires_grad_(True)  # (an outer tensor that requires grad itself, as a leaf input)
    same = (
        type(fake) is type(value)
        and fake.dtype == value.dtype
        and fake.device == value.device
        and fake.shape == value.shape
        and fake.stride() == value.stride()
        and fake.requires_grad == value.requires_grad
    )
    if not same:
        unimplemented(
            f"a {type(value).__name__} rebuilt on fake inner tensors differs from the input"
        )
    return fake


class SubclassTensorVariable(TensorVariable):
    """A traced tensor whose value is a wrapper subclass (its example is a fake of it)."""

    wrapper_subclass = True

    def __init__(self, proxy, example, device, **kwargs):
        check_class(type(example), "a traced op made a tensor subclass")
        super().__init__(proxy, example, device, **kwargs)

    def python_type(self):
        return type(self.example)

    def _subclass_attr(self, name):
        """Whether `name` is defined by the subclass (not by torch.Tensor), or set on the value
        (its inner tensors among them)."""
        if name in getattr(self.example, "__dict__", {}):
            return True
        return defined_below_tensor(type(self.example), name)

    def var_getattr(self, tx, name):
        if name != "__class__" and self._subclass_attr(name):
            return self._inner_attr(tx, name)
        if name in ("grad", "data"):
            unimplemented(f"Tensor.{name} of a tensor subclass ({type(self.example).__name__})")
        return super().var_getattr(tx, name)

    def _inner_attr(self, tx, name):
        """`x.name` of what the subclass is made of (Note [Tensors: a wrapper's own state])."""
        what = f"attribute {name!r} of a tensor subclass ({type(self.example).__name__})"
        static = inspect.getattr_static(type(self.example), name, None)
        if static is not None and hasattr(type(static), "__get__"):
            unimplemented(f"{what}: a {type(static).__name__} of its class")
        names, _ = self.example.__tensor_flatten__()
        if name not in names:
            value = getattr(self.example, name, None)
            if not is_literal(value) and type(value) is not torch.Size:
                unimplemented(f"{what} is not traced (a {type(value).__name__})")
            return ConstantVariable(value)  # (of the ctx and class, both guarded)
        inners = tx.output.__dict__.setdefault("wrapper_inners", {})
        key = (self.proxy, name)
        if key not in inners:  # (one variable per inner tensor: `x.a is x.a`)
            node = tx.output.create_node("call_function", getattr, (self.proxy, name), {})
            inner = getattr(self.example, name)
            node.meta["example_value"] = inner
            source = None if self.source is None else AttrSource(self.source, name)
            inners[key] = tensor_variable(node, inner, self.device, source=source)
        return inners[key]

    def call_method(self, tx, name, args, kwargs):
        if self._subclass_attr(name):
            what = type(self.example).__name__
            unimplemented(f"method {name!r} of a tensor subclass ({what}) is not traced")
        if is_inplace_name(name):
            what = type(self.example).__name__
            unimplemented(f"in-place Tensor.{name}() on a tensor subclass ({what})")
        return super().call_method(tx, name, args, kwargs)


def is_inplace_name(name):
    """Whether a Tensor method name writes into the tensor (`add_`, `__iadd__`, `__setitem__`)."""
    if name == "__setitem__" or name in INPLACE_DUNDERS:
        return True
    return name.endswith("_") and not name.endswith("__")


register_subclass_variable(is_wrapper_subclass, SubclassTensorVariable)
