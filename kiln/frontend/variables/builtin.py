"""Python builtins (len, isinstance, range, min ...) and operator-module functions."""

import builtins
import collections.abc
import functools
import inspect
import math
import operator
import types

from kiln.exc import unimplemented
from kiln.frontend.variables import (
    deque_iters,  # noqa: F401 (registers the deque's iterators)
    dicts,
    itertools_calls,
    misc,
    namedtuples,
    object_defaults,
    optim,
    stdlib,
    sym,
    symfloat,
    tensor_minmax,
    unbacked,
)
from kiln.frontend.variables.base import VariableTracker, wrap_constant_like, wrap_value
from kiln.frontend.variables.const_index import INDEXED_BY_INDEX, constant_index
from kiln.frontend.variables.constant import BINARY_OPS, ConstantVariable, fold, is_literal
from kiln.frontend.variables.dict_keys import guard_tensor_keys
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import ExceptionVariable, raise_observed
from kiln.frontend.variables.finalizers import check_iterated
from kiln.frontend.variables.functions import (
    BaseFunctionVariable,
    PartialVariable,
)
from kiln.frontend.variables.itertools_calls import is_none_const
from kiln.frontend.variables.lists import (
    BaseListVariable,
    DequeVariable,
    ListIteratorVariable,
    ListVariable,
    RangeVariable,
    TupleVariable,
)
from kiln.frontend.variables.live_iters import (
    LazyIteratorVariable,
    ReversedListIteratorVariable,
    lazy_sources_ok,
)
from kiln.frontend.variables.nn_module import NNModuleVariable
from kiln.frontend.variables.object_new import ObjectNewVariable
from kiln.frontend.variables.operators import (
    _all_const,
    _foldable,
    binary_op,
    compare_vars,
    contains,
    unary_op,
)
from kiln.frontend.variables.sets import SetVariable, _set_values
from kiln.frontend.variables.super_calls import SuperVariable
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.symfloat import SizeFloatVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import TorchVariable, call_tensor_op
from kiln.frontend.variables.type_checks import (
    check_protocols,
    guard_abc_registry,
    isinstance_check,
)
from kiln.frontend.variables.typing_vars import typing_subscript
from kiln.frontend.variables.user_attrs import class_decides_hasattr, load_attr
from kiln.frontend.variables.user_defined import (
    NewObjectVariable,
    UserDefinedObjectVariable,
)
from kiln.frontend.variables.user_protocol import is_user_object, user_text


def _zip_strict_error(lengths):
    """The message of the ValueError zip(..., strict=True) raises at its end, or None."""
    n = min(lengths, default=0)
    if lengths[0] == n:  # the first ran out: a later one that has more is longer
        i, how = next(((i, "longer") for i, k in enumerate(lengths) if k > n), (None, None))
    else:
        i, how = next(i for i, k in enumerate(lengths) if k == n), "shorter"
    if i is None:
        return None
    others = "argument 1" if i == 1 else f"arguments 1-{i}"
    return f"zip() argument {i + 1} is {how} than {others}"


_PURE_MODULES = {"math", "operator", "_operator"}
_IMMUTABLE_TYPES = (str, bytes, int, float, complex, bool)  # their methods fold on constants


def _made_in_frame(var):
    """A set, list, dict or object made while tracing: one variable per object."""
    return var.source is None and isinstance(
        var, (SetVariable, ListVariable, ConstDictVariable, NewObjectVariable)
    )


def _has_keys(obj):
    """Whether dict(obj) reads obj as a mapping: its class has `keys` (as CPython checks)."""
    if not isinstance(obj, (UserDefinedObjectVariable, NewObjectVariable)):
        return False
    return hasattr(obj.python_type(), "keys")


