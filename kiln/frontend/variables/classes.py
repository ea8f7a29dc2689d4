"""Class statements inside compiled code (LOAD_BUILD_CLASS): the class is built while tracing.

    def f(x):                              LOAD_BUILD_CLASS; MAKE_FUNCTION <body>; "B"; CALL 2
        class B:                           -> the body is checked to be side-effect free, then
            def g(self, t): return t * 2      builtins.__build_class__(body, "B") makes the class
        return B().g(x)                    -> B() and B.g are traced like any user class

Note [Classes: local classes]
A class body is ordinary Python that stores names into a namespace. When it only defines
functions and constants, loads names, and applies staticmethod/classmethod/property (or a
property's setter/getter/deleter), running it has no effect outside the new class, so kiln runs
it for real with `builtins.__build_class__` while tracing (its free variables must be constants
the frame never rebinds). Its instances are then traced as instances of any plain user class.
Each call of the eager function makes a new class; the compiled frame uses the class made while
tracing, which is only sound while neither the class nor an instance of it leaves the frame
(their identity, and later changes to the class, would be shared between calls). So where one
leaves the frame (a return value, a stored attribute, an instance of it, a live local at a graph
break) the transformed code builds the class again, as the eager class statement does: it calls
`__build_class__` with the same body function (its constant cells), name and bases (a local base
built first), once per transformed code (`load_class`); instances rebuilt with `make_object`
take that class. Each call thus returns a new class, whose methods are those kiln traced.
"""

import abc
import builtins
import dis
import functools
import inspect
import sys
import types
import weakref

from kiln.bytecode import emit, loads_cell
from kiln.exc import unimplemented
from kiln.frontend.blocks import MISSING, global_value
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import MADE_WHILE_TRACING, REMADE_CLASSES, load_remade
from kiln.frontend.variables.exceptions import ExceptionVariable
from kiln.frontend.variables.functions import NestedUserFunctionVariable
from kiln.frontend.variables.user_defined import UserDefinedClassVariable

LOCAL_CLASSES = weakref.WeakSet()  # classes made while tracing (never rebuilt)
_CONSTANT_CELLS = {}  # id -> cell made by _constant_cell (its value never changes)
_PLAIN_METACLASSES = (type, abc.ABCMeta)  # (making a class runs no user code)
_DECORATORS = (staticmethod, classmethod, property, functools.cached_property)
_NO_STACK = {
    "RESUME",
    "NOP",
    "PRECALL",
    "CACHE",
    "EXTENDED_ARG",
    "COPY_FREE_VARS",
    "MAKE_CELL",
    "KW_NAMES",
    "NOT_TAKEN",
}


def is_local_class(cls):
    return cls in LOCAL_CLASSES


_RECIPES = weakref.WeakKeyDictionary()  # local class -> (body function, name, bases)


def in_making_order(classes):
    """The local classes among `classes`, in the order the trace made them."""
    wanted = {id(c) for c in classes if is_local_class(c)}
    return [c for c in list(_RECIPES) if id(c) in wanted]


# Note [Classes: the trace's classes leave their bases]
# A class statement traced builds a real class (its methods and attributes are read while
# tracing) with the real bases; the transformed code builds it again when the program runs. The
# trace's class stays registered with its bases (`Parent.__subclasses__()`) until a collection
# frees it, so the program, run on after the trace, would list two `Child`s where eager lists
# one. Once the trace is over its classes are detached: each one with a base the trace did not
# make gets kiln's empty `_Detached` as its only base (which takes it off its bases' lists;
# `object` itself has another layout: no `__dict__`). A class whose layout forbids that (a C base:
# dict, Exception; `__slots__`) stays as it is.
class _Detached:
    """The base a trace's class gets once the trace is over."""


def detach_made_classes(classes):
    """Take the classes a finished trace built off their real bases' subclass lists."""
    made = {id(c) for c in classes}
    for cls in reversed(classes):
        if all(id(b) in made or b is object for b in cls.__bases__):
            continue
        try:
            cls.__bases__ = (_Detached,)
        except TypeError:
            pass


def local_owner(fn):
    """`(cls, name, wrapped)`: the class made in the frame whose body defined `fn` (a function or
    any callable its body made, e.g. a decorator's instance) as `name`, or None; `wrapped`: fn is
    the function of the staticmethod or classmethod stored there."""
    for cls in list(_RECIPES.keys()):
        for name, member in vars(cls).items():
            if member is fn:
                return cls, name, False
            if isinstance(member, (staticmethod, classmethod)) and member.__func__ is fn:
                return cls, name, True
    return None


def load_class_function(cg, cls, name, wrapped=False):
    """Push `vars(cls)[name]` of a local class as the transformed code builds it: the function
    its body makes at run time (its `__class__` cell and free variables are the run's own);
    `wrapped`: the function of the staticmethod or classmethod stored there."""
    load_class(cg, cls)
    cg.extend(emit.load_attr("__dict__") + emit.load_const(name) + emit.binary_subscr())
    if wrapped:
        cg.extend(emit.load_attr("__func__"))


