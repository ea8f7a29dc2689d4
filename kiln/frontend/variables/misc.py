"""Small families: NULL, bound methods of tensors and constants, modules, kiln's own markers."""

import dataclasses
import enum
import inspect
import os
import re
import sys
import types

import torch
import torch.utils._pytree as pytree

from kiln import config
from kiln.bytecode import emit
from kiln.exc import Unsupported, unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.markers import break_reason, graph_break, kiln_marker, skip_frame
from kiln.frontend.source import AttrSource, TorchAttrSource, proxied_dict, torch_attr
from kiln.frontend.user_errors import disabled_by
from kiln.frontend.variables.base import (
    BoundMethodVariable,
    PythonValueVariable,
    VariableTracker,
    probe,
    wrap_constant_like,
    wrap_loaded,
    wrap_value,
)
from kiln.frontend.variables.constant import ConstantVariable, fold, is_literal
from kiln.frontend.variables.user_attrs import call_object_slot, load_attr

# Note [Objects: a C descriptor's __get__ called]
# `desc.__get__(obj)` of a getset or member descriptor written in C (`type.__dict__["__dict__"]`,
# `torch.Tensor.shape`) is what reading `obj.<desc.__name__>` runs when that name, looked up along
# type(obj)'s MRO, finds this very descriptor (a getset/member descriptor is a data descriptor:
# it wins over the instance dict). Then the call is that attribute read, traced as any (a
# class's __dict__, a tensor's shape); another object (one whose class resolves the name to
# something else, or of no class of the descriptor's) is a break, as is `__get__(None, cls)`.
C_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)
METHOD_WRAPPER = type(object().__str__)


def descriptor_get(tx, bound, args, kwargs):
    """`desc.__get__(obj)` as `obj.<name>` (Note [Objects: a C descriptor's __get__ called]),
    or None when `bound` is no C descriptor's __get__."""
    if type(bound) is not METHOD_WRAPPER or probe(bound, "__name__", None) != "__get__":
        return None
    desc = bound.__self__
    if type(desc) not in C_DESCRIPTORS:
        return None
    if kwargs or not 1 <= len(args) <= 2:
        unimplemented(f"{desc.__name__} descriptor's __get__ with these arguments")
    obj = args[0]
    if obj.is_python_constant() and obj.as_python_constant() is None:
        unimplemented(f"{desc.__name__} descriptor's __get__(None, ...)")
    try:
        mro = obj.python_type().__mro__
    except Exception:
        mro = ()
    found = next((vars(k)[desc.__name__] for k in mro if desc.__name__ in vars(k)), None)
    if found is not desc:
        unimplemented(f"{desc.__name__} descriptor's __get__ on another class's object")
    return load_attr(tx, obj, desc.__name__)


# (type, method name) -> handler(tx, object variable, name, args, kwargs): methods of frozen
# objects that make something other than a constant, registered by their modules
OBJECT_METHODS = {}