def _mapping_items(tx, obj):
    """{key: obj[key]} for key in obj.keys(): dict(mapping) as CPython builds it."""
    if getattr(obj.python_type(), "keys", None) is collections.abc.Mapping.keys:
        keys = ListIteratorVariable.over(tx, obj.call_method(tx, "__iter__", [], {}))
    else:
        keys = obj.call_method(tx, "keys", [], {})
    out = {}
    for k in keys.unpack_var_sequence(tx):
        out[k.as_python_constant()] = getitem(tx, obj, k)
    return out


# Note [Builtins: ABC registrations]
# isinstance/issubclass against an ABC (a class whose metaclass is ABCMeta) also answer from its
# registry: `SomeABC.register(C)` changes the answer for C and its subclasses. kiln folds the
# answer while tracing, so an entry that folded one is guarded on the ABC cache token
# (abc.get_cache_token(), which every register() changes): a registration after the compile
# recompiles instead of giving the old answer. (register() itself is not traced: a break.)
class BuiltinVariable(VariableTracker):
    """A builtin function or an operator-module function."""

    def __init__(self, fn, **kw):
        super().__init__(**kw)
        self.fn = fn

    def python_type(self):
        return type(self.fn)

    def is_python_constant(self):
        return True

    def as_python_constant(self):
        return self.fn

    def call_function(self, tx, args, kwargs):
        fn = self.fn
        name = getattr(fn, "__name__", str(fn))
        if fn is builtins.id and len(args) == 1 and _made_in_frame(args[0]):
            return misc.ObjectIdVariable(
                args[0]
            )  # Note [Builtins: id() of objects made in the frame]
        if fn in stdlib.CALLS:  # (id() of anything else: Note [Stdlib: id()])
            try:
                return stdlib.CALLS[fn](tx, *args, **kwargs)
            except TypeError as e:
                unimplemented(f"{name} with these arguments ({e})")
        handler = getattr(self, f"_call_{name}", None)
        if handler is not None and fn is getattr(builtins, name, None):
            if kwargs and not _takes_keywords(fn, handler.__func__, tuple(kwargs)):
                # (a handler's own parameter names are no keywords the builtin takes)
                unimplemented(f"builtin {name} with keyword arguments {sorted(kwargs)}")
            try:
                return handler(tx, *args, **kwargs)
            except TypeError as e:  # arguments the handler does not take: Python decides
                unimplemented(f"builtin {name} with these arguments ({e})")
        if fn in _COMPARE_FNS and len(args) == 2 and not kwargs:
            return compare_vars(tx, fn, *args)
        if fn in _BINARY_FNS and len(args) == 2 and not kwargs:
            return binary_op(tx, fn, *args)
        if fn in _UNARY_FNS and len(args) == 1 and not kwargs:
            return unary_op(tx, fn, args[0])
        if fn is functools.reduce and 2 <= len(args) <= 3 and not kwargs:
            items = args[1].unpack_var_sequence(tx)
            acc = args[2] if len(args) == 3 else (items.pop(0) if items else None)
            if acc is None:
                unimplemented("reduce() of an empty sequence")
            for item in items:
                acc = args[0].call_function(tx, [acc, item], {})
            return acc
        if fn is functools.partial and args:
            inner = args[0]
            if isinstance(inner, PartialVariable):
                # partial(partial(f, a), b) is partial(f, a, b), as C's partial_new flattens a
                # partial without a __dict__ (one from an input may have one: not decided here)
                if inner.source is not None:
                    unimplemented("functools.partial of a partial input")
                return PartialVariable(
                    inner.fn, [*inner.args, *args[1:]], {**inner.kwargs, **kwargs}
                )
            return PartialVariable(inner, list(args[1:]), dict(kwargs))
        if fn in itertools_calls.ITERTOOLS:
            return itertools_calls.itertools_call(tx, fn, args, kwargs)
        if fn is operator.getitem and len(args) == 2:
            return getitem(tx, *args)
        if fn is operator.contains and len(args) == 2:
            return contains(tx, *args)
        if fn is operator.truth and len(args) == 1:
            return ConstantVariable(args[0].truthy(tx))
        if fn is operator.not_ and len(args) == 1:
            return ConstantVariable(not args[0].truthy(tx))
        if fn in symfloat.ROUNDINGS and len(args) == 1 and not kwargs:
            if isinstance(args[0], SizeFloatVariable):  # math.floor(n * 1.5): an int size
                return symfloat.to_int(tx, symfloat.ROUNDINGS[fn], args[0])
        if getattr(fn, "__module__", None) in _PURE_MODULES:
            # math.sqrt(n) of a size: on its value (a guard); floats are not sizes
            args = [sym.specialised(a) for a in args]
        if getattr(fn, "__module__", None) in _PURE_MODULES and _all_const(
            [*args, *kwargs.values()]
        ):
            cargs = [a.as_python_constant() for a in args]
            ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
            result = fold(lambda: fn(*cargs, **ckw))
            if is_literal(result.value):
                return result
        unimplemented(f"builtin {name} with these arguments")

    # --- builtins (one method each, `_call_<name>`) --------------------------------------------
    def _call_bytes(self, tx, *args, **kwargs):
        values = [*args, *kwargs.values()]
        if not all(v.is_python_constant() for v in values):
            unimplemented("bytes() of non-constants")
        cargs = [a.as_python_constant() for a in args]
        ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
        return fold(lambda: bytes(*cargs, **ckw))

    def _call_len(self, tx, obj):
        if isinstance(obj, TupleVariable):  # (its items unread: Note [Tuples: inputs guarded ...])
            return ConstantVariable(len(obj.raw_items))
        if isinstance(obj, (BaseListVariable, ConstDictVariable)):
            return ConstantVariable(len(obj.items))
        if isinstance(obj, TensorVariable):
            return obj.call_method(tx, "__len__", [], {})
        if obj.is_python_constant():
            return fold(len, obj.as_python_constant())
        return obj.call_method(tx, "__len__", [], {})

    def _call_isinstance(self, tx, obj, cls):
        c = cls.as_python_constant()
        check_protocols(c)
        return isinstance_check(tx, obj, c, cls)

    def _call_issubclass(self, tx, a, b):
        check_protocols(b.as_python_constant())
        guard_abc_registry(tx, b.as_python_constant())
        return fold(issubclass, a.as_python_constant(), b.as_python_constant())

    def _call_getattr(self, tx, obj, name, default=None):
        n = name.as_python_constant()
        if default is None:
            return load_attr(tx, obj, n)
        if self._call_hasattr(tx, obj, name).value:
            return obj.var_getattr(tx, n)
        return default

    def _call_hasattr(self, tx, obj, name):
        n = name.as_python_constant()
        if hasattr(obj, "hasattr"):  # a tensor: its class, then its instance __dict__ (guarded)
            return obj.hasattr(tx, n)
        if obj.is_python_constant():
            return ConstantVariable(hasattr(obj.as_python_constant(), n))
        found = class_decides_hasattr(obj, n)
        if found is not None:
            return ConstantVariable(found)
        if type(obj) is TupleVariable and getattr(obj, "instance", None) is not None:
            return ConstantVariable(namedtuples.instance_hasattr(tx, obj, n))
        unimplemented(f"hasattr on {obj}")

    def _call_setattr(self, tx, obj, name, value):
        """setattr(obj, "name", value): exactly `obj.name = value` (STORE_ATTR)."""
        n = name.as_python_constant()
        if type(n) is not str:
            unimplemented(f"setattr with a {type(n).__name__} name")
        tx.push(value)
        tx.push(obj)
        tx.STORE_ATTR(types.SimpleNamespace(argval=n, opname="STORE_ATTR"))
        return ConstantVariable(None)

    def _call_super(self, tx, cls=None, obj=None):
        if cls is None:
            code = tx.code
            if "__class__" not in tx.closure or not code.co_argcount:
                unimplemented("zero-argument super() outside a method")
            cls = tx.load_closure_var("__class__")
            obj = tx.get_local(code.co_varnames[0])
        klass = cls.as_python_constant()
        if not isinstance(klass, type):
            unimplemented("super() whose first argument is not a type (Python raises TypeError)")
        if obj is None:
            unimplemented("super() with one argument (an unbound super object)")
        typ = obj.python_type()
        bound = issubclass(typ, klass) or (
            obj.is_python_constant()
            and isinstance(obj.as_python_constant(), type)
            and issubclass(obj.as_python_constant(), klass)
        )
        if not bound:
            unimplemented("super(type, obj): obj is not an instance or subtype of type (TypeError)")
        return SuperVariable(klass, obj)

    def _call_slice(self, tx, *args):
        return ConstantVariable(slice(*[a.as_python_constant() for a in args]))

    def _call_divmod(self, tx, a, b):
        if isinstance(a, SymNodeVariable) or isinstance(b, SymNodeVariable):
            q, r = binary_op(tx, operator.floordiv, a, b), binary_op(tx, operator.mod, a, b)
            return TupleVariable([q, r])  # sizes: `//` and `%` as size expressions
        return fold(divmod, a.as_python_constant(), b.as_python_constant())

    def _call_range(self, tx, *args):
        return RangeVariable(range(*[a.as_python_constant() for a in args]))

    def _call_tuple(self, tx, obj=None):
        if isinstance(obj, (TupleVariable, ConstantVariable)) and obj.python_type() is tuple:
            return obj  # tuple(t) is t
        return TupleVariable([] if obj is None else _items_sized(tx, obj))

    def _call_list(self, tx, obj=None):
        return ListVariable([] if obj is None else _items_sized(tx, obj))

    def _call_dict(self, tx, obj=None, /, **kwargs):  # (dict(obj=1), dict(self=1): keys)
        items = {}
        if obj is not None:
            if (
                isinstance(obj, NewObjectVariable)
                and obj.dict_items is not None
                and inspect.getattr_static(obj.cls, "__iter__") is dict.__iter__
            ):
                obj = ConstDictVariable(obj.dict_items)  # dict(d): d's own items (C's fast path)
            if isinstance(obj, dicts.MappingProxyVariable):
                obj = obj.dict_var  # dict(mappingproxy): its dict's items
            if hasattr(obj, "dict_snapshot"):
                obj = obj.dict_snapshot(tx)  # dict(obj.__dict__): the attributes now
            if isinstance(obj, ConstDictVariable):
                items.update(obj.items)
            elif _has_keys(obj):
                items.update(_mapping_items(tx, obj))
            else:
                for i, pair in enumerate(obj.unpack_var_sequence(tx)):
                    kv = pair.unpack_var_sequence(tx)
                    if len(kv) != 2:
                        message = f"dictionary update sequence element #{i} has length {len(kv)}"
                        raise_observed(tx, ValueError, f"{message}; 2 is required")
                    key = dicts.dict_key(kv[0])
                    guard_tensor_keys(tx, [key])  # (each, as a later one may merge into it)
                    items[key] = kv[1]
        items.update(kwargs)
        guard_tensor_keys(tx, items)  # Note [Dicts: tensors as keys]
        return ConstDictVariable(items)

    def _call_map(self, tx, fn, *seqs):
        """map(): applied at each step over a list or iterator (Note [Iterators: lazy over live
        sources]), else at once (a break where its code may read a list it grows: Note [Lists:
        growing by an iterator that ran ahead])."""
        if seqs and lazy_sources_ok(seqs):
            return LazyIteratorVariable(tx, map, seqs, fn=fn)
        rows = zip(*[s.unpack_var_sequence(tx) for s in seqs])
        it = ListIteratorVariable([fn.call_function(tx, list(r), {}) for r in rows])
        it.ran_ahead = not isinstance(fn, BuiltinVariable)  # (a builtin reads no list)
        it.reach = [fn]  # Note [Lists: growing by an iterator that ran ahead]
        return it

    def _call_filter(self, tx, fn, seq):
        if lazy_sources_ok([seq]):
            return LazyIteratorVariable(tx, filter, [seq], fn=None if is_none_const(fn) else fn)
        items = seq.unpack_var_sequence(tx)
        keep = []
        for item in items:
            test = item if is_none_const(fn) else fn.call_function(tx, [item], {})
            if test.truthy(tx):
                keep.append(item)
        it = ListIteratorVariable(keep)
        it.ran_ahead = not (is_none_const(fn) or isinstance(fn, BuiltinVariable))
        it.reach = [fn]
        return it

    def _call_pow(self, tx, base, exp, mod=None):
        if mod is None:
            return binary_op(tx, operator.pow, base, exp)
        return fold(
            pow, base.as_python_constant(), exp.as_python_constant(), mod.as_python_constant()
        )

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantVariable(getattr(self.fn, name))
        if self.fn is object and name == "__new__":
            return ObjectNewVariable()  # Note [Objects: a class's own __new__]
        modelled = stdlib.class_method(self.fn, name) or dicts.class_method(self.fn, name)
        if modelled is not None:
            return modelled
        if self.fn in _IMMUTABLE_TYPES and (name == "__new__" or not name.startswith("__")):
            if callable(getattr(self.fn, name, None)):  # str.maketrans, int.from_bytes ...
                return misc.ConstantMethodVariable(self.fn, name)  # (folded on constants)
        return super().var_getattr(tx, name)

    def _call_set(self, tx, obj=None):
        s = SetVariable(())
        if obj is not None:
            s.values = _set_values(tx, obj)
        return s

    def _call_frozenset(self, tx, obj=None):
        if obj is not None and obj.python_type() is frozenset:
            if isinstance(obj, SetVariable) or isinstance(obj, ConstantVariable):
                return obj  # frozenset(fs) is fs
        s = self._call_set(tx, obj)
        s.frozen = True
        return s

    def _call_iter(self, tx, obj):
        return ListIteratorVariable.over(tx, obj)

    def _call_next(self, tx, it, default=None):
        if not isinstance(it, ListIteratorVariable):
            unimplemented(f"next() on {it}")
        item = it.next_item(tx)
        if item is None:
            if default is None:
                if hasattr(it, "returned"):  # a generator's: StopIteration(its return value)
                    it.raise_stop()
                raise_observed(tx, StopIteration)
            return default
        return item

    def _call_enumerate(self, tx, obj, start=None):
        s = start.as_python_constant() if start is not None else 0
        if lazy_sources_ok([obj]) and type(s) is int:
            return LazyIteratorVariable(tx, enumerate, [obj], (s,))
        it = ListIteratorVariable(
            [
                TupleVariable([ConstantVariable(i + s), v])
                for i, v in enumerate(obj.unpack_var_sequence(tx))
            ]
        )
        if type(s) is int:
            it.kind = enumerate  # Note [Iterators: zip and enumerate snapshots]
        return it

    def _call_zip(self, tx, *objs, strict=None):
        if strict is None and objs and lazy_sources_ok(objs):
            return LazyIteratorVariable(tx, zip, objs)
        seqs = [o.unpack_var_sequence(tx) for o in objs]
        it = ListIteratorVariable([TupleVariable(list(t)) for t in zip(*seqs)])
        if strict is not None and strict.as_python_constant():
            it.end_error = _zip_strict_error([len(s) for s in seqs])
        it.kind, it.width = zip, len(seqs)  # Note [Iterators: zip and enumerate snapshots]
        return it

    def _call_reversed(self, tx, obj):
        if type(obj) is ListVariable:  # Note [Iterators: reversed lists]
            return ReversedListIteratorVariable(obj)
        if isinstance(obj, DequeVariable):  # Note [Deques: iterators]
            return obj.iter_var(tx, reverse=True)
        check_iterated(obj, "reversed()")
        return ListIteratorVariable(list(reversed(obj.unpack_var_sequence(tx))))

    def _fold_or_reduce(self, tx, fn, args):
        items = args[0].unpack_var_sequence(tx) if len(args) == 1 else list(args)
        if any(isinstance(i, SymNodeVariable) for i in items):
            result = sym.min_max(tx, fn, items)
            if result is not None:
                return result
            if not any(isinstance(i, TensorVariable) for i in items):
                items = [sym.specialised(i) for i in items]  # `min(n, 8.5)`: on the values
        if _all_const(items):
            return fold(fn, [i.as_python_constant() for i in items])
        if fn in (builtins.min, builtins.max) and len(items) >= 2:
            result = tensor_minmax.tensor_min_max(tx, fn, items)  # Note [Tensors: builtin max/min]
            if result is not None:
                return result
        unimplemented(f"{fn.__name__}() of non-constants")

    def _call_min(self, tx, *args, **kwargs):
        if kwargs:
            return self._keyed_pick(tx, builtins.min, args, **kwargs)
        return self._fold_or_reduce(tx, builtins.min, args)

    def _call_max(self, tx, *args, **kwargs):
        if kwargs:
            return self._keyed_pick(tx, builtins.max, args, **kwargs)
        return self._fold_or_reduce(tx, builtins.max, args)

    def _keyed_pick(self, tx, fn, args, key=None, default=None):
        """min/max with key= (traced once per item; the keys must be constants) / default=."""
        items = args[0].unpack_var_sequence(tx) if len(args) == 1 else list(args)
        if not items:
            if default is None:
                unimplemented(f"{fn.__name__}() of an empty sequence")
            return default
        keys = _sort_keys(tx, items, key)
        best = fn(range(len(items)), key=lambda i: keys[i])
        return items[best]

    def _call_sum(self, tx, obj, start=None):
        items = obj.unpack_var_sequence(tx)
        acc = start if start is not None else ConstantVariable(0)
        for i in items:
            acc = binary_op(tx, operator.add, acc, i)
        return acc

    def _call_abs(self, tx, obj):
        return unary_op(tx, operator.abs, obj)

    def _call_any(self, tx, obj):
        return ConstantVariable(any(i.truthy(tx) for i in _items_in_turn(tx, obj)))

    def _call_all(self, tx, obj):
        return ConstantVariable(all(i.truthy(tx) for i in _items_in_turn(tx, obj)))

    def _convert(self, tx, fn, obj):
        if isinstance(obj, TensorVariable) and tx.output.captures_scalars:
            return unbacked.tensor_number(tx, fn, obj)  # Note [Shapes: item() in the graph]
        if isinstance(obj, TensorVariable):
            unimplemented(f"{fn.__name__}() of a tensor reads tensor data")
        if fn is float and isinstance(obj, SymNodeVariable):
            return symfloat.to_float(obj)  # Note [Shapes: float sizes in traced code]
        if fn is int and isinstance(obj, SizeFloatVariable):
            return symfloat.to_int(tx, math.floor, obj)  # trunc of a nonnegative float
        return fold(fn, obj.as_python_constant())

    def _call_int(self, tx, obj=None):
        return ConstantVariable(0) if obj is None else self._convert(tx, int, obj)

    def _call_float(self, tx, obj=None):
        return ConstantVariable(0.0) if obj is None else self._convert(tx, float, obj)

    def _call_bool(self, tx, obj=None):
        if obj is not None and hasattr(obj, "bool_in_graph"):  # Note [Shapes: a bool read ...]
            in_graph = obj.bool_in_graph(tx)
            if in_graph is not None:
                return in_graph
        return ConstantVariable(False) if obj is None else ConstantVariable(obj.truthy(tx))

    def _call_str(self, tx, obj=None):
        return ConstantVariable("") if obj is None else self._text(tx, str, obj)

    def _text(self, tx, fn, obj):
        """str(obj) / repr(obj) of a user object: its Python __str__ / __repr__, inlined."""
        if isinstance(obj, ExceptionVariable):
            return obj.call_method(tx, f"__{fn.__name__}__", [], {})
        if hasattr(obj, "text_of"):  # Note [Sets: subclass instances]
            return ConstantVariable(obj.text_of(tx, 1 if fn is str else 2, ""))
        if is_user_object(obj):
            result = user_text(tx, obj, f"__{fn.__name__}__")
            if result is not None:
                return result
            return object_defaults.DefaultTextVariable(obj)  # Note [Objects: the default str() ...]
        return self._convert(tx, fn, obj) if fn is str else None

    def _call_repr(self, tx, obj):

        text = self._text(tx, repr, obj)
        if text is not None:
            return text
        if obj.is_python_constant():
            value = obj.as_python_constant()
            if _foldable(value) or (isinstance(value, type) and type(value) is type):
                return ConstantVariable(repr(value))  # (a class's repr: its module and name)
            if isinstance(obj, ConstDictVariable) and all(
                is_literal(k) and is_literal(v) for k, v in value.items()
            ):
                return ConstantVariable(repr(value))  # {'a': 1}, OrderedDict({'a': 1})
        unimplemented(f"repr() of {obj}")

    def _call_round(self, tx, obj, nd=None):
        if nd is None and isinstance(obj, SymNodeVariable):
            return obj  # round() of an int size is the size
        if nd is None:
            return self._convert(tx, round, obj)
        return fold(round, obj.as_python_constant(), nd.as_python_constant())

    def _call_type(self, tx, obj):
        source = object_defaults.class_source(obj)  # Note [Objects: type(obj) through its source]
        if source is not None:
            return wrap_value(tx, obj.python_type(), source)
        return wrap_constant_like(tx, obj.python_type())

    def _call_callable(self, tx, obj):
        if isinstance(
            obj, (BaseFunctionVariable, NNModuleVariable, TorchVariable, BuiltinVariable)
        ):
            return ConstantVariable(True)
        if isinstance(obj, (TensorVariable, BaseListVariable, ConstDictVariable, ConstantVariable)):
            return ConstantVariable(False)
        typ = obj.python_type()
        if isinstance(typ, type) and issubclass(typ, type):  # a class
            return ConstantVariable(True)
        if type(typ) is type and typ.__module__ != "builtins":  # a user class's instance
            return ConstantVariable(any("__call__" in vars(k) for k in typ.__mro__))
        unimplemented(f"callable() of {obj}")

    def _call_locals(self, tx):
        return stdlib.frame_locals(tx)  # Note [Stdlib: locals()]

    def _call_vars(self, tx, *obj):
        if obj:
            unimplemented("vars(obj)")
        return stdlib.frame_locals(tx)

    def _call_sorted(self, tx, obj, key=None, reverse=None):
        return ListVariable(sort_items(tx, obj.unpack_var_sequence(tx), key, reverse))

    def reconstruct(self, cg):
        cg.load_object(self.fn)

    def __repr__(self):
        return f"BuiltinVariable({getattr(self.fn, '__name__', self.fn)})"