def load_class(cg, cls):
    """Push `cls` in the transformed code: a local class is built again by its class statement
    (Note [Classes: local classes]), once per transformed code."""
    if cls in MADE_WHILE_TRACING:
        unimplemented(f"{cls.__qualname__}, a class made while tracing, leaves the frame")
    if cls in REMADE_CLASSES:  # Note [Namedtuples: classes made in the frame]
        load_remade(cg, cls)
        return
    if not is_local_class(cls):
        cg.load_object(cls)
        return
    temp = cg.class_temps.get(id(cls))
    if temp is None:
        fn, name, bases = _RECIPES[cls]
        cg.load_object(builtins.__build_class__, push_null=True)
        values = [c.cell_contents for c in fn.__closure__ or ()]
        if any(is_local_class(v) for v in values):
            # its body (and so its methods) over the classes the transformed code makes, not
            # those made while tracing (`raise Err` in a method of a local class, Err local)
            cg.load_object(body_over, push_null=True)
            cg.load_object(fn)
            for v in values:
                load_class(cg, v)  # (a constant that is no local class: loaded as it is)
            cg.extend(emit.call(1 + len(values)))
        else:
            cg.load_object(fn)
        cg.extend(emit.load_const(name))
        for base in bases:
            load_class(cg, base)
        cg.extend(emit.call(2 + len(bases)))
        temp = cg.class_temps[id(cls)] = cg.new_temp()
        cg.extend(emit.store_fast(temp))
    cg.extend(emit.load_fast(temp))


def body_over(fn, *values):
    """The class body function `fn` with new cells holding `values` (load_class)."""
    cells = tuple(types.CellType(v) for v in values)
    return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, None, cells)


class BuildClassVariable(VariableTracker):
    """`builtins.__build_class__` as LOAD_BUILD_CLASS pushes it."""

    def call_function(self, tx, args, kwargs):
        if kwargs or len(args) < 2 or not isinstance(args[0], NestedUserFunctionVariable):
            unimplemented("class statement with keywords (metaclass=...) or an unknown body")
        body, name = args[0], args[1].as_python_constant()
        bases = []
        for b in args[2:]:
            value = b.as_python_constant() if b.is_python_constant() else None
            if not isinstance(value, type):
                unimplemented(f"class {name} with base {b}")
            bases.append(value)
        for base in bases:
            if type(base) not in _PLAIN_METACLASSES:
                # its metaclass's __prepare__/__new__/__init__ run while the class is built
                unimplemented(f"class {name} with a base of metaclass {type(base).__name__}")
            hooked = [k for k in base.__mro__ if "__init_subclass__" in vars(k) and k is not object]
            if hooked:
                unimplemented(f"class {name}: {hooked[0].__name__}.__init_subclass__ would run")
        cells = [_constant_cell(tx, body, v) for v in body.code.co_freevars]
        _check_body(body.code, body.globals, name)
        fn = types.FunctionType(body.code, body.globals, name, None, tuple(cells) or None)
        try:
            cls = builtins.__build_class__(fn, name, *bases)
        except Exception as e:
            unimplemented(f"class {name} raised {type(e).__name__} while being built: {e}")
        LOCAL_CLASSES.add(cls)
        _RECIPES[cls] = (fn, name, tuple(bases))
        tx.output.made_classes.append(cls)
        return LocalClassVariable(cls)

    def reconstruct(self, cg):
        cg.load_object(builtins.__build_class__)

    def __repr__(self):
        return "BuildClassVariable()"


class LocalClassVariable(UserDefinedClassVariable):
    """A class made while tracing (Note [Classes: local classes])."""

    def reconstruct(self, cg):
        load_class(cg, self.value)

    def __repr__(self):
        return f"LocalClassVariable({self.value.__qualname__})"


def _constant_cell(tx, body, name):
    """A real cell holding the constant value of free variable `name` of the class body."""
    ref = body.closure.get(name)
    owner = getattr(ref, "tx", None)
    if owner is None:
        unimplemented(f"class body over free variable {name!r}")
    value = owner.symbolic_locals.get(ref.name)
    if value is None or not value.is_python_constant():
        unimplemented(f"class body over non-constant free variable {name!r}")
    if isinstance(value, ExceptionVariable):
        # (its constant is a copy: `raise exc` in a method would raise another object than the
        # frame's `exc`)
        unimplemented(f"class body over free variable {name!r} holding an exception object")
    if _stores(owner.code, name) > 1:
        unimplemented(f"class body over free variable {name!r}, which the frame rebinds")
    constant = value.as_python_constant()
    try:
        hash(constant)
    except TypeError:  # a list/dict/set: the class's methods must share the frame's own object
        unimplemented(
            f"class body over free variable {name!r} holding a mutable {type(constant).__name__}"
        )
    cell = types.CellType(constant)
    _CONSTANT_CELLS[id(cell)] = cell
    return cell