class ConstantObjectVariable(PythonValueVariable):
    """An immutable object computed from constants or pinned by a guard (torch.finfo(dtype), a
    dataclass's Field objects, inspect.Signature/Parameter): attributes and pure methods fold."""

    def call_function(self, tx, args, kwargs):
        done = descriptor_get(tx, self.value, args, kwargs)
        if done is None:
            unimplemented(f"call of {self}")
        return done

    def var_getattr(self, tx, name):
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unimplemented(f"{type(self.value).__name__} has no attribute {name!r}")
        if callable(attr) and not isinstance(attr, type) and is_frozen(self.value):
            return BoundMethodVariable(self, name)
        return wrap_frozen(attr, f"attribute {name!r} of {type(self.value).__name__}")

    def call_method(self, tx, name, args, kwargs):
        modelled = OBJECT_METHODS.get((type(self.value), name))
        if modelled is not None:  # (Signature.bind: bound_args.py)
            return modelled(tx, self, name, args, kwargs)
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            unimplemented(f"{type(self.value).__name__}.{name} of non-constants")
        cargs = [a.as_python_constant() for a in args]
        ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
        try:
            result = getattr(self.value, name)(*cargs, **ckw)
        except Exception as e:
            unimplemented(f"{type(self.value).__name__}.{name} raised {type(e).__name__}: {e}")
        if (
            isinstance(self.value, str | re.Pattern | re.Match)  # (whose lists are new ones)
            and type(result) is list
            and all(map(is_literal, result))
        ):
            from kiln.frontend.variables.lists import ListVariable

            return ListVariable([ConstantVariable(v) for v in result])  # (split, findall)
        return wrap_frozen(result, f"{type(self.value).__name__}.{name}")

    def binary_op(self, fn, other):
        """`a <op> b` of two frozen objects (DispatchKeySet's `|`, `-`, `==`): folded."""
        try:
            result = fn(self.value, other.value)
        except Exception as e:
            unimplemented(f"{type(self.value).__name__} {fn.__name__} raised {type(e).__name__}")
        return wrap_frozen(result, f"{type(self.value).__name__} {fn.__name__}")

    def unpack_var_sequence(self, tx):
        try:
            items = list(self.value)
        except TypeError:
            unimplemented(f"iteration over {type(self.value).__name__}")
        return [wrap_frozen(i, f"item of {type(self.value).__name__}") for i in items]

    def reconstruct(self, cg):
        cg.load_object(self.value)


def _frozen_types():
    return (
        dataclasses.Field,
        type(dataclasses.MISSING),
        inspect.Signature,
        inspect.Parameter,
        torch.finfo,
        torch.iinfo,
        torch._C.DispatchKeySet,  # (its methods and operators make new sets)
        torch.torch_version.TorchVersion,  # (`torch.__version__ >= "2.1"`: a str compared by parts)
        re.Pattern,  # (a compiled regex and its matches: their methods are pure)
        re.Match,
        pytree.TreeSpec,  # (frozen dataclasses: Note [Pytree: a stand-in tree])
        pytree.MappingKey,
        pytree.SequenceKey,
        pytree.GetAttrKey,
    )


def is_frozen(value):
    """Objects kiln treats as immutable constants (their types never change them after creation,
    and nothing in traced code does)."""
    if isinstance(value, _frozen_types()):
        return True
    if isinstance(value, types.MappingProxyType):
        return _proxy_only_reference(value) and all(
            is_literal(k) and (is_literal(v) or is_frozen(v)) for k, v in value.items()
        )
    return False


# Note [Objects: a mappingproxy as a constant]
# A mappingproxy is a live view of its dict: it is a constant only when nothing else holds that
# dict (dataclasses' empty `Field.metadata`, a proxy made over a dict literal). A proxy over a
# dict the program keeps (`field(metadata=d)`, then `d[k] = v`) shows each change of d, so it is
# no constant: the read breaks. Who holds the dict is read from its reference count, compared
# with that of a dict only a proxy holds, counted the same way.
def _dict_references(proxy):
    return sys.getrefcount(proxied_dict(proxy))


_PRIVATE_DICT_REFERENCES = _dict_references(types.MappingProxyType({}))


def _proxy_only_reference(proxy):
    """Whether the dict behind `proxy` is held by that proxy alone."""
    return _dict_references(proxy) <= _PRIVATE_DICT_REFERENCES


def wrap_frozen(value, what):
    """A constant (literal, enum member, frozen object, tuple of them) as a VariableTracker."""
    from kiln.frontend.variables.lists import TupleVariable

    if is_literal(value) or isinstance(value, enum.Enum | torch._C.DispatchKey):
        return ConstantVariable(value)
    if is_frozen(value) or value is inspect.Parameter.empty:
        return ConstantObjectVariable(value)
    if type(value) is tuple or type(value).__name__ in (
        "odict_keys",
        "odict_values",
        "odict_items",
    ):
        return TupleVariable([wrap_frozen(v, what) for v in value])
    unimplemented(f"{what} is a {type(value).__name__}")