def _sort_keys(tx, items, key):
    """The constant sort keys of traced items (key(item) traced when a key function is given)."""
    keys = []
    for item in items:
        k = key.call_function(tx, [item], {}) if key is not None else item
        if not k.is_python_constant():
            unimplemented(f"sorting by {k} (not a constant)")
        keys.append(k.as_python_constant())
    return keys


def sort_items(tx, items, key=None, reverse=None):
    """sorted(items, key=key, reverse=reverse) of traced items, stable as Python's sort."""
    if key is not None and key.is_python_constant() and key.as_python_constant() is None:
        key = None
    keys = _sort_keys(tx, items, key)
    rev = bool(reverse.as_python_constant()) if reverse is not None else False
    try:
        order = sorted(range(len(items)), key=lambda i: keys[i], reverse=rev)
    except TypeError as e:
        unimplemented(f"sorted() raised TypeError: {e}")
    return [items[i] for i in order]


def getitem(tx, obj, index):
    """obj[index]."""
    if getattr(obj, "torch_function_class", None) is not None:  # Note [Tensors: subclasses ...]
        return obj.call_method(tx, "__getitem__", [index], {})
    if isinstance(obj, TensorVariable):
        from kiln.frontend.variables import unbacked

        done = unbacked.slice_by_items(tx, obj, index)  # Note [Shapes: item() in the graph]
        if done is None:  # Note [Shapes: results sized by tensor data]
            done = unbacked.data_sized.masked_items(tx, obj, index)
        if done is not None:
            return done
        return call_tensor_op(tx, "call_function", operator.getitem, [obj, index], {})
    if isinstance(obj, BuiltinVariable) and isinstance(obj.fn, type):
        # `list[Tensor]` (a type annotation, e.g. for typing.cast): a constant generic alias
        arg = index.as_python_constant() if index.is_python_constant() else None
        arg = getattr(index, "value", None) if arg is None else arg
        if isinstance(arg, type):
            return misc.ConstantObjectVariable(obj.fn[arg])
    if isinstance(index, TensorVariable):
        item = optim.tensor_keyed_item(tx, obj, index)
        if item is not None:
            return item
        plain = isinstance(obj, (BaseListVariable, RangeVariable))
        known = constant_index(index) if plain and obj.python_type() in INDEXED_BY_INDEX else None
        if known is not None:  # Note [Operators: an index tensor made from a constant]
            index = known
        elif not isinstance(obj, ConstDictVariable):  # (Note [Dicts: tensors as keys])
            unimplemented("indexing a Python container with a tensor")
    folded = typing_subscript(tx, obj, index)
    if folded is not None:
        return folded
    if isinstance(obj, ConstantVariable) and obj.value is None:  # (eager's TypeError)
        raise_observed(tx, TypeError, "'NoneType' object is not subscriptable")
    return obj.call_method(tx, "__getitem__", [index], {})


