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
An __init__ of the user's that only stores constants into self runs too (Note [Modules: an
__init__ that only stores]); a __new__ of the class is traced when it gives another object (then
Python runs no __init__). Any other __init__ written in Python (or parameters) is eager's to
build: each eager call makes new random weights, which a graph cannot hold as constants, so the
construction is a graph break with that reason. So is a class made in the frame (the transformed code could
not call the class the trace used), and one that changes how it is called or read (`__call__`,
`__getattr__`, `__setattr__`, `__getattribute__` of its own).
"""

import dis
import inspect
import sys
import types

import torch

from kiln.exc import unimplemented
from kiln.frontend.variables import classes
from kiln.frontend.variables.constant import REMADE_CLASSES
from kiln.frontend.variables.functions import inline_call
from kiln.frontend.variables.nn_module import build_module, buildable_module
from kiln.frontend.variables.user_defined import INSTANCE_MAKERS

_MODULE = torch.nn.Module
_HOOKS = ("__call__", "_call_impl", "__getattr__", "__setattr__", "__getattribute__", "__new__")


def _first_owner(cls, name):
    return next(k for k in cls.__mro__ if name in vars(k))


# Note [Modules: an __init__ that only stores]
# `self.act = nn.functional.gelu` / `self.k = k`: an __init__ whose whole code is
# `super().__init__()` (nn.Module's) and stores into self of its arguments, constants, globals
# and their attributes (or arithmetic on them) calls nothing else and reads nothing of self, so it
# may run while tracing, on constant arguments, as nn.Module's own does: read from its bytecode.
_PLAIN_OPS = frozenset(
    {
        "RESUME", "NOP", "CACHE", "COPY_FREE_VARS", "MAKE_CELL", "EXTENDED_ARG",
        "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_CONST", "LOAD_SMALL_INT",
        "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_ATTR", "STORE_FAST", "STORE_ATTR", "BINARY_OP",
        "BINARY_SUBSCR", "BUILD_TUPLE", "BUILD_LIST", "LIST_EXTEND", "POP_TOP", "RETURN_VALUE",
        "RETURN_CONST", "PUSH_NULL", "UNARY_NEGATIVE",
    }
)  # fmt: skip
_CALL_OPS = frozenset({"CALL", "PRECALL", "LOAD_METHOD", "LOAD_SUPER_ATTR", "KW_NAMES"})


def _stores_only(cls, init_owner):
    """Whether init_owner.__init__ only calls nn.Module.__init__ and stores into self (Note
    [Modules: an __init__ that only stores])."""
    init = vars(init_owner)["__init__"]
    if not inspect.isfunction(init) or init.__code__.co_flags & (
        inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_GENERATOR
    ):
        return False
    after = cls.__mro__[cls.__mro__.index(init_owner) + 1 :]
    if _first_owner(after[0], "__init__") is not _MODULE:
        return False
    code = init.__code__
    self_name = code.co_varnames[0] if code.co_argcount else None
    ins = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "PRECALL")]
    # the first statement: super().__init__() or super(C, self).__init__(), no arguments
    start = next((k for k, i in enumerate(ins) if i.opname == "LOAD_GLOBAL"), None)
    if start is None or ins[start].argval != "super":
        return False
    end = next((k for k in range(start, len(ins)) if ins[k].opname == "POP_TOP"), None)
    if end is None or not any(i.argval == "__init__" for i in ins[start:end]):
        return False
    calls = [i for i in ins[start:end] if i.opname == "CALL"]
    super_attr = any(i.opname == "LOAD_SUPER_ATTR" for i in ins[start:end])
    if (
        len(calls) != (1 if super_attr else 2)
        or calls[-1].arg != 0
        or ins[end - 1] is not calls[-1]
    ):
        return False
    for k, i in enumerate(ins):
        if start <= k <= end:
            continue
        if i.opname not in _PLAIN_OPS:
            return False
        if i.opname == "LOAD_GLOBAL":
            if i.arg & 1 and sys.version_info < (3, 13):
                return False  # (pushes a NULL: a call follows)
            if not isinstance(init.__globals__.get(i.argval), types.ModuleType):
                return False  # (only modules: the value is read once, at the trace, unguarded)
        if i.opname == "LOAD_DEREF" and i.argval != "__class__":
            return False
        pushed_self = _last_pushed(ins[k - 1]) == self_name
        if i.opname == "LOAD_ATTR" and pushed_self:
            return False  # (reads self: a property or a module's __getattr__ would run)
        if i.opname == "STORE_ATTR" and not pushed_self:
            return False
        if i.opname == "LOAD_ATTR" and sys.version_info >= (3, 12) and i.arg & 1:
            return False  # (a method load: a call follows)
    return True


def _last_pushed(i):
    """The local name instruction i pushes last, if it loads locals."""
    if i.opname in ("LOAD_FAST", "LOAD_FAST_CHECK"):
        return i.argval
    if i.opname == "LOAD_FAST_LOAD_FAST":
        return i.argval[1]
    return None


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
    new_owner = _first_owner(cls, "__new__")
    if new_owner is not _MODULE and new_owner is not object:
        return _call_new(tx, cls_var, vars(new_owner)["__new__"], args, kwargs, what)
    for name in _HOOKS:
        owner = _first_owner(cls, name)
        if owner is not _MODULE and owner is not object:
            unimplemented(f"{what}: its class defines {name}")
    init_owner = _first_owner(cls, "__init__")
    if init_owner is _MODULE:
        if args or kwargs:
            unimplemented(f"{what}: nn.Module.__init__ takes no arguments")
    elif not buildable_module(init_owner) and not _stores_only(cls, init_owner):
        unimplemented(f"{what}: {init_owner.__qualname__}.__init__ is not traced (eager runs it)")
    return build_module(tx, cls, args, kwargs)


def _call_new(tx, cls_var, new, args, kwargs, what):
    """`cls(...)` of a module class with its own __new__: the __new__ traced; what it gives is
    the result when it is no instance of cls (Python then runs no __init__), else a break."""
    fn = new.__func__ if isinstance(new, staticmethod) else new
    if not inspect.isfunction(fn):
        unimplemented(f"{what}: its class defines __new__ (not a Python function)")
    made = inline_call(tx, fn, [cls_var, *args], kwargs, None)
    made_type = made.python_type() if hasattr(made, "python_type") else None
    if not isinstance(made_type, type) or issubclass(made_type, cls_var.value):
        unimplemented(f"{what}: its __new__ makes an instance of it (its __init__ would run)")
    return made


INSTANCE_MAKERS.append(make_user_module)
