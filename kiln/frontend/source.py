"""Sources: where a traced value came from, as guard expression text and as load bytecode."""

import builtins
import dataclasses
import gc
import itertools
import types
import weakref

import numpy as np
import torch

from kiln.bytecode import emit
from kiln.bytecode import emit as _emit


class Source:
    """Base of every source: `name()` is the guard expression, `reconstruct(cg)` loads it."""

    def name(self):
        raise NotImplementedError

    def reconstruct(self, cg):
        raise NotImplementedError

    def base(self):
        return self

    def __str__(self):
        return self.name()


def _cached_name(source, make):
    """The name of a chained source, made once: a guard on an item deep inside nested containers
    would otherwise spell its whole chain again for each guard along it."""
    name = source.__dict__.get("_name")
    if name is None:
        name = make()
        object.__setattr__(source, "_name", name)  # (no field: equality and hash ignore it)
    return name


@dataclasses.dataclass(frozen=True)
class LocalSource(Source):
    """A parameter or local variable of the compiled frame."""

    local_name: str
    is_cell: bool = False

    def name(self):
        return self.local_name

    def reconstruct(self, cg):
        if self.is_cell:
            cg.extend(emit.load_deref(self.local_name))
        else:
            cg.extend(emit.load_fast(self.local_name))


@dataclasses.dataclass(frozen=True)
class GlobalSource(Source):
    """A module-level name: of the compiled function's globals (`___G` in guards), or of another
    module's globals when `globals_name` names that dict (for functions inlined from elsewhere)."""

    global_name: str
    globals_name: str = ""

    def name(self):
        return f"{self.globals_name or '___G'}[{self.global_name!r}]"

    def reconstruct(self, cg):
        if self.globals_name:
            cg.load_global_dict(self.globals_name)
            cg.extend(emit.load_const(self.global_name))
            cg.extend(emit.binary_subscr())
        else:
            cg.extend(emit.load_global(self.global_name, push_null=False))


@dataclasses.dataclass(frozen=True)
class ClosureSource(Source):
    """A free variable of the compiled function (its closure cell's contents)."""

    var_name: str
    index: int

    def name(self):
        return f"___closure[{self.index}].cell_contents"

    def reconstruct(self, cg):
        cg.extend(emit.load_deref(self.var_name))


@dataclasses.dataclass(frozen=True)
class AttrSource(Source):
    """`base.attr`."""

    source: Source
    attr: str

    def name(self):
        return _cached_name(self, lambda: f"{self.source.name()}.{self.attr}")

    def reconstruct(self, cg):
        self.source.reconstruct(cg)
        cg.extend(emit.load_attr(self.attr))

    def base(self):
        return self.source.base()


@dataclasses.dataclass(frozen=True)
class PlainAttrSource(AttrSource):
    """`object.__getattribute__(base, attr)`: what the plain lookup that a class's Python
    `__getattribute__` ends with reads (Note [Guards: plain reads skip a Python
    __getattribute__])."""

    def name(self):
        return _cached_name(self, lambda: f"___plain_attr({self.source.name()}, {self.attr!r})")

    def reconstruct(self, cg):
        cg.load_object(object.__getattribute__, push_null=True)
        self.source.reconstruct(cg)
        cg.extend(_emit.load_const(self.attr))
        cg.extend(_emit.call(2))


def is_builtin_class(value):
    """A class guard code names as a builtin (`str`, `int`): builtins holds it by its name."""
    return isinstance(value, type) and getattr(builtins, value.__name__, None) is value


def key_text(key):
    """A constant dict key as guard code: its repr, `___device('cpu')` for a torch.device
    (whose repr names `device`, which guard code does not see), a builtin class by its name."""
    if isinstance(key, torch.device):
        return f"___device({str(key)!r})"
    if is_builtin_class(key):
        return key.__name__
    if type(key) is tuple and any(isinstance(k, torch.device) or is_builtin_class(k) for k in key):
        return "(" + "".join(key_text(k) + ", " for k in key) + ")"
    return repr(key)


def _load_key(cg, key):
    """Push a dict key: a constant, or a tuple holding builtin classes built item by item."""
    if is_builtin_class(key):
        cg.load_object(key)
    elif type(key) is tuple and any(is_builtin_class(k) for k in key):
        for k in key:
            _load_key(cg, k)
        cg.extend(_emit.build_tuple(len(key)))
    else:
        cg.extend(_emit.load_const(key))


