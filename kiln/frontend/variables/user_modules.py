"""Instances of user nn.Module classes made inside compiled code (`SmallNN()` in a forward).

Note [Modules: user modules built while tracing]
Building a module runs its class's __init__. kiln does not trace a module's __init__ (it
registers parameters, draws their random values, calls hooks), so it builds a user module only
when that __init__ is one kiln may run while tracing: nn.Module's own (a user class that defines
only forward and other methods, built with no arguments), or that of a parameter-free torch module
it subclasses, built from constant arguments (Note [Modules: built while tracing]). Such a module
has no parameters, buffers or submodules; it is then traced as any module built while tracing:
its attributes are its own constants, its forward and methods are inlined, a store into it breaks
the graph, and where it leaves the frame the transformed code builds it again, an equal module.
A module whose class defines __init__ in Python (or has parameters) is eager's to build: each
eager call makes new random weights, which a graph cannot hold as constants, so the construction
is a graph break with that reason. So is a class made in the frame (the transformed code could
not call the class the trace used), and one that changes how it is called or read (`__call__`,
`__getattr__`, `__setattr__`, `__getattribute__` of its own).
"""

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables import classes
from kiln.frontend.variables.constant import REMADE_CLASSES
from kiln.frontend.variables.nn_module import build_module, buildable_module
from kiln.frontend.variables.user_defined import INSTANCE_MAKERS

_MODULE = torch.nn.Module
_HOOKS = ("__call__", "_call_impl", "__getattr__", "__setattr__", "__getattribute__", "__new__")


def _first_owner(cls, name):
    return next(k for k in cls.__mro__ if name in vars(k))


def make_user_module(tx, cls_var, args, kwargs):
    """`cls(*args, **kwargs)` of a user nn.Module class, or None (not a module class)."""
    cls = cls_var.value
    if not (isinstance(cls, type) and issubclass(cls, _MODULE)) or cls.__module__.startswith(
        "torch."
    ):
        return None
    what = f"creating a {cls.__qualname__} module inside the compiled frame"
    if type(cls) is not type or classes.is_local_class(cls) or cls in REMADE_CLASSES:
        unimplemented(f"{what}: its class is made in the frame or has a metaclass")
    for name in _HOOKS:
        owner = _first_owner(cls, name)
        if owner is not _MODULE and owner is not object:
            unimplemented(f"{what}: its class defines {name}")
    init_owner = _first_owner(cls, "__init__")
    if init_owner is _MODULE:
        if args or kwargs:
            unimplemented(f"{what}: nn.Module.__init__ takes no arguments")
    elif not buildable_module(init_owner):
        unimplemented(f"{what}: {init_owner.__qualname__}.__init__ is not traced (eager runs it)")
    return build_module(tx, cls, args, kwargs)


INSTANCE_MAKERS.append(make_user_module)