# Note [Builtins: id() of objects made in the frame]
# id(obj) of a set, list, dict or object made while tracing has no number yet (the object exists
# only once the transformed code runs), but identity is known: one variable per object, so two
# ids are equal when they are ids of the same variable, and differ when they are not and one of
# the two objects is still held by a local (a live object's address is not reused; two
# temporaries, `id([]) == id([])`, may share one in CPython: a break). `id(a) == id(b)` / `!=`
# fold to that; any other use of the number (printing it, arithmetic, returning it) is a break.
class ObjectIdVariable(VariableTracker):
    """id() of an object made while tracing (Note [Builtins: id() of objects made in the
    frame])."""

    def __init__(self, obj, **kw):
        super().__init__(**kw)
        self.obj = obj

    def python_type(self):
        return int

    def same_as(self, tx, other):
        """Whether this id equals `other` (another id of an object made while tracing)."""
        if self.obj is other.obj:
            return True
        while tx is not None:  # two objects differ in id while one of them is alive
            if any(v is self.obj or v is other.obj for v in tx.symbolic_locals.values()):
                return False
            tx = getattr(tx, "parent", None)
        unimplemented("ids of two objects no local holds (Python may reuse a freed address)")

    def reconstruct(self, cg):
        unimplemented(f"the id() of {self.obj} leaves the traced code")

    def __repr__(self):
        return f"ObjectIdVariable({self.obj!r})"


class NullVariable(VariableTracker):
    """The NULL that PUSH_NULL / LOAD_GLOBAL put below a callable."""

    def __repr__(self):
        return "NULL"


class DeletedVariable(VariableTracker):
    """A local that is unbound (before assignment or after `del`)."""


def _load_value(self, cg):
    """reconstruct() of a value kiln holds: its source if any, else the object itself."""
    if self.source is not None:
        self.source.reconstruct(cg)
    else:
        cg.load_object(self.value)


