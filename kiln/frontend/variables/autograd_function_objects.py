"""autograd.Function apply calls with a module argument or a plain object among the outputs.

Note [Autograd functions: a module as argument]
`MyFn.apply(module, x)` for an nn.Module without parameters, buffers, submodules or hooks of its
own, whose other instance attributes are tensors and constants (`self.scale = 4`, `self.w =
torch.randn(4)`): passed by its fields as a plain object is (Note [Autograd functions: objects as
arguments]); the target rebuilds a module of the same class (nn.Module's own empty bookkeeping,
then the attributes, `training` among them). Parameters would need the rebuilt module to hold
graph values as parameters: not done, a break.

Note [Autograd functions: objects among the outputs]
A forward that returns a plain object it made (`return y, Out(a=t1, b=t2)`, a dataclass): apply
hands non-tensor outputs back untouched, so the caller gets forward's object, whose tensors were
made under no_grad. Only an object the forward made, whose tensors are its own (not an input or
output of the call, which it would share, nor a view). The node's target returns the object's tensor attributes after forward's
outputs (None in the object's place), and the trace makes the object anew from them (a
NewObjectVariable of the same class, its constant attributes as forward set them).
"""

import torch

from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.nn_module import NNModuleVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.user_defined import NewObjectVariable

_MODULE_STATE = frozenset(torch.nn.Module().__dict__) - {"training"}


def _tensor_cls():
    return TensorVariable


def _field_ok(v):
    if isinstance(v, _tensor_cls()):
        return True
    return v.is_python_constant() and is_literal(v.as_python_constant())


def module_fields(tx, var):
    """(class, field VariableTrackers, names) of a module argument passed by its fields, or
    None (Note [Autograd functions: a module as argument])."""
    if not isinstance(var, NNModuleVariable) or var.source is None:
        return None
    mod = var.value
    cls = type(mod)
    d = mod.__dict__
    if type(d) is not dict or not _MODULE_STATE <= set(d):
        return None
    if any(d[n] for n in _MODULE_STATE if isinstance(d[n], (dict, set))):
        return None  # parameters, buffers, submodules, hooks
    if cls.__getattribute__ is not object.__getattribute__ or "__slots__" in vars(cls):
        return None
    if cls.__setattr__ is not torch.nn.Module.__setattr__:
        return None
    names = [n for n in d if n not in _MODULE_STATE]
    if not all(type(n) is str for n in names):
        return None
    fields = [var.var_getattr(tx, n) for n in names]
    if not all(_field_ok(f) for f in fields):
        return None
    return cls, fields, tuple(names)


def rebuilt_module(cls, names, values):
    """A module of `cls` with nn.Module's empty state and these instance attributes."""
    obj = object.__new__(cls)
    torch.nn.Module.__init__(obj)
    obj.__dict__.update(zip(names, values))
    return obj


def output_object(var, args, outputs, start):
    """(class, attribute names, their VariableTrackers) of a plain object forward made and
    returns, or None (Note [Autograd functions: objects among the outputs]). `start`: the
    serial of the first variable the forward's trace made (older objects are the caller's)."""
    if not isinstance(var, NewObjectVariable) or var.source is not None or var.serial < start:
        return None
    if var.dict_base is not None or any(var is a for a in args):
        return None
    cls = var.cls
    if (
        issubclass(cls, torch.nn.Module)
        or cls.__new__ is not object.__new__
        or cls.__getattribute__ is not object.__getattribute__
        or hasattr(cls, "__getattr__")
        or "__slots__" in vars(cls)
    ):
        return None
    names = list(var.attrs)
    fields = [var.attrs[n] for n in names]
    if not all(_field_ok(f) for f in fields):
        return None
    for f in fields:  # a tensor of its own: not an input or output (identity), nor a view
        if isinstance(f, _tensor_cls()) and (
            f.example._is_view() or any(f is v for v in [*args, *outputs])
        ):
            return None
    return cls, names, fields


def remade_object(cls, names, fields, tensors):
    """The object forward returned, made anew in the trace: its tensor attributes are the node's
    outputs `tensors` (in order), its constants as forward set them."""
    it = iter(tensors)
    obj = NewObjectVariable(cls)
    for n, f in zip(names, fields):
        obj.attrs[n] = (
            next(it) if isinstance(f, _tensor_cls()) else ConstantVariable(f.as_python_constant())
        )
    return obj


def object_tensor_names(names, fields):
    """The names of an output object's tensor attributes (what the target returns)."""
    return tuple(n for n, f in zip(names, fields) if isinstance(f, _tensor_cls()))
