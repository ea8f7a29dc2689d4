"""User functions: called by inlining their bytecode into the current trace."""

import dataclasses
import functools
import inspect
import sys
import types
import warnings

import torch

from kiln import config
from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.markers import (
    is_allowed_in_graph,
    is_leaf_function,
    is_nonstrict,
    kiln_marker,
    nonstrict_trace,
)
from kiln.frontend.source import (
    AttrSource,
    GetItemSource,
    LocalSource,
    PartialDictSource,
    partial_dict,
)
from kiln.frontend.user_errors import disabled_by
from kiln.frontend.variables import leaf_functions, nonstrict_calls, optim, stdlib
from kiln.frontend.variables.allowed_calls import allowed_call
from kiln.frontend.variables.base import VariableTracker, wrap_constant_like, wrap_value
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import SizeVariable, TupleVariable
from kiln.frontend.variables.logging_vars import check_warnings_call
from kiln.frontend.variables.misc import ConstantObjectVariable, DeletedVariable
from kiln.frontend.variables.signatures import DefaultSlot, code_signature


class BaseFunctionVariable(VariableTracker):
    """Something callable whose body kiln traces."""


class UserFunctionVariable(BaseFunctionVariable):
    """A Python function (guarded by identity when it has a source)."""

    def __init__(self, fn, **kw):
        super().__init__(**kw)
        self.fn = fn

    def python_type(self):
        return types.FunctionType

    def is_python_constant(self):
        return True

    def as_python_constant(self):
        return self.fn

    def get_function(self):
        return self.fn

    def self_args(self):
        return []

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__", "__doc__", "__code__"):
            return ConstantVariable(getattr(self.fn, name))
        if name == "__type_params__" and getattr(self.fn, name, None) == ():  # (3.12+; wraps)
            return ConstantVariable(())
        if name == "__wrapped__" and hasattr(self.fn, "__wrapped__"):
            src = AttrSource(self.source, name) if self.source is not None else None
            return wrap_value(tx, self.fn.__wrapped__, src)
        if name == "__get__" and type(self) is UserFunctionVariable:
            return FunctionGetVariable(self)
        if name in _FUNCTION_DATA or name in getattr(self.fn, "__dict__", {}):
            return _function_data(tx, self, name)
        unimplemented(f"attribute {name!r} of function {self.fn.__qualname__}")

    def call_function(self, tx, args, kwargs):
        from kiln.frontend.variables import autograd_function as af

        if self.fn is af.FUNCTION_APPLY and self.self_args():
            cls = self.self_args()[0]  # `apply = MyFn.apply` called later
            if cls.is_python_constant() and af.is_autograd_function(cls.as_python_constant()):
                apply = af.AutogradFunctionApplyVariable(cls.as_python_constant(), cls.source)
                self.autograd_apply = apply  # rebuilt by it at a break in the call
                return apply.call_function(tx, args, kwargs)
        if not self.self_args() and is_leaf_function(self.fn):
            return leaf_functions.leaf_call(tx, self.fn, args, kwargs)
        if is_nonstrict(self.fn) and nonstrict_calls.passable(tx, self.self_args()):
            wrapped = vars(self.fn)["__wrapped__"]
            return nonstrict_calls.nonstrict_call(tx, wrapped, [*self.self_args(), *args], kwargs)
        if not self.self_args() and is_allowed_in_graph(self.fn):
            name = self.fn.__qualname__  # Note [allow_in_graph: one opaque call]
            out = allowed_call(tx, self.fn, args, kwargs, name, inline_without_tensors=True)
            if out is not None:
                return out
        folded = _FOLDED_FUNCTIONS.get(self.fn) if not self.self_args() else None
        if folded is not None:
            return folded(tx, *args, **kwargs)
        return inline_call(tx, self.fn, [*self.self_args(), *args], kwargs, self.source)

    def reconstruct(self, cg):
        from kiln.frontend.variables.classes import load_class_function, local_owner

        owner = local_owner(self.fn) if self.source is None else None
        if owner is not None:
            # a function of a class made in the frame (a staticmethod's, `C.f`): the one the
            # run's class holds, whose `__class__` cell is that class (Note [Classes: local
            # classes]); compiled by its code when it broke inside
            if cg.compile_callees and self._closure_callee_ok(cg, sourced=False):
                cg.load_object(functools.partial, push_null=True)
                cg.load_object(cg.closure_callee(self.fn.__code__))
                load_class_function(cg, *owner)
                cg.extend(emit.call(2))
            else:
                load_class_function(cg, *owner)
            return
        if cg.compile_callees and self.fn.__closure__ is None:
            cg.load_object(cg.callee(self.fn))  # it broke inside: it runs as its own frame
        elif cg.compile_callees and self._closure_callee_ok(cg):
            # a closure: this call's function object with its own cells, through the entry
            # of its code (Note [Cache: closures made per call]); a wrapper of the traced
            # function object would run the cells of the call that was traced. A closure of
            # another module (a library's decorator around a forward) has its own globals.
            if self.fn.__globals__ is cg.output.root_fn.__globals__:
                entry = cg.closure_callee(self.fn.__code__)
            else:
                entry = cg.closure_entry(self.fn)
            cg.load_object(functools.partial, push_null=True)
            cg.load_object(entry)
            self.source.reconstruct(cg)
            cg.extend(emit.call(2))
        elif self.source is not None:
            super().reconstruct(cg)
        else:
            cg.load_object(self.fn)

    def _closure_callee_ok(self, cg, sourced=True):
        fn = self.fn
        return (
            (self.source is not None or not sourced)
            and getattr(cg, "closure_callee", None) is not None
            and not fn.__defaults__
            and not fn.__kwdefaults__
            and (
                fn.__globals__ is cg.output.root_fn.__globals__
                or (sourced and cg.callee_factory is not None)
            )
        )

    def __repr__(self):
        return f"{type(self).__name__}({self.fn.__qualname__})"