class TensorMethodDescriptorVariable(VariableTracker):
    """An unbound Tensor method (`torch.Tensor.add`): called as `args[0].add(*args[1:])`."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def call_function(self, tx, args, kwargs):
        from kiln.frontend.variables.tensor import TensorVariable

        if not args or not isinstance(args[0], TensorVariable):
            unimplemented(f"Tensor.{self.value.__name__} on a non-tensor")
        return args[0].call_method(tx, self.value.__name__, args[1:], kwargs)

    def var_getattr(self, tx, name):
        if name == "__get__" and isinstance(self.value, _C_FIELDS):
            # `Tensor.grad.__get__`: a new method-wrapper per read, equal (and hashed) by its
            # descriptor and slot (torch.overrides.get_default_nowrap_functions() holds them)
            return ConstantObjectVariable(self.value.__get__)
        if name in ("__name__", "__qualname__"):  # (fixed by the descriptor: Tensor's own)
            return ConstantVariable(getattr(self.value, name))
        return super().var_getattr(tx, name)

    def hasattr(self, tx, name):
        return ConstantVariable(hasattr(self.value, name))  # (a C descriptor's: fixed)

    def python_type(self):
        return type(self.value)

    reconstruct = _load_value


_C_FIELDS = (types.GetSetDescriptorType, types.MemberDescriptorType)


class TensorMethodVariable(VariableTracker):
    """`tensor.method` before it is called."""

    def __init__(self, tensor, name, **kw):
        super().__init__(**kw)
        self.tensor = tensor
        self.name = name

    def reconstruct(self, cg):
        cg.reconstruct(self.tensor)
        cg.extend(emit.load_attr(self.name))

    def call_function(self, tx, args, kwargs):
        return self.tensor.call_method(tx, self.name, args, kwargs)


class ConstantMethodVariable(VariableTracker):
    """A method of an immutable constant (`"a".join`, `(1, 2).index` ...), folded when called."""

    def __init__(self, value, name, receiver=None, **kw):
        super().__init__(**kw)
        self.value = value
        self.name = name
        self.receiver = receiver  # the constant's variable (its source), when known

    def call_function(self, tx, args, kwargs):
        if self.name == "join" and len(args) == 1 and not args[0].is_python_constant():
            items = args[0].unpack_var_sequence(tx)  # `sep.join(map(...))`: its items, consumed
            if all(i.is_python_constant() for i in items):
                args = [ConstantVariable(tuple(i.as_python_constant() for i in items))]
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            if self.name == "format" and isinstance(self.value, str):
                unimplemented("str.format of a non-constant")
            unimplemented(f"{type(self.value).__name__}.{self.name} of non-constants")
        cargs = [a.as_python_constant() for a in args]
        ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
        if self.name == "__iter__" and not cargs and not ckw and type(self.value) in (str, bytes):
            from kiln.frontend.variables.lists import ListIteratorVariable

            # `s.__iter__()`: a new iterator over the characters (bytes: their ints), as iter(s)
            return ListIteratorVariable([ConstantVariable(c) for c in self.value])
        if self.name == "__new__" and (not cargs or cargs[0] is not self.value):
            unimplemented(f"{self.value.__name__}.__new__ of another class (not folded)")
        result = fold(lambda: getattr(self.value, self.name)(*cargs, **ckw))
        if result.value is self.value and self.receiver is not None:
            return self.receiver  # (`fs.copy() is fs`: the object itself, not a new constant)
        if type(result.value) is frozenset and result.value is not self.value:
            # (a new frozenset written as a code constant could be one object with an equal
            # constant: `fs.union() is fs` must stay False)
            unimplemented(f"frozenset.{self.name} makes a new frozenset (identity not modelled)")
        if type(result.value) is list and all(is_literal(v) for v in result.value):
            from kiln.frontend.variables.lists import ListVariable

            return ListVariable([ConstantVariable(v) for v in result.value])  # str.split ...
        if type(result.value) is dict and all(
            map(is_literal, (*result.value, *result.value.values()))
        ):
            from kiln.frontend.variables.dicts import ConstDictVariable

            items = {k: ConstantVariable(v) for k, v in result.value.items()}
            return ConstDictVariable(items)  # str.maketrans
        if not is_literal(result.value):
            unimplemented(f"{type(self.value).__name__}.{self.name} returned a non-constant")
        return result

    def reconstruct(self, cg):
        cg.load_object(getattr(self.value, self.name))


def _traced_instance(value):
    """Whether `value` is an instance (not a class or function) of a class from a module in
    config.traced_modules."""
    cls = type(value)
    if isinstance(value, (type, types.FunctionType, types.ModuleType)):
        return False
    mod = cls.__module__ or ""
    return any(mod == m or mod.startswith(m + ".") for m in config.traced_modules)


class PythonModuleVariable(VariableTracker):
    """A Python module object (torch, math, a user module)."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def python_type(self):
        return type(self.value)

    def var_getattr(self, tx, name):
        stored = _stored_module_global(tx, self.value, name)
        if stored is not None:  # assigned while tracing (`global name` in a function of it)
            return stored
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unimplemented(f"module {self.value.__name__} has no attribute {name!r}")
        if self.source is not None and not _is_skipped_module(self.value):
            return wrap_loaded(tx, attr, AttrSource(self.source, name))
        path = f"{self.value.__name__}.{name}"
        if type(attr) in (dict, list, set) and path.startswith("torch.") and _names(path, attr):
            # a mutable table of torch's (`from torch.x import _TABLE`): read through its path,
            # guarded like any container with a source
            return wrap_value(tx, attr, TorchAttrSource(path))
        if _traced_instance(attr) and path.startswith("torch.") and _names(path, attr):
            # an object of a class kiln traces (torch.distributions' `constraints.real`): read
            # through its path, guarded as a user's object
            return wrap_value(tx, attr, TorchAttrSource(path))
        return wrap_constant_like(tx, attr)

    def hasattr(self, tx, name):
        """hasattr(module, name) (Note [Objects: hasattr on a module])."""
        stored = _stored_module_global(tx, self.value, name)
        if stored is not None:
            return ConstantVariable(True)
        found = hasattr(self.value, name)
        if self.source is None or _is_skipped_module(self.value):
            return ConstantVariable(found)  # (its attributes are read unguarded too)
        d = getattr(self.value, "__dict__", None)
        if found and type(d) is dict and name in d:
            self.var_getattr(tx, name)  # (guards the attribute, as reading it does)
            return ConstantVariable(True)
        if type(d) is dict and "__getattr__" not in d:
            if found:  # (ModuleType's own: `__dir__`, `__class__`)
                return ConstantVariable(True)
            tx.output.guards.add(GuardKind.NOT_IN, AttrSource(self.source, "__dict__"), name)
            return ConstantVariable(False)
        unimplemented(f"hasattr({self.value.__name__}, {name!r}) answered by its __getattr__")

    reconstruct = _load_value

    def __repr__(self):
        return f"PythonModuleVariable({self.value.__name__})"