_COMPARE_FNS = {
    operator.lt,
    operator.le,
    operator.eq,
    operator.ne,
    operator.gt,
    operator.ge,
    operator.is_,
    operator.is_not,
}
_BINARY_FNS = set(BINARY_OPS.values())
BUILTIN_CLASSES = frozenset(
    {
        set,
        frozenset,
        map,
        filter,
        *itertools_calls.CLASSES,
        *(c for c in stdlib.CALLS if isinstance(c, type)),
    }
)  # called like builtins


dicts.EQUALITY["as_dict"] = lambda tx, m: BuiltinVariable(dict).call_function(tx, [m], {})


_UNARY_FNS = {operator.neg, operator.pos, operator.invert, operator.abs}


def _items_in_turn(tx, obj):
    """The items of `obj`; a generator's made one at a time, as the consumer asks for them (any
    and all stop at the first that decides)."""
    if not getattr(obj, "steps_lazily", False):
        yield from obj.unpack_var_sequence(tx)
        return
    while (item := obj.next_item(tx)) is not None:
        yield item


@functools.lru_cache(maxsize=256)
def _takes_keywords(fn, handler, names):
    """Whether builtin `fn` takes all of these keyword arguments; where its signature is
    unknown (min, max, zip, dict), whether its handler takes them as keyword-only parameters
    (named after the builtin's keywords) or sorts keywords out itself (**kwargs)."""
    var_kw = inspect.Parameter.VAR_KEYWORD
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        own = inspect.signature(handler).parameters.values()
        if any(p.kind == var_kw for p in own):
            return True
        return set(names) <= {p.name for p in own if p.kind == inspect.Parameter.KEYWORD_ONLY}
    if any(p.kind == var_kw for p in params):
        return True
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return set(names) <= {p.name for p in params if p.kind in kinds}


def _items_sized(tx, obj):
    """The items of `list(obj)` / `tuple(obj)`: iterated, then sized as CPython's length hint
    does (`len` of a tensor subclass goes through its __torch_function__, after its iteration)."""
    items = obj.unpack_var_sequence(tx)
    if hasattr(obj, "torch_function_class"):
        obj.call_method(tx, "__len__", [], {})
    return items