# Note [Guards: methods read from a class]
# A method, static/class method or property getter found on an object's class is inlined from
# the function the class held while tracing. The object's TYPE_MATCH guard pins the class, not
# its dict: `Cls.method = other` after compiling would leave the old body running (it did, for
# plain objects and nn.Modules alike). So the function is pinned by identity where the class is
# read (`obj.__class__.method`, through the MRO as Python's lookup goes): a replaced or newly
# shadowing method recompiles.
def pin_class_attr(tx, source, fn):
    """Guard the function a class attribute read found (None source: nothing to read)."""
    if source is not None:
        tx.output.guards.add(GuardKind.ID_MATCH, source, fn)


class UserMethodVariable(UserFunctionVariable):
    """A function bound to a traced object (module, user object)."""

    source_is_method = False  # its source reads the method (an input), else its function

    def __init__(self, fn, obj, **kw):
        super().__init__(fn, **kw)
        self.obj = obj

    def python_type(self):
        return types.MethodType

    def self_args(self):
        return [self.obj]

    def var_getattr(self, tx, name):
        if name == "__self__":
            return self.obj
        if name == "__func__":
            source = self.source
            if source is not None and self.source_is_method:
                source = AttrSource(source, "__func__")
            return UserFunctionVariable(self.fn, source=source)
        # a bound method reads every other attribute from its function (`m.__dict__`, as
        # method.__getattribute__ forwards them); the function, found on a class and pinned
        # by the method's own guards, is read through a source of its own
        source = None
        if name in _FUNCTION_DATA or name in getattr(self.fn, "__dict__", {}):
            bound = getattr(self.obj, "value", None)  # (a classmethod's class)
            owner = bound if isinstance(bound, type) else self.obj.python_type()
            if any(c in owner.__mro__ for c in tx.output.made_classes):
                # a class the trace built: its functions are made again per call
                unimplemented(f"attribute {name!r} of a method of {owner.__qualname__}")
            source = tx.pinned_source("fn", self.fn)
        return UserFunctionVariable(self.fn, source=source).var_getattr(tx, name)

    def reconstruct(self, cg):
        from kiln.frontend.variables.classes import load_class_function, local_owner

        apply = getattr(self, "autograd_apply", None)
        if apply is not None and cg.compile_callees:  # `MyFn.apply` that broke when called
            apply.reconstruct(cg)
            return
        # one bound method object per variable: `o = C().m; weakref.ref(o)` rebuilt at a break
        # (the local and the stack) must be one object, as in eager
        once = not cg.compile_callees
        if once and isinstance(self.source, LocalSource):
            self.source.reconstruct(
                cg
            )  # the frame's own bound method object (a weakref's referent)
            return
        name = cg._temps.get(id(self)) if once else None
        if name is not None:
            cg.extend(emit.load_fast(name))
            return
        cg.load_object(types.MethodType, push_null=True)
        owner = local_owner(self.fn)
        if owner is not None:  # a method of a class made in the frame: the run's own function
            load_class_function(cg, *owner)
        else:
            cg.load_object(cg.callee(self.fn) if cg.compile_callees else self.fn)
        compile_callees, cg.compile_callees = cg.compile_callees, False
        cg.reconstruct(self.obj)  # the object itself (a module: not its compiled forward)
        cg.compile_callees = compile_callees
        cg.extend(emit.call(2))
        if once:
            name = cg._temps[id(self)] = cg.new_temp()
            cg.extend(emit.copy(1) + emit.store_fast(name))