def constant_cell(cell):
    """Whether `cell` is a free variable cell of a local class's body (a constant)."""
    return _CONSTANT_CELLS.get(id(cell)) is cell


def _stores(code, name):
    """How many instructions store `name` as a cell or free variable in `code` or nested code."""
    n = sum(
        1
        for i in dis.get_instructions(code)
        if i.opname in ("STORE_DEREF", "DELETE_DEREF") and i.argval == name
    )
    return n + sum(_stores(c, name) for c in code.co_consts if isinstance(c, types.CodeType))


def _check_body(code, f_globals, name):
    """Note [Classes: local classes]: a class body that only defines names (else a break)."""
    stored = set()
    stack = []

    def reject(why):
        unimplemented(f"class {name}: its body {why} (it could have side effects)")

    cells = frozenset(code.co_cellvars + code.co_freevars)
    try:
        for inst in dis.get_instructions(code):
            _step(inst, stack, stored, f_globals, reject, cells)
    except IndexError:
        reject("has a stack kiln cannot follow")


def _step(inst, stack, stored, f_globals, reject, cells=()):
    """One instruction of a class body on a stack of tags (what each value is)."""
    op = inst.opname
    if loads_cell(inst, cells):  # a cell for a method's closure (3.13: LOAD_FAST)
        op = "LOAD_CLOSURE"
    if op in _NO_STACK:
        return
    if op in ("LOAD_NAME", "LOAD_GLOBAL"):
        n = inst.argval
        if op == "LOAD_GLOBAL" and inst.arg & 1 and not _py313():
            stack.append(("null",))
        value = global_value(f_globals, n)
        if n in stored:
            stack.append(("stored", n))
        elif value is not MISSING:
            stack.append(("obj", value))
        else:
            reject(f"reads an unknown name {n!r}")
        if op == "LOAD_GLOBAL" and inst.arg & 1 and _py313():
            stack.append(("null",))
    elif op in ("LOAD_CONST", "LOAD_CLOSURE", "LOAD_LOCALS", "LOAD_SMALL_INT"):
        stack.append(("val",))
    elif op in ("STORE_NAME", "STORE_DEREF"):
        stack.pop()
        stored.add(inst.argval)
    elif op == "SETUP_ANNOTATIONS":
        stored.add("__annotations__")
    elif op == "STORE_SUBSCR":
        if stack[-2] != ("stored", "__annotations__"):
            reject("stores an item")
        del stack[-3:]
    elif op == "MAKE_FUNCTION":
        flags = inst.arg or 0
        del stack[len(stack) - 1 - bin(flags & 0x0F).count("1") :]
        stack.append(("val",))
    elif op == "SET_FUNCTION_ATTRIBUTE":
        stack.pop()
    elif op in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_SET"):
        del stack[len(stack) - inst.arg :]
        stack.append(("val",))
    elif op == "BUILD_MAP":
        del stack[len(stack) - 2 * inst.arg :]
        stack.append(("val",))
    elif op == "BUILD_CONST_KEY_MAP":
        del stack[len(stack) - inst.arg - 1 :]
        stack.append(("val",))
    elif op == "PUSH_NULL":
        stack.append(("null",))
    elif op == "LOAD_ATTR":
        top = stack.pop()
        if top[0] == "stored" and inst.argval in ("setter", "getter", "deleter"):
            stack.append(("pure",))
        elif top[0] == "obj" and isinstance(top[1], (type, types.ModuleType)):
            stack.append(("obj", inspect.getattr_static(top[1], inst.argval, None)))
        else:
            reject(f"reads attribute {inst.argval!r}")
        if (inst.arg or 0) & 1 and not _py311():
            stack.append(("null",))
    elif op == "CALL":
        del stack[len(stack) - inst.arg :]
        pair = stack[-2:]
        del stack[-2:]
        # [NULL, callable] (3.11, 3.12), [callable, self] (3.11 method form), [callable, NULL]
        callee = pair[1] if pair[0] == ("null",) else pair[0]
        if not (callee == ("pure",) or (callee[0] == "obj" and callee[1] in _DECORATORS)):
            reject("calls something")
        stack.append(("val",))
    elif op in ("POP_TOP",):
        stack.pop()
    elif op == "COPY":
        stack.append(stack[-inst.arg])
    elif op == "SWAP":
        stack[-1], stack[-inst.arg] = stack[-inst.arg], stack[-1]
    elif op in ("RETURN_VALUE", "RETURN_CONST"):
        return
    else:
        reject(f"runs {op}")


def _py311():
    return sys.version_info[:2] == (3, 11)


def _py313():
    return sys.version_info[:2] >= (3, 13)