# Note [Objects: hasattr on a module]
# hasattr(module, name) of a module whose attributes kiln reads unguarded (torch, the standard
# library: config.skip_modules) folds like those reads. Of a user module (one with a source) a
# present attribute is read as `module.name` is (its guard recompiles when it is rebound) and an
# absent one adds a NOT_IN guard on the module's __dict__ (defining it later recompiles); a
# module-level `__getattr__` (PEP 562) could answer either way: a break.


def _names(path, value):
    """Whether torch's dotted `path` reads `value` itself."""
    try:
        return torch_attr(path) is value
    except Exception:
        return False


def _stored_module_global(tx, mod, name):
    """The value traced code stored into global `name` of module `mod`, or None
    (Note [Side effects: globals of another module])."""
    effects = tx.output.side_effects
    d = getattr(mod, "__dict__", None)
    if type(d) is not dict or not effects.has_global_stores():
        return None
    gname = "" if d is tx.output.root_fn.__globals__ else tx.output.globals_name(d)
    return effects.load_global(name, gname)


def _is_skipped_module(mod):
    name = getattr(mod, "__name__", "")
    return any(name == m or name.startswith(m + ".") for m in config.skip_modules) or name in (
        "math",
        "operator",
        "builtins",
        "functools",
        "itertools",
        "collections",
    )


class GraphBreakVariable(VariableTracker):
    """`kiln.graph_break()`: calling it breaks the graph here."""

    def call_function(self, tx, args, kwargs):
        unimplemented("kiln.graph_break() called")

    def reconstruct(self, cg):
        cg.load_object(graph_break)


# Note [Markers: skip_frame and step_unsupported]
# `kiln.skip_frame()` in traced code gives up on the frame being traced: it runs in Python as a
# whole (a graph break that cannot resume, `Unsupported.eager_frame`); in a resume function that
# is the rest after an earlier break. `kiln.step_unsupported()` breaks the graph there, and the
# resume function after it runs in Python uncompiled (`rest_in_python`, read by
# FrameCache._trace); called in an inlined callee, the break is placed at the root's call of it
# (the callee then compiles as a frame of its own, whose rest runs in Python) and the root's
# resume function compiles. Both are torch._dynamo's markers of the same names.
class FrameEndVariable(VariableTracker):
    """`kiln.skip_frame()` / `kiln.step_unsupported()` (Note [Markers: skip_frame and ...])."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def call_function(self, tx, args, kwargs):
        if self.value is skip_frame:
            e = Unsupported("kiln.skip_frame() called: the frame runs in Python")
            e.eager_frame = True
        else:
            e = Unsupported("kiln.step_unsupported() called: the rest of the frame runs in Python")
            e.rest_in_python = True
        raise e

    def reconstruct(self, cg):
        cg.load_object(self.value)


class DisabledFunctionVariable(VariableTracker):
    """A function wrapped by `kiln.disable`, or one of kiln's that runs in Python: never
    traced (Note [Stance: inside compiled code])."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def call_function(self, tx, args, kwargs):
        reason = break_reason(self.value)
        if reason is not None:
            unimplemented(reason)
        name = getattr(self.value, "__qualname__", None) or type(self.value).__qualname__
        unimplemented(f"call to {name}, kept out of compilation by {disabled_by(self.value)}")

    def reconstruct(self, cg):
        if kiln_marker(self.value, "_kiln_shallow") is not None and cg.callee_factory:
            cg.load_object(cg.callee(self.value))  # (recursive=False: its callees compiled)
        else:
            _load_value(self, cg)