def bound_classmethod(cm, owner, tx=None):
    """`cls.f` for a classmethod `cm` of the class `owner` (a variable): its function bound to it.
    Up to 3.12 classmethod chains to the wrapped object's own __get__: over a property (given
    `tx`), `cls.f` is its getter's result for cls, inlined; over anything else (another
    descriptor, a decorator's object) it is left to Python."""
    func = cm.__func__
    if tx is not None and isinstance(func, property) and sys.version_info < (3, 13):
        if isinstance(func.fget, types.FunctionType):
            return inline_call(tx, func.fget, [owner], {}, None)
    if not isinstance(func, types.FunctionType):
        unimplemented(f"a classmethod over {type(cm.__func__).__name__} (not a function)")
    return UserMethodVariable(cm.__func__, owner)


class FunctionGetVariable(VariableTracker):
    """`fn.__get__` of a plain function: calling it with an object binds the function to it."""

    def __init__(self, fn_var, **kw):
        super().__init__(**kw)
        self.fn_var = fn_var

    def call_function(self, tx, args, kwargs):
        if kwargs or not 1 <= len(args) <= 2:
            unimplemented("function.__get__ with these arguments")
        obj = args[0]
        if obj.is_python_constant() and obj.as_python_constant() is None:
            return self.fn_var  # looked up on the class: the function itself
        return UserMethodVariable(self.fn_var.fn, obj, source=self.fn_var.source)