@dataclasses.dataclass(frozen=True)
class GetItemSource(Source):
    """`base[index]` for a constant index (int or str)."""

    source: Source
    index: object

    def name(self):
        return _cached_name(self, lambda: f"{self.source.name()}[{key_text(self.index)}]")

    def reconstruct(self, cg):
        self.source.reconstruct(cg)
        cg.extend(emit.load_const(self.index))
        cg.extend(emit.binary_subscr())

    def base(self):
        return self.source.base()


@dataclasses.dataclass(frozen=True)
class ConstSource(Source):
    """An object kiln holds itself (a function, a class); guards compare its identity."""

    value_name: str

    def name(self):
        return self.value_name

    def reconstruct(self, cg):
        cg.extend(emit.load_global(self.value_name, push_null=False))


MISSING = type("Missing", (), {"__repr__": lambda self: "<missing>"})()


def dict_get(obj, key):
    """`dict.get(obj, key)` ignoring overrides of subclasses (MISSING when absent)."""
    return dict.get(obj, key, MISSING)


def torch_attr(path):
    """The object at a dotted path under torch (`torch.overrides.get_default_nowrap_functions`)."""
    obj = torch
    for part in path.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


@dataclasses.dataclass(frozen=True)
class TorchAttrSource(Source):
    """An object of torch's modules by its dotted path: torch's objects are read without a
    source, and this names one where a guard must call it (an lru_cache'd torch function)."""

    path: str

    def name(self):
        return f"___torch_attr({self.path!r})"

    def reconstruct(self, cg):
        cg.load_object(torch_attr, push_null=True)
        cg.extend(_emit.load_const(self.path))
        cg.extend(_emit.call(1))


def weak_key_get(mapping, key):
    """`mapping.get(key)` of a weakref.WeakKeyDictionary, read from its `data` (MISSING when
    absent, or when the key cannot be weakly referenced)."""
    try:
        ref = weakref.ref(key)
    except TypeError:
        return MISSING
    return mapping.data.get(ref, MISSING)


@dataclasses.dataclass(frozen=True)
class WeakKeyGetSource(Source):
    """The item of a weakref.WeakKeyDictionary under a key read from a source."""

    source: Source
    key_source: Source

    def name(self):
        return f"___weak_key_get({self.source.name()}, {self.key_source.name()})"

    def reconstruct(self, cg):
        cg.load_object(weak_key_get, push_null=True)
        self.source.reconstruct(cg)
        self.key_source.reconstruct(cg)
        cg.extend(_emit.call(2))

    def base(self):
        return self.source.base()


def proxied_dict(proxy):
    """The mapping a types.MappingProxyType reads (its only referent)."""
    return gc.get_referents(proxy)[0]


@dataclasses.dataclass(frozen=True)
class ProxiedDictSource(Source):
    """The dict behind a mappingproxy (Note [Dicts: mappingproxy])."""

    source: Source

    def name(self):
        return f"___proxied_dict({self.source.name()})"

    def reconstruct(self, cg):
        cg.load_object(proxied_dict, push_null=True)
        self.source.reconstruct(cg)
        cg.extend(_emit.call(1))

    def base(self):
        return self.source.base()


@dataclasses.dataclass(frozen=True)
class DictGetSource(Source):
    """`dict.get(base, key)` of a dict-subclass object (its own get/__getitem__ bypassed)."""

    source: Source
    key: object

    def name(self):
        return f"___dict_get({self.source.name()}, {self.key!r})"

    def reconstruct(self, cg):
        cg.load_object(dict_get, push_null=True)
        self.source.reconstruct(cg)
        _load_key(cg, self.key)
        cg.extend(_emit.call(2))

    def base(self):
        return self.source.base()


@dataclasses.dataclass(frozen=True)
class TupleItemSource(Source):
    """`tuple.__getitem__(base, index)`: an item of a tuple subclass whose class overrides
    `__getitem__` (a namedtuple's own indexing method is not its storage)."""

    source: Source
    index: int

    def name(self):
        return f"___tuple_item({self.source.name()}, {self.index!r})"

    def reconstruct(self, cg):
        cg.load_object(tuple.__getitem__, push_null=True)
        self.source.reconstruct(cg)
        cg.extend(emit.load_const(self.index))
        cg.extend(_emit.call(2))

    def base(self):
        return self.source.base()


def dict_key_at(obj, index):
    """The `index`-th key of a dict, in its order (MISSING when it has fewer, or is no dict)."""
    if not isinstance(obj, dict):
        return MISSING
    return next(itertools.islice(dict.keys(obj), index, None), MISSING)