_CONTAINER_TYPES = (set, frozenset, dict, list, tuple)


def _exact_type(var):
    """The Python type of a container kiln models itself (not a user object), else None."""
    if hasattr(var, "value") or not hasattr(var, "items") and not hasattr(var, "values"):
        return None
    try:
        return var.python_type()
    except Exception:
        return None


def _literals(values):
    return all(isinstance(v, ConstantVariable) and is_literal(v.value) for v in values)


def _callable_name(fn):
    """`Owner.name` of a bound C method (a pybind method's own __qualname__ is its binding's
    internal record type), else the callable's qualified name."""
    owner, name = probe(fn, "__self__", None), probe(fn, "__name__", None)
    if owner is not None and isinstance(name, str) and not isinstance(owner, types.ModuleType):
        cls = owner if isinstance(owner, type) else type(owner)
        return f"{cls.__qualname__}.{name}"
    return getattr(fn, "__qualname__", None) or repr(fn)


# C functions outside builtins that fold on literal arguments: no user code runs for them
# (`os.fspath(".")`; an object with __fspath__ is not a literal, so it stays a break)
_FOLD_ON_LITERALS = (os.fspath,)


class OpaqueCallableVariable(VariableTracker):
    """A callable kiln does not trace into (C functions outside torch, other packages)."""

    def __init__(self, value, **kw):
        super().__init__(**kw)
        self.value = value

    def python_type(self):
        return type(self.value)

    def call_function(self, tx, args, kwargs):
        owner = probe(self.value, "__objclass__", None)
        if owner in _CONTAINER_TYPES and args and _exact_type(args[0]) is owner:
            # `frozenset.__and__(p, q)`, `set.add(s, x)`: the method of a container kiln models
            return args[0].call_method(tx, self.value.__name__, list(args[1:]), kwargs)
        if owner in (set, frozenset) and args and hasattr(args[0], "c_method"):
            # `set.__or__(s, t)` on an instance of a subclass (Note [Sets: subclass instances])
            method = args[0].c_method(self.value.__name__, owner)
            return method.call_function(tx, list(args[1:]), kwargs)
        done = call_object_slot(tx, self.value, args, kwargs)
        if done is None:
            done = descriptor_get(tx, self.value, args, kwargs)
        if done is not None:
            return done
        if self.value in _FOLD_ON_LITERALS and _literals([*args, *kwargs.values()]):
            cargs = [a.as_python_constant() for a in args]
            ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
            return fold(lambda: self.value(*cargs, **ckw))
        unimplemented(f"call to {_callable_name(self.value)} (not traceable)")

    def _fixed_name(self, name):
        """Whether `name` of the callable cannot change (a C callable's, or torch's function's)."""
        if name not in ("__name__", "__qualname__", "__module__"):
            return False
        if not isinstance(self.value, types.FunctionType):
            return True
        return (self.value.__module__ or "").split(".")[0] == "torch"

    def var_getattr(self, tx, name):
        if self._fixed_name(name) and hasattr(self.value, name):
            return ConstantVariable(getattr(self.value, name))
        return super().var_getattr(tx, name)

    def hasattr(self, tx, name):
        if self._fixed_name(name):
            return ConstantVariable(hasattr(self.value, name))
        return super().hasattr(tx, name)

    reconstruct = _load_value


__all__ = ["ConstantVariable"]