class NestedUserFunctionVariable(BaseFunctionVariable):
    """A function made by MAKE_FUNCTION while tracing (lambdas, nested functions, closures)."""

    keeps_identity = True  # rebuilt once: the code after a break sees one function object

    def __init__(self, code, globals_, defaults=None, kwdefaults=None, **kw):
        super().__init__(**kw)
        self.closure = {}  # freevar name -> CellRefVariable
        self.code = code
        self.globals = globals_
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        self.annotations = None  # what MAKE_FUNCTION was given (a tuple of pairs or a dict)

    def python_type(self):
        return types.FunctionType

    _NAMES = ("__name__", "__qualname__", "__module__", "__doc__")

    def _names(self):
        names = {
            "__name__": self.code.co_name,
            "__qualname__": getattr(self.code, "co_qualname", self.code.co_name),
            "__module__": self.globals.get("__name__"),
        }
        return {**names, **getattr(self, "attrs", {})}

    def var_getattr(self, tx, name):
        names = self._names()
        if name in names:
            return ConstantVariable(names[name])
        if name == "__code__":
            return ConstantVariable(self.code)
        stored = getattr(self, "attr_vars", {})
        if name in stored:
            return stored[name]
        if "__dict__" in stored and name in stored["__dict__"].items:
            return stored["__dict__"].items[name]  # set through f.__dict__ (update_wrapper)
        if name == "__doc__":  # what Python makes of the code (its first constant, by version)
            cells = tuple(types.CellType() for _ in self.code.co_freevars) or None
            return ConstantVariable(types.FunctionType(self.code, {}, None, None, cells).__doc__)
        if name == "__annotations__" and self.annotations is None:
            return self._own("__annotations__", {})  # made on first read, then the same dict
        if name == "__dict__":
            return self._dict()
        if name == "__type_params__" and hasattr(types.FunctionType, name):
            # 3.12+ (functools.WRAPPER_ASSIGNMENTS reads it): () but for a generic function,
            # whose SET_FUNCTION_TYPE_PARAMS kiln does not trace
            return ConstantVariable(())
        return super().var_getattr(tx, name)

    def hasattr(self, tx, name):
        """hasattr(f, name): a function has its type's attributes and those set on it."""
        held = getattr(self, "attr_vars", {})
        in_dict = "__dict__" in held and name in held["__dict__"].items
        return ConstantVariable(name in held or in_dict or hasattr(types.FunctionType, name))

    # Note [Functions: the __dict__ of a function made in the frame]
    # Attributes set on a function made in the frame (`f.foo = 1`, `__wrapped__`) are held in
    # attr_vars until its __dict__ is read; from then on they live in one dict variable, the
    # function's __dict__, so `functools.update_wrapper(wrapper, f)` (contextmanager, wraps)
    # copies them with `wrapper.__dict__.update(f.__dict__)`, and later reads and stores go
    # through that dict. `__annotations__` and `__type_params__` (slots of the function type)
    # are not in a function's __dict__.
    def _dict(self):
        """The function's __dict__: one dict variable holding the attributes set on it."""
        held = getattr(self, "attr_vars", {})
        if "__dict__" not in held:
            entries = {k: v for k, v in held.items() if k not in _SLOT_ATTRS}
            rest = {k: v for k, v in held.items() if k in _SLOT_ATTRS}
            self.attr_vars = {**rest, "__dict__": ConstDictVariable(entries)}
        return self.attr_vars["__dict__"]

    def _own(self, name, items):
        """An attribute dict the function holds (one variable, mutated in place)."""
        self.attr_vars = {**getattr(self, "attr_vars", {}), name: ConstDictVariable(items)}
        return self.attr_vars[name]

    def setattr(self, tx, name, value):
        """`f.__name__ = "x"` (functools.wraps, torch's _ntuple): kept, and set on the rebuilt one;
        other attributes (`__wrapped__`, `__annotations__`) are held as the variables given."""
        if name in ("__code__", "__defaults__", "__kwdefaults__", "__dict__", "__closure__"):
            unimplemented(f"attribute assignment .{name} on a function made in the frame")
        if name not in self._NAMES:
            held = getattr(self, "attr_vars", {})
            if "__dict__" in held and name not in _SLOT_ATTRS:
                held["__dict__"].items[name] = value  # Note [Functions: the __dict__ of ...]
            else:
                self.attr_vars = {**held, name: value}
            return
        if not value.is_python_constant():
            unimplemented(f"attribute assignment .{name} on a function made in the frame")
        c = value.as_python_constant()
        if not isinstance(c, (str, type(None))):
            unimplemented(f"attribute assignment .{name} = {type(c).__name__} on a function")
        self.attrs = {**getattr(self, "attrs", {}), name: c}

    def call_function(self, tx, args, kwargs):
        cells = tuple(types.CellType() for _ in self.code.co_freevars) or None
        fn = types.FunctionType(self.code, self.globals, self.code.co_name, None, cells)
        return inline_call(
            tx,
            fn,
            args,
            kwargs,
            None,
            defaults=self.defaults,
            kwdefaults=self.kwdefaults,
            closure=self.closure,
        )

    def reconstruct(self, cg):
        """MAKE_FUNCTION again over the cells it closes over (Note [Functions: rebuilt closures])."""
        cells = [self.closure.get(name) for name in self.code.co_freevars]
        if any(c is None for c in cells):
            unimplemented("rebuilding a function that closes over cells kiln does not track")
        if self.defaults:
            for d in self.defaults:
                cg.reconstruct(d)
            cg.extend(emit.build_tuple(len(self.defaults)))
        if self.kwdefaults:
            for k, v in self.kwdefaults.items():
                cg.extend(emit.load_const(k))
                cg.reconstruct(v)
            cg.extend(emit.build_map(len(self.kwdefaults)))
        if self.annotations is not None:
            cg.reconstruct(self.annotations)
        fills = []  # (how to store into the cell, the variable whose value it holds)
        for c in cells:
            fills.append(_load_cell(cg, c))
        if cells:
            cg.extend(emit.build_tuple(len(cells)))
        cg.extend(
            emit.make_function(
                self.code,
                defaults=bool(self.defaults),
                kwdefaults=bool(self.kwdefaults),
                annotations=self.annotations is not None,
                closure=bool(cells),
            )
        )
        if self.globals is not cg.output.root_fn.__globals__:
            # made by code of another module (dataclasses' `wrap`): MAKE_FUNCTION in the
            # transformed code would give it this frame's globals
            made = cg.new_temp()
            cg.extend(emit.store_fast(made))
            cg.load_object(with_globals, push_null=True)
            cg.extend(emit.load_fast(made))
            cg.load_object(self.globals)
            cg.extend(emit.call(2))
        for name, c in getattr(self, "attrs", {}).items():
            cg.extend(emit.copy(1) + emit.load_const(c) + emit.swap(2) + emit.store_attr(name))
        for name, var in getattr(self, "attr_vars", {}).items():
            if name == "__dict__":  # its entries, set one by one
                for key, item in var.items.items():
                    cg.extend(emit.copy(1))
                    cg.reconstruct(item)
                    cg.extend(emit.swap(2) + emit.store_attr(key))
                continue
            cg.extend(emit.copy(1))
            cg.reconstruct(var)
            cg.extend(emit.swap(2) + emit.store_attr(name))
        if any(f is not None for f in fills):
            # the values go in after the function exists: a cell may hold the function itself
            temp = cg.new_temp()
            cg.extend(emit.copy(1) + emit.store_fast(temp))
            cg._temps[id(self)] = temp
            for f in fills:
                if f is not None:
                    store, value = f
                    cg.reconstruct(value)
                    cg.extend(store)