@dataclasses.dataclass(frozen=True)
class DictKeyAtSource(Source):
    """`___dict_key_at(base, index)`: a dict input's key at a position (a key that is an object,
    Note [Dicts: inputs keyed by tensors])."""

    source: Source
    index: int

    def name(self):
        return f"___dict_key_at({self.source.name()}, {self.index})"

    def reconstruct(self, cg):
        cg.load_object(dict_key_at, push_null=True)
        self.source.reconstruct(cg)
        cg.extend(_emit.load_const(self.index))
        cg.extend(_emit.call(2))

    def base(self):
        return self.source.base()


@dataclasses.dataclass(frozen=True)
class DictGetByKeySource(Source):
    """`dict.get(base, key)` where the key is itself read from a source (an object key: the
    guard looks it up with the object the call is given)."""

    source: Source
    key_source: Source

    def name(self):
        return f"___dict_get({self.source.name()}, {self.key_source.name()})"

    def reconstruct(self, cg):
        cg.load_object(dict_get, push_null=True)
        self.source.reconstruct(cg)
        self.key_source.reconstruct(cg)
        cg.extend(_emit.call(2))

    def base(self):
        return self.source.base()


@dataclasses.dataclass(frozen=True)
class MappingGetSource(Source):
    """`base.get(key)` of a mapping kiln reads by key only (os.environ)."""

    source: Source
    key: object

    def name(self):
        return f"{self.source.name()}.get({self.key!r})"

    def reconstruct(self, cg):
        load = type(cg)(cg.output)
        self.source.reconstruct(load)
        load.extend(_emit.load_attr("get"))
        cg.extend(_emit.with_null(load.instrs))
        cg.extend(_emit.load_const(self.key))
        cg.extend(_emit.call(1))

    def base(self):
        return self.source.base()


@dataclasses.dataclass(frozen=True)
class NumpyTensorSource(Source):
    """`torch.from_numpy(base)`: the tensor of an ndarray input (Note [NumPy: arrays as tensors])."""

    source: Source

    def name(self):
        return f"___from_numpy({self.source.name()})"

    def reconstruct(self, cg):
        cg.load_object(tensor_of_array, push_null=True)
        self.source.reconstruct(cg)
        cg.extend(_emit.call(1))

    def base(self):
        return self.source.base()


def tensor_of_array(array):
    """`torch.from_numpy(array)` of a writeable array (a read-only one fails the guard that reads
    it, before torch warns about it); a 0-d tensor of a NumPy scalar (Note [NumPy: scalar inputs])."""
    if isinstance(array, np.generic):
        return torch.from_numpy(np.asarray(array))
    if not array.flags.writeable:
        raise ValueError("a read-only numpy array")
    return torch.from_numpy(array)


TUPLE_ITERATOR = type(iter(()))
RANGE_ITERATOR = type(iter(range(0)))  # (not longrange_iterator: ranges past a C long)


def iter_tuple(it):
    """The tuple a tuple iterator reads (an empty one once it has run out)."""
    state = it.__reduce__()
    return state[1][0] if len(state) == 3 else ()


def iter_rest(it):
    """The items a tuple or range iterator has left, as a tuple (it is not advanced)."""
    state = it.__reduce__()
    if type(it) is RANGE_ITERATOR:  # (range(...), index); 3.13: (the range left, None)
        return tuple(state[1][0][state[2] or 0 :])
    # tuple's own slicing: the iterator reads the tuple's items, not a subclass's __getitem__
    return tuple.__getitem__(state[1][0], slice(state[2], None)) if len(state) == 3 else ()


def iter_has(it, n):
    """Whether a tuple iterator has more than `n` items left."""
    return len(iter_rest(it)) > n


def advance_iter(it, n):
    """Advance an iterator by `n` steps (the replay of the items a graph consumed, and of the step
    that found its end)."""
    for _ in range(n):
        next(it, None)


def partial_dict(p):
    """The instance __dict__ of a functools.partial, or an empty dict when it has none yet, read
    without making it (Note [Functions: hasattr on a partial from outside])."""
    kw = p.keywords
    for r in gc.get_referents(p):  # (its func, args, keywords and, once made, its __dict__)
        if type(r) is dict and r is not kw:
            return r
    return {}


@dataclasses.dataclass(frozen=True)
class PartialDictSource(Source):
    """`___partial_dict(base)`: the instance dict of a partial input, never made by the guard."""

    source: Source

    def name(self):
        return f"___partial_dict({self.source.name()})"

    def reconstruct(self, cg):
        raise NotImplementedError("a guard-only source")

    def base(self):
        return self.source.base()


def proxy_referent(p):
    """The object a weakref.proxy stands for (ReferenceError once it died): its `__init__`, read
    through the proxy, is bound to the referent (Note [Objects: weakref.proxy])."""
    return p.__init__.__self__