def with_globals(fn, f_globals):
    """`fn` made again over other globals (same code, defaults, cells and annotations)."""
    out = types.FunctionType(fn.__code__, f_globals, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__annotations__ = fn.__annotations__
    out.__qualname__ = fn.__qualname__
    return out


# Note [Functions: rebuilt closures]
# A function made while tracing (MAKE_FUNCTION) that escapes the frame (returned, stored, left on
# the stack at a graph break) is made again by the transformed code, over the cells it closes over:
#   - a cell of the root frame (its cellvars): the frame's own real cell (LOAD_CLOSURE); its
#     value, traced symbolically, is stored into it (STORE_DEREF) once the function exists;
#   - a free variable of the root frame (a resume function's shared cells, a closure's own) or
#     of an inlined function with a source (`fn.__closure__[i]`): the real cell, loaded as is
#     (stores to it are replayed as side effects);
#   - a cell of an inlined call: that frame never ran, so a new cell (`types.CellType()`) is made
#     once per transformed code (functions that shared it still share it) and given the value the
#     cell had when tracing ended.
# Values go into the cells after MAKE_FUNCTION, so a recursive function (its own cell holds it)
# loads the function just made. A cell whose variable was never assigned (or was deleted) stays
# empty, as in Python. Names set on the function (`f.__name__ = ...`) are set on the rebuilt one.


def _cell_value(tx, name):
    value = tx.symbolic_locals.get(name)
    if value is None or isinstance(value, DeletedVariable) or hasattr(value, "realize"):
        return None  # never assigned, deleted, or (a LazyVariable) an argument still in its cell
    return value


def _load_cell(cg, ref):
    """Push the cell `ref` stands for; (store instructions, value) to fill it, or None."""
    if not hasattr(ref, "tx"):  # a FrameCellVariable: a real cell (a free variable)
        cell, source = ref.ref
        temp = cg._temps.get(("frame cell", id(cell)))
        if temp is not None:  # (pinned: pin_frame_cell)
            cg.extend(emit.load_fast(temp))
        elif hasattr(source, "var_name"):  # of the root frame
            cg.extend(emit.load_closure(source.var_name))
        elif isinstance(source, AttrSource) and source.attr == "cell_contents":
            source.source.reconstruct(cg)  # `fn.__closure__[i]` of an inlined function
        elif source is None:  # (of a function the trace guarded, reached without a source)
            cg.load_object(cell)
        else:
            unimplemented("rebuilding a function over a cell reached without a source")
        return None
    tx, name = ref.tx, ref.name
    value = _cell_value(tx, name)
    if getattr(tx, "is_root", False):
        cg.extend(emit.load_closure(name))
        return (emit.store_deref(name), value) if value is not None else None
    key = ("cell", id(tx), name)
    temp = cg._temps.get(key)
    if temp is not None:
        cg.extend(emit.load_fast(temp))
        return None
    temp = cg._temps[key] = cg.new_temp()
    cg.load_object(types.CellType, push_null=True)
    cg.extend(emit.call(0) + emit.copy(1) + emit.store_fast(temp))
    if value is None:
        return None
    return (emit.load_fast(temp) + emit.store_attr("cell_contents"), value)


def pin_frame_cell(cg, ref):
    """Load the real cell a FrameCellVariable stands for into a temporary that later loads of it
    read (but a cell of the root frame's own, which LOAD_CLOSURE reads the same at any time)."""
    cell, source = ref.ref
    key = ("frame cell", id(cell))
    if hasattr(source, "var_name") or key in cg._temps:
        return
    _load_cell(cg, ref)
    temp = cg._temps[key] = cg.new_temp()
    cg.extend(emit.store_fast(temp))


_SLOT_ATTRS = ("__annotations__", "__type_params__")  # set on a function, never in its __dict__


# Note [Functions: data attributes]
# `fn.__defaults__`, `fn.__kwdefaults__`, `fn.__dict__` and the attributes a user set on a function
# (`fn.calls = 0`, functools.wraps' `__wrapped__`) are writable: with a source they are read
# through it (so guarded like any attribute); without one (a function object made or reached
# with no path) only literal values fold, anything else breaks.
_FUNCTION_DATA = ("__defaults__", "__kwdefaults__", "__dict__", "__annotations__")
if sys.version_info >= (3, 12):  # (functools.wraps copies it there)
    _FUNCTION_DATA += ("__type_params__",)


def _function_data(tx, var, name):
    value = getattr(var.fn, name)
    if var.source is not None:
        return wrap_value(tx, value, AttrSource(var.source, name))
    if is_literal(value):
        return ConstantVariable(value)
    if type(value) is dict and all(map(is_literal, [*value, *value.values()])):
        return ConstDictVariable({k: ConstantVariable(v) for k, v in value.items()})
    unimplemented(f"attribute {name!r} of function {var.fn.__qualname__} (no source)")


def _wrap_default(tx, value, source):
    if isinstance(value, VariableTracker):
        return value
    if is_literal(value):
        return ConstantVariable(value)
    if type(value) is object:  # a sentinel (`def pop(self, key, default=__marker)`): no state
        return ConstantObjectVariable(value)
    if type(value) is torch.Size and all(type(i) is int for i in value):
        # (`batch_shape=torch.Size()` in torch.distributions: an immutable tuple of ints)
        return SizeVariable([ConstantVariable(i) for i in value])
    if source is None:
        unimplemented("non-constant default argument of an unguarded function")
    return wrap_value(tx, value, source)


# Note [Functions: arguments that do not bind]
# A call whose arguments do not fit the function's parameters raises TypeError in Python before
# the body runs (`assertRaises(TypeError, s.isdisjoint)`), so the trace raises it too, with
# Python's own message: a stub function with the same parameters (names, kinds, which have
# defaults; its body empty) and the same __qualname__ is called on placeholders, and the
# TypeError it raises is the one the traced code sees. Were the stub to accept the arguments,
# the call is not understood: a graph break.
def _raise_bind_error(tx, fn, shell, args, kwargs):
    """Raise, in the traced code, the TypeError calling `fn` with these arguments raises."""
    params = list(inspect.signature(shell or fn).parameters.values())
    stub_params = [p.replace(default=None) if p.default is not p.empty else p for p in params]
    stub_params = [p.replace(annotation=p.empty) for p in stub_params]
    stub = _signature_stub(inspect.Signature(stub_params))
    stub.__qualname__ = fn.__qualname__
    try:
        stub(*[None] * len(args), **dict.fromkeys(kwargs))
    except TypeError as e:
        raise_observed(tx, TypeError, str(e))
    unimplemented(f"arguments of {fn.__qualname__} do not bind")


def _signature_stub(sig):
    """A function with signature `sig` (defaults None) and an empty body."""
    namespace = {}
    exec(f"def stub{sig}:\n    pass\n", namespace)  # noqa: S102 (parameter names only)
    return namespace["stub"]


def bind_args(tx, fn, args, kwargs, fn_source, defaults=None, kwdefaults=None):
    """Bind traced arguments to the parameters of `fn`: {name: VariableTracker}."""
    code = fn.__code__
    if (
        not kwargs
        and not defaults
        and not fn.__defaults__
        and not code.co_kwonlyargcount
        and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    ):
        if len(args) != code.co_argcount:
            _raise_bind_error(tx, fn, None, args, kwargs)
        return dict(zip(code.co_varnames, args))
    if defaults is None and fn.__defaults__:
        src = AttrSource(fn_source, "__defaults__") if fn_source else None
        defaults = [
            _wrap_default(tx, d, GetItemSource(src, i) if src else None)
            for i, d in enumerate(fn.__defaults__)
        ]
    if kwdefaults is None and fn.__kwdefaults__:
        src = AttrSource(fn_source, "__kwdefaults__") if fn_source else None
        kwdefaults = {
            k: _wrap_default(tx, d, GetItemSource(src, k) if src else None)
            for k, d in fn.__kwdefaults__.items()
        }
    defaults = list(defaults or ())
    kwdefaults = dict(kwdefaults or {})
    sig = code_signature(code, len(defaults), frozenset(kwdefaults))
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        cells = tuple(types.CellType() for _ in code.co_freevars) or None
        shell = types.FunctionType(code, {}, code.co_name, None, cells)
        shell.__defaults__ = tuple(defaults) or None
        shell.__kwdefaults__ = kwdefaults or None
        _raise_bind_error(tx, fn, shell, args, kwargs)
    bound.apply_defaults()
    out = {}
    for name, value in bound.arguments.items():
        param = sig.parameters[name]
        if type(value) is DefaultSlot:  # Note [Signatures: cached per code]
            value = defaults[value.key] if isinstance(value.key, int) else kwdefaults[value.key]
        elif param.kind == inspect.Parameter.VAR_POSITIONAL:
            value = TupleVariable(list(value))
        elif param.kind == inspect.Parameter.VAR_KEYWORD:
            value = ConstDictVariable(dict(value))
        out[name] = value
    return out


def is_torch_disabled(fn):
    """Functions torch keeps out of compilers (`torch._dynamo.disable`, `_disable_dynamo`)."""
    return isinstance(fn, types.FunctionType) and bool(
        fn.__dict__.get("_torchdynamo_disable")
        or fn.__code__.co_filename.endswith(("torch/_compile.py", "torch/_dynamo/eval_frame.py"))
    )


_MODULE_CALLS = (torch.nn.Module.__call__, torch.nn.Module._call_impl)
# torch functions modelled instead of inlined, registered by their family's module:
# fn -> handler(tx, args, kwargs) (Tensor.__torch_function__: torch_function.py)
_MODELLED = {}


def register_modelled(fn, handler):
    """Calls of the Python function fn that inline_call would trace are handler's instead."""
    _MODELLED[fn] = handler


def inline_call(tx, fn, args, kwargs, fn_source, defaults=None, kwdefaults=None, closure=None):
    """Trace the body of a user function inside the current frame; returns its result."""
    from kiln.frontend.translator import InliningTranslator

    if fn in _MODULE_CALLS and args and hasattr(args[0], "call_module"):  # an NNModuleVariable
        return args[0].call_module(tx, args[1:], kwargs)  # Note [Modules: an overriding __call__]
    if fn in _MODELLED:
        return _MODELLED[fn](tx, args, kwargs)
    unpatched = optim.dynamo_unpatched(fn)  # Note [Optimizers: Dynamo's patches]
    if unpatched is not None:
        fn, fn_source = unpatched, fn_source and AttrSource(fn_source, "__wrapped__")
    if tx.inline_depth + 1 > config.inline_depth_limit:
        unimplemented(f"inlining depth limit ({config.inline_depth_limit}) at {fn.__qualname__}")
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        unimplemented(f"call to {getattr(fn, '__qualname__', fn)!r}, implemented in C")
    if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        unimplemented(f"calling coroutine function {fn.__qualname__}")
    if kiln_marker(fn, "_kiln_disabled") or is_torch_disabled(fn):
        unimplemented(f"call to {fn.__qualname__}, kept out of compilation by {disabled_by(fn)}")
    if getattr(fn, "__globals__", None) is warnings.__dict__:
        check_warnings_call(tx, f"warnings.{fn.__name__}")  # Note [Warnings: catch_warnings ...]
    local_vars = bind_args(tx, fn, args, kwargs, fn_source, defaults, kwdefaults)
    own_fn = closure is None and defaults is None and kwdefaults is None  # (`fn` is the real one)
    if closure is None:
        closure = {}
    if code.co_freevars and not closure:
        if fn.__closure__ is None:
            unimplemented(f"closure of {fn.__qualname__}")
        for i, (name, cell) in enumerate(zip(code.co_freevars, fn.__closure__)):
            closure[name] = (cell, fn_source, i)
    sub = InliningTranslator(tx, fn, code, local_vars, closure)
    sub.call_args = (list(args), dict(kwargs)) if own_fn else None  # (a new generator's rebuild)
    return sub.run_inline()


class PartialVariable(VariableTracker):
    """`functools.partial(fn, *args, **kwargs)` made while tracing."""

    keeps_identity = True

    def __init__(self, fn, args, kwargs, outside=None, **kw):
        super().__init__(**kw)
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.outside = outside  # the partial object itself, for one from outside the frame

    def python_type(self):
        return functools.partial

    def call_function(self, tx, args, kwargs):
        return self.fn.call_function(tx, [*self.args, *args], {**self.kwargs, **kwargs})

    def var_getattr(self, tx, name):
        if name == "func":
            return self.fn
        if name == "args":
            return TupleVariable(list(self.args))
        if name == "keywords":
            return ConstDictVariable(dict(self.kwargs))
        unimplemented(f"functools.partial.{name}")

    # Note [Functions: hasattr on a partial from outside]
    # A partial has an instance __dict__ (`p.attr = v` works), made on first use: reading
    # `p.__dict__` would make it, and a partial with a dict is no longer flattened into
    # `partial(p, ...)`. So the answer for a name its class lacks reads the dict only when it
    # exists (from the partial's GC referents, `source.partial_dict`), and the entry is guarded by
    # a NOT_IN on that same read (`___partial_dict(p)`, which never makes the dict either): an
    # attribute set on the partial later recompiles. A name already in its dict is a break.
    def hasattr(self, tx, name):
        """A partial made while tracing has no instance attributes: its class decides."""
        # the class's own attributes, not its metaclass's: `hasattr(partial, "__name__")` is
        # True (a type has a name) while a partial instance has no `__name__`
        if any(name in vars(k) for k in functools.partial.__mro__):
            return ConstantVariable(True)
        if self.source is not None:  # Note [Functions: hasattr on a partial from outside]
            value = self.outside
            if type(value) is not functools.partial or name in partial_dict(value):
                unimplemented(f"hasattr on a functools.partial from outside the frame ({name!r})")
            tx.output.guards.add(GuardKind.NOT_IN, PartialDictSource(self.source), name)
        return ConstantVariable(False)

    def reconstruct(self, cg):
        if self.source is not None:  # the partial object itself
            return super().reconstruct(cg)
        cg.load_object(functools.partial, push_null=True)
        cg.reconstruct(self.fn)
        for a in self.args:
            cg.reconstruct(a)
        for v in self.kwargs.values():
            cg.reconstruct(v)
        n = 1 + len(self.args) + len(self.kwargs)
        if self.kwargs:
            cg.extend(emit.call_kw(n, tuple(self.kwargs)))
        else:
            cg.extend(emit.call(n))


# Note [Functions: folded library functions]
# A few library functions are pure functions of a class or a function that kiln already pins
# (by a TYPE_MATCH / ID_MATCH guard, or because the object was made while tracing): they are
# computed while tracing instead of traced through their bodies (which read C-level state such
# as __dataclass_fields__ or build inspect objects). Their results are frozen constants.


def _fields(tx, obj):
    value = obj.as_python_constant() if obj.is_python_constant() else None
    cls = value if isinstance(value, type) else obj.python_type()
    if not dataclasses.is_dataclass(cls):
        unimplemented(f"dataclasses.fields() of a {cls.__name__} (not a dataclass)")
    return TupleVariable([ConstantObjectVariable(f) for f in dataclasses.fields(cls)])


def _signature(tx, obj, *, follow_wrapped=True):
    fn = obj.get_function() if isinstance(obj, UserFunctionVariable) else None
    follow = follow_wrapped.as_python_constant() if follow_wrapped is not True else True
    cls = obj.as_python_constant() if fn is None and obj.is_python_constant() else None
    if type(cls) is type and obj.source is not None:
        # a plain class: its signature is read from its __signature__/__new__/__init__, each
        # read (and guarded) through the class as `cls.name` is
        for name in ("__signature__", "__new__", "__init__"):
            if hasattr(cls, name):
                obj.var_getattr(tx, name)
        return ConstantObjectVariable(inspect.signature(cls, follow_wrapped=follow))
    if fn is None:
        unimplemented(f"inspect.signature() of {obj}")
    if isinstance(obj, UserMethodVariable):
        # what inspect does for a bound method: the function's signature without its first
        # parameter (the object itself is not needed)
        sig = inspect.signature(fn, follow_wrapped=follow)
        params = list(sig.parameters.values())
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            unimplemented(f"inspect.signature() of method {fn.__qualname__}")
        sig = sig.replace(parameters=params[1:])
    else:
        sig = inspect.signature(fn, follow_wrapped=follow)
    return ConstantObjectVariable(sig)


def _is_dataclass(tx, obj):
    value = obj.as_python_constant() if obj.is_python_constant() else None
    cls = value if isinstance(value, type) else obj.python_type()
    return ConstantVariable(dataclasses.is_dataclass(cls))


def _replace(tx, obj, **changes):
    """dataclasses.replace(obj, **changes): a new instance from obj's init fields."""
    cls = obj.python_type()
    if not dataclasses.is_dataclass(cls):
        unimplemented(f"dataclasses.replace() of a {cls.__name__}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            if f.name in changes:
                unimplemented(f"dataclasses.replace(): field {f.name} is init=False")
            continue
        kwargs[f.name] = changes.pop(f.name) if f.name in changes else obj.var_getattr(tx, f.name)
    if changes:
        unimplemented(f"dataclasses.replace(): unknown fields {sorted(changes)}")
    # the class through a source: its __init__ reads cells, its defaults are guarded
    source = AttrSource(obj.source, "__class__") if obj.source is not None else None
    source = source or getattr(obj, "class_source", None)
    if source is not None:
        return wrap_value(tx, cls, source).call_function(tx, [], kwargs)
    return wrap_constant_like(tx, cls).call_function(tx, [], kwargs)


def _nonstrict_trace(tx, traceable_fn=None, **kwargs):
    """`kiln.nonstrict_trace(f)` in traced code: f's nonstrict copy (Note [nonstrict_trace: ...])."""
    if kwargs or traceable_fn is None:
        unimplemented("kiln.nonstrict_trace() called with other arguments than one function")
    return UserFunctionVariable(nonstrict_trace(nonstrict_calls.defined_outside(traceable_fn)))


def _folded_functions():
    return {
        dataclasses.fields: _fields,
        dataclasses.is_dataclass: _is_dataclass,
        dataclasses.replace: _replace,
        inspect.signature: _signature,
        nonstrict_trace: _nonstrict_trace,
    }


_FOLDED_FUNCTIONS = {**_folded_functions(), **stdlib.FOLDED}