@dataclasses.dataclass(frozen=True)
class ProxyReferentSource(Source):
    """`___proxy_referent(base)`: the referent of a weakref.proxy input."""

    source: Source

    def name(self):
        return f"___proxy_referent({self.source.name()})"

    def reconstruct(self, cg):
        cg.load_object(proxy_referent, push_null=True)
        self.source.reconstruct(cg)
        cg.extend(_emit.call(1))

    def base(self):
        return self.source.base()


@dataclasses.dataclass(frozen=True)
class IterRestSource(Source):
    """`___iter_rest(base)`: the items a tuple-iterator input has left (Note [Iterators: inputs])."""

    source: Source

    def name(self):
        return f"___iter_rest({self.source.name()})"

    def reconstruct(self, cg):
        cg.load_object(iter_rest, push_null=True)
        self.source.reconstruct(cg)
        cg.extend(_emit.call(1))

    def base(self):
        return self.source.base()


@dataclasses.dataclass(frozen=True)
class IterHasSource(Source):
    """`___iter_has(base, n)`: whether a tuple-iterator input has more than n items left (only the
    items a trace takes are guarded: Note [Iterators: inputs])."""

    source: Source
    n: int

    def name(self):
        return f"___iter_has({self.source.name()}, {self.n})"

    def reconstruct(self, cg):
        raise NotImplementedError("a guard-only source")

    def base(self):
        return self.source.base()


def dict_iter_dict(it):
    """The dict a dict iterator reads, or None once it has finished (it lets go of it then)."""
    for r in gc.get_referents(it):  # (its dict and its cached result tuple)
        if isinstance(r, dict):
            return r
    return None


def finalizer_class(cls):
    """cls when it (or a Python class along its MRO) defines __del__, else None."""
    if not isinstance(cls, type) or not cls.__flags__ & _HEAPTYPE:
        return None
    for k in cls.__mro__:
        found = vars(k).get("__del__") if k.__flags__ & _HEAPTYPE else None
        # (3.12 made C classes such as _io._IOBase heap types: their finalizer's slot wrapper
        # is no Python __del__)
        if found is not None and not isinstance(found, types.WrapperDescriptorType):
            return cls
    return None


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python


def dict_iter_pos(it):
    """How many items a dict iterator has taken, or None when it is not traced into: it has
    finished, its dict changed size (its next step raises), or the result tuple it keeps for
    reuse holds an object whose class has a Python __del__ (its next step may drop it). Note
    [Dicts: iterators at a break]."""
    d = None
    for r in gc.get_referents(it):  # (its dict and its cached result tuple)
        if isinstance(r, dict):
            d = r
        elif type(r) is tuple and any(finalizer_class(type(x)) for x in r):
            return None
    if d is None:
        return None
    left = it.__length_hint__()  # (0 also once the dict changed size)
    if not left:
        try:
            it.__reduce__()  # (a copy runs on: it raises when the dict changed size)
        except RuntimeError:
            return None
    return len(d) - left


@dataclasses.dataclass(frozen=True)
class DictIterSource(Source):
    """`___dict_iter_<part>(base)` of a dict-iterator input: its dict, or how far it has run."""

    source: Source
    part: str  # "dict" or "pos"

    def name(self):
        return f"___dict_iter_{self.part}({self.source.name()})"

    def reconstruct(self, cg):
        cg.load_object(dict_iter_dict if self.part == "dict" else dict_iter_pos, push_null=True)
        self.source.reconstruct(cg)
        cg.extend(_emit.call(1))

    def base(self):
        return self.source.base()


def is_from_local(source):
    """Whether a source is rooted in the frame's locals (as opposed to globals or closures)."""
    return isinstance(source.base(), LocalSource)


def flatten_spec(t):
    """`[inner names, ctx]` of a wrapper tensor subclass's `__tensor_flatten__()` (a list: the
    guard compares it by equality, with its expected value held by the guard function)."""
    names, ctx = t.__tensor_flatten__()
    return [list(names), ctx]


@dataclasses.dataclass(frozen=True)
class FlattenSpecSource(Source):
    """`___flatten_spec(base)`: the flatten spec of a wrapper-subclass input (guard only; Note
    [Tensors: wrapper subclass inputs])."""

    source: Source

    def name(self):
        return f"___flatten_spec({self.source.name()})"

    def reconstruct(self, cg):
        cg.load_object(flatten_spec, push_null=True)
        self.source.reconstruct(cg)
        cg.extend(_emit.call(1))

    def base(self):
        return self.source.base()
