"""Guards: the conditions a compiled entry assumes, emitted as ONE generated check function.

Note [Guards: one function per entry]
Every guard is a boolean Python expression over the frame's arguments (by name), `___G` (the
function's globals) and `___closure` (its closure cells). The expressions of one cache entry are
joined with `and` into a single generated function whose signature is the user function's own, so
the hot path is `if guard(*args, **kwargs): return fn(*args, **kwargs)` with no argument binding.
Expected values (types, dtypes, devices, objects) are bound into the function's closure once;
cheap checks (types, identities, constants) come before tensor checks and global state. On a
miss the parts are evaluated one by one to name the first failing guard (the `recompiles` log).
"""

import ast
import builtins
import collections
import dataclasses
import enum
import inspect
import math
import re
import sys
import types
import weakref

import torch

from kiln import config as _config
from kiln import faults, logs
from kiln.frontend import dispatch_modes, guard_program, tensor_match
from kiln.frontend.source import (
    MISSING,
    AttrSource,
    DictIterSource,
    FlattenSpecSource,
    GetItemSource,
    IterHasSource,
    IterRestSource,
    LocalSource,
    PartialDictSource,
    PlainAttrSource,
    ProxiedDictSource,
    ProxyReferentSource,
    dict_get,
    dict_iter_dict,
    dict_iter_pos,
    dict_key_at,
    flatten_spec,
    iter_has,
    iter_rest,
    key_text,
    partial_dict,
    proxied_dict,
    proxy_referent,
    tensor_of_array,
    torch_attr,
    weak_key_get,
)
from kiln.symbolic import autocast_state as amp


class GuardKind(enum.IntEnum):
    """Guard kinds; the value orders them in the generated function (cheap first)."""

    ID_MATCH = 0
    TYPE_MATCH = 1
    CONSTANT_MATCH = 2
    LIST_LENGTH = 3
    DICT_KEYS = 4
    ALIASING = 5
    NO_HOOKS = 6
    TENSOR_MATCH = 7
    GLOBAL_STATE = 8
    DISTINCT = 9  # two inputs are not the same object (an `is` folded to False)
    SHAPE_ENV = 10  # the facts of the frame's ShapeEnv about its dynamic sizes (after tensors)
    STATE_QUERY = 11  # a folded torch query still answers the same (Note [Torch: folded queries])
    FLOAT_COMPARE = 12  # a float input compares with a number as before (unspecialised floats)
    NOT_IN = 13  # a key is not in a dict (an instance attribute that would shadow a method)
    SEPARATE_MEMORY = 14  # two tensor inputs share no storage (Note [Control flow: a branch ...])
    IN = 15  # a key is in a dict (Note [Dicts: inputs guarded by the keys read])


@dataclasses.dataclass(frozen=True)
class Guard:
    """One guard: a kind on a source (None for global state), with the expected value."""

    kind: GuardKind
    source: object
    value: object = None

    def key(self):
        return (self.kind, self.source.name() if self.source is not None else "", id(self.value))


_CONSTANT_INLINE = (int, str, bool, type(None))


# Note [Guards: constants compared]
# A constant guard must pass only for a value the trace would have computed the same with. `==`
# says more: (1.0, 2) == (1, 2), True == 1 inside a tuple, -0.0 == 0.0, and NaN equals nothing
# (a guard on a value holding NaN would fail on every call). So a tuple, frozenset, complex or
# zero float is compared by `typed_constant`: each item with its exact type, floats by repr
# (which tells -0.0 and nan apart, and is exact for the rest). That is a Python call per check,
# so the common shapes are written out with the same meaning as tests the C guard program runs
# inline (`_tuple_parts`, `_float_parts`): a tuple item by item (exact type, then `==`), a zero's
# sign by math.copysign; NaN, frozensets, complex numbers and long tuples keep `typed_constant`.
def typed_constant(v):
    """`v` as a key equal only for the same types and the same values, NaN equal to NaN."""
    t = type(v)
    if t is tuple:
        return (t, tuple(typed_constant(i) for i in v))
    if t is frozenset:
        return (t, frozenset(typed_constant(i) for i in v))
    if t is float:
        return (t, repr(v))
    if t is complex:
        return (t, repr(v.real), repr(v.imag))
    return (t, v)


def _float_parts(s, v, namer):
    """Conditions that `s` is the float `v` by `typed_constant`'s meaning without calling it
    (`==`, and the sign of a zero by math.copysign: a C call), or None for NaN."""
    if math.isnan(v):
        return None
    parts = [f"___type({s}) is {namer(float, 'float')}"]
    if math.isinf(v):
        return parts + [f"{s} == {namer(v, 'inf' if v > 0 else 'ninf')}"]
    parts.append(f"{s} == {v!r}")
    if v == 0.0:  # -0.0 == 0.0: the sign tells them apart
        parts.append(f"___copysign(1.0, {s}) == {math.copysign(1.0, v)!r}")
    return parts


def _tuple_parts(s, v, namer, budget=None):
    """A constant tuple compared item by item, each with its exact type (`typed_constant`'s
    meaning), as reads and tests the C guard program does inline; None when an item needs
    `typed_constant` (a NaN, another type) or there are over 16 items."""
    budget = budget if budget is not None else [16]
    parts = [f"___type({s}) is {namer(tuple, 'tuple')}", f"___len({s}) == {len(v)}"]
    for i, item in enumerate(v):
        budget[0] -= 1
        if budget[0] < 0:
            return None
        at = f"{s}[{i}]"
        if item is None or isinstance(item, bool):
            parts.append(f"{at} is {item!r}")
        elif type(item) in (int, str):
            parts.append(f"___type({at}) is {namer(type(item), type(item).__name__)}")
            parts.append(f"{at} == {item!r}")
        elif type(item) is float:
            floats = _float_parts(at, item, namer)
            if floats is None:
                return None
            parts += floats
        elif type(item) is tuple:
            inner = _tuple_parts(at, item, namer, budget)
            if inner is None:
                return None
            parts += inner
        else:
            return None
    return [" and ".join(parts)]


@dataclasses.dataclass(frozen=True)
class DynamicLayout:
    """The symbolic dims of a tensor input; `strides` (ints and SymNodes) for a dense layout that
    is not contiguous (a transposed or channels-last input), else None (contiguous)."""

    dims: frozenset
    strides: tuple = None


class GuardSet:
    """The guards of one compiled entry, deduplicated in insertion order."""

    def __init__(self):
        self._guards = {}
        self.dynamic_dims = {}  # source name -> DynamicLayout (TENSOR_MATCH skips its dims)
        self._same_objects = {}  # group -> {id(object): (object, its first source)}

    def set_dynamic_dims(self, source, dims, strides=None):
        self.dynamic_dims[source.name()] = DynamicLayout(frozenset(dims), strides)

    def add(self, kind, source, value=None):
        g = Guard(kind, source, value)
        self._guards.setdefault(g.key(), g)

    def same_objects(self, group, source, value, pairs_up_to=None):
        """Guard which objects of `group` the trace saw as the same: `source` is the object first
        read from another source (ALIASING) or none of the others (DISTINCT; not once the group
        holds `pairs_up_to` objects: the caller pins them by identity then). Returns the group:
        {id(object): (object, the source first read)}.

        Note [Guards: which objects are the same]
        A trace that keys a dict or a set by objects from outside the frame folds which of them
        were the same object, not which objects they were. Each object of a group is guarded to
        be the object its first source read (another source of it: ALIASING) and a different
        object from every other one's first source (DISTINCT): any objects with that pattern
        reuse the entry, and a call whose objects alias otherwise recompiles.
        """
        seen = self._same_objects.setdefault(group, {})
        first = seen.get(id(value))
        if first is not None:
            if first[1] != source:
                self.add(GuardKind.ALIASING, source, first[1])
            return seen
        if pairs_up_to is None or len(seen) < pairs_up_to:
            for _, other in seen.values():
                self.add(GuardKind.DISTINCT, source, other)
        seen[id(value)] = (value, source)  # (the object kept alive: ids stay unique)
        return seen

    def added_since(self, mark):
        """The keys of the guards added since `mark` (`len(guards)` then), in order."""
        return tuple(self._guards)[mark:]

    def retract(self, keys):
        """Drop these guards (Note [Hooks: read from their source at run time])."""
        for key in keys:
            self._guards.pop(key, None)

    def __len__(self):
        return len(self._guards)

    def __iter__(self):
        return iter(self._guards.values())


_IDENT = re.compile(r"\W")


class _Namer:
    """Names the expected values bound into the guard function's closure."""

    def __init__(self):
        self.values = {}
        self._ids = {}

    def __call__(self, value, hint="c", key=None):
        by_value = isinstance(value, (torch.device, torch.dtype, int, float, str, tuple, type))
        if key is None:
            key = (type(value), value) if by_value else id(value)
        if key in self._ids:
            return self._ids[key]
        name = f"___{_IDENT.sub('_', hint)}"  # a type's __name__ may be any str ("typing.io")
        if name in self.values:
            name = f"___{hint}_{len(self.values)}"
        self.values[name] = value
        self._ids[key] = name
        return name


# Note [Guards: identity without ownership]
# An identity guard (`x is ___A`, `___type(x) is ___A`) that held its object would keep alive what
# the program let go: a class made per call, a function or object passed once (CPython's
# test_lru_cache_weakrefable: `del A` must free the class). Objects that can die (classes defined in
# Python, functions, instances) are held by a weak reference: the guard compares with its referent,
# `x is ___A() is not None`; once the object is gone the guard fails (no later object can pass by
# reusing its address), and the entry just recompiles if asked. C types, modules and builtins live
# as long as the interpreter: those stay plain, readable `x is ___float32`.


def held_weakly(value):
    """Whether an identity guard holds `value` by a weak reference (Note [Guards: identity ...])."""
    if isinstance(value, type):
        return bool(value.__flags__ & _HEAPTYPE) and not _long_lived(value)
    if isinstance(value, types.ModuleType) or value is MISSING:
        return False
    if isinstance(value, types.BuiltinFunctionType) and _module_function(value):
        return False
    if isinstance(value, types.FunctionType) and _long_lived(value):
        return False
    try:
        weakref.ref(value)
    except TypeError:
        return False
    return True


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python
_LONG_LIVED = ("builtins", "torch", "typing", "abc", "enum", "collections", "functools", "kiln")


def _module_function(fn):
    """A builtin function its module (or a live object's class) holds, e.g. `len`, `torch.add`;
    a C function made at run time or a bound method of a C object can die (CPython's
    test_weakref.test_cfunction: `del f` must free it)."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, types.ModuleType):
        return getattr(owner, fn.__name__, None) is fn
    if isinstance(owner, type):
        return not owner.__flags__ & _HEAPTYPE
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    return module is not None and getattr(module, fn.__name__, None) is fn


def _long_lived(value):
    """A class or function of the library (torch's, the standard library's core): kept plain."""
    module = getattr(value, "__module__", None) or ""
    return module.split(".")[0] in _LONG_LIVED


def _readable_hint(value):
    if value is MISSING:
        return "missing"
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    if isinstance(value, torch.device):
        return "device_" + str(value).replace(":", "_")
    if isinstance(value, torch.Tensor):
        return "tensor"
    return "obj"


def _dict_keys(d):
    """The keys of a dict (subclass) in its storage's order, as dict.keys gives them."""
    return list(dict.keys(d))


def _storage_id(t):
    """The identity of a tensor's storage (views of one tensor share it)."""
    return t.untyped_storage()._cdata


# Note [Guards: tensor subclasses with __torch_function__]
# torch calls a subclass's __torch_function__ for `x.shape`, `x.dtype`, `x.stride()` ... (user
# code, maybe with side effects); Dynamo's guards read tensors in C and never call it. kiln's
# guards read tensors in Python (C++ only for exact Tensor/Parameter: Note [Guards: tensor checks in
# C++]), so the metadata of such an input is read from a plain alias of it made with the subclass's
# __torch_function__ disabled (`___untf`), and only its type from the input itself.
_TF_DEFAULTS = (torch._C._disabled_torch_function_impl,)


def has_own_torch_function(cls):
    """Whether torch calls a __torch_function__ for tensors of class cls (a plain subclass)."""
    if cls in (torch.Tensor, torch.nn.Parameter) or not issubclass(cls, torch.Tensor):
        return False
    if hasattr(cls, "__tensor_flatten__"):  # (a wrapper subclass: its own guards)
        return False
    tf = inspect.getattr_static(cls, "__torch_function__", None)
    return getattr(tf, "__func__", tf) not in _TF_DEFAULTS


def untf(t):
    """A plain Tensor alias of t, made without calling its class's __torch_function__."""
    with torch._C.DisableTorchFunctionSubclass():
        return t.as_subclass(torch.Tensor)


def _expr_parts(guard, namer, s, ref, dynamic_dims=None, fast=False):
    """The expressions (one or more) that check a guard; `s` is the text of its source and
    `ref(source)` the text of another source; `dynamic_dims` those of a TENSOR_MATCH not pinned;
    `fast`: a tensor's checks may be one C++ call (Note [Guards: tensor checks in C++])."""
    v = guard.value
    k = guard.kind
    if k == GuardKind.ID_MATCH:
        if held_weakly(v):  # (v is never None: None is not weakly referenced)
            return [
                f"{s} is {namer(weakref.ref(v), _readable_hint(v), ('weak', id(v)))}() is not None"
            ]
        return [f"{s} is {namer(v, _readable_hint(v))}"]
    if k == GuardKind.TYPE_MATCH:
        if held_weakly(v):
            return [
                f"___type({s}) is {namer(weakref.ref(v), _readable_hint(v), ('weak', id(v)))}()"
            ]
        return [f"___type({s}) is {namer(v, _readable_hint(v))}"]
    if k == GuardKind.CONSTANT_MATCH:
        if v is None or isinstance(v, bool):
            return [f"{s} is {v!r}"]
        t = namer(type(v), type(v).__name__)
        if isinstance(v, float) and math.isnan(v):
            return [f"___type({s}) is {t} and {s} != {s}"]  # NaN: the same argument again
        if isinstance(v, _CONSTANT_INLINE) or (isinstance(v, float) and math.isfinite(v) and v):
            return [f"___type({s}) is {t} and {s} == {v!r}"]
        if type(v) is tuple:
            parts = _tuple_parts(s, v, namer)
            if parts is not None:
                return parts
        if type(v) is float:
            parts = _float_parts(s, v, namer)
            if parts is not None:
                return [" and ".join(parts)]
        if type(v) in (tuple, frozenset, complex, float):  # Note [Guards: constants compared]
            key = namer(typed_constant(v), "const")  # (a float here: 0.0, -0.0 or inf)
            return [f"___type({s}) is {t} and ___typed({s}) == {key}"]
        return [f"___type({s}) is {t} and {s} == {namer(v, 'const')}"]
    if k == GuardKind.LIST_LENGTH:
        typ, n = v
        return [f"___type({s}) is {namer(typ, typ.__name__)} and ___len({s}) == {n}"]
    if k == GuardKind.DICT_KEYS:
        typ, keys = v
        expected = "[" + ", ".join(key_text(key) for key in keys) + "]"
        # (a dict subclass's keys as dict stores them: its own __iter__ is not run)
        own_iter = issubclass(typ, dict) and not issubclass(typ, collections.OrderedDict)
        keys = "___dict_keys" if own_iter and typ is not dict else "___list"
        return [f"___type({s}) is {namer(typ, typ.__name__)} and {keys}({s}) == {expected}"]
    if k == GuardKind.NOT_IN:
        return [f"{key_text(v)} not in {s}"]
    if k == GuardKind.IN:
        return [f"{key_text(v)} in {s}"]
    if k == GuardKind.ALIASING:
        return [f"{s} is {ref(v)}"]
    if k == GuardKind.DISTINCT:
        return [f"{s} is not {ref(v)}"]
    if k == GuardKind.SEPARATE_MEMORY:
        return [f"___storage_id({s}) != ___storage_id({ref(v)})"]
    if k == GuardKind.NO_HOOKS:
        hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
        return [" and ".join(f"not {s}.{h}" for h in hooks)]
    if k == GuardKind.SHAPE_ENV:
        # Note [Shapes: guards from facts]: rendered now, after the backend added its facts
        return v.guard_texts()
    if k == GuardKind.TENSOR_MATCH:
        typ = type(t := v)
        keys = not _is_module_state(guard.source)
        match = None
        if fast and not dynamic_dims:
            match = tensor_match.matcher(t, keys)
        elif fast and dynamic_dims.strides is None:  # (contiguous: Note [Guards: tensor ...])
            match = tensor_match.matcher(t, keys, sorted(dynamic_dims.dims))
        if match is not None:  # (exact Tensor and Parameter only: no __torch_function__ to run)
            return [f"{namer(match, 'tensor_match')}({s})"]
        if has_own_torch_function(typ):  # Note [Guards: tensor subclasses with __torch_function__]
            s_type, s = s, f"___untf({s})"
            t = untf(t)
        else:
            s_type = s
        if dynamic_dims:
            layout = _dynamic_layout_parts(s, t, dynamic_dims)
        else:
            layout = [f"{s}.shape == {tuple(t.shape)!r}", f"{s}.stride() == {tuple(t.stride())!r}"]
        return [
            f"___type({s_type}) is {namer(typ, typ.__name__)}",
            f"{s}.dtype is {namer(t.dtype, _readable_hint(t.dtype))}",
            *layout,
            f"{s}.requires_grad is {t.requires_grad!r}",
            # Note [Tensors: non-leaf inputs] (a __torch_function__ of its own would run)
            *([f"{s}.is_leaf is {t.is_leaf!r}"] if t.requires_grad and s is s_type else []),
            f"{s}.device == {namer(t.device, _readable_hint(t.device))}",
            *(
                [
                    f"___dispatch_keys({s}) == "
                    f"{namer(torch._C._dispatch_keys(t), 'keys', key=('keys', id(v)))}"
                ]
                if keys
                else []
            ),
        ]
    if k == GuardKind.FLOAT_COMPARE:
        symbol, c, answer = v  # (Note [Shapes: unspecialised floats])
        ctext = repr(c) if math.isfinite(c) else namer(c, "c")
        return [f"___type({s}) is float and ({s} {symbol} {ctext}) is {answer!r}"]
    if k == GuardKind.STATE_QUERY:
        fn, answer = v
        if answer is None or isinstance(answer, bool):
            return [f"{namer(fn, fn.__name__)}() is {answer}"]
        # (an object made per call, such as a DispatchKeySet: compared by value)
        return [f"{namer(fn, fn.__name__)}() == {namer(answer, 'q')}"]
    if k == GuardKind.GLOBAL_STATE:
        grad = torch.is_grad_enabled()
        return [
            f"___is_grad_enabled() is {grad!r}",
            # (process settings a backend reads when it compiles: the Triton matmul's tf32)
            f"___deterministic() is {torch._C._get_deterministic_algorithms()!r}",
            f"___cublas_tf32() is {torch._C._get_cublas_allow_tf32()!r}",
            "___functorch_transform() is None",  # Note [Frames: under torch.func transforms]
            _autocast_guard(namer),
            f"___kiln_config.compiled_autograd is {bool(_config.compiled_autograd)!r}",
            # Note [Frames: under a user's torch function mode]: the default-device modes
            (
                f"___default_devices() == {namer(devices, 'devices')} and "
                if (devices := dispatch_modes.default_devices())
                else ""
            )
            + dispatch_modes.function_modes_guard(),
            *(
                [  # (a module hook registered globally after compiling: traced again)
                    "not ___global_forward_hooks and not ___global_forward_pre_hooks",
                    "not ___global_backward_hooks and not ___global_backward_pre_hooks",
                ]
                if v
                else []
            ),
        ]
    raise AssertionError(f"unknown guard kind {k}")


def _autocast_guard(namer):
    """The entry autocast state (Note [Autocast: frames called under autocast])."""
    if not torch._C._is_any_autocast_enabled():
        return "not ___is_any_autocast_enabled()"
    return f"___autocast_settings() == {namer(amp.settings(), 'autocast')}"


def _dynamic_layout_parts(s, t, layout):
    """Rank and static sizes of a tensor with symbolic dims (its sizes are in the SHAPE_ENV guard),
    then its layout: contiguity, or each stride as an expression of the sizes (dense layouts)."""
    parts = [f"{s}.dim() == {t.dim()}"]
    for d in range(t.dim()):
        if d not in layout.dims:
            parts.append(f"{s}.size()[{d}] == {int(t.shape[d])}")
    if layout.strides is None:
        parts.append(f"{s}.is_contiguous()")
        return parts
    for d, stride in enumerate(layout.strides):
        if hasattr(stride, "env"):  # a SymNode: rendered now, with the facts learned since
            text = stride.env.render(stride.env.substitute(stride.expr))
        else:
            text = str(int(stride))
        parts.append(f"{s}.stride()[{d}] == {text}")
    return parts


def is_module_state(source):
    """A parameter or buffer read from a module (see _is_module_state)."""
    return _is_module_state(source)


def _is_module_state(source):
    """A parameter or buffer read from a module (`mod._parameters['w']`).

    Note [Guards: module state]: these are plain tensors kiln lifted itself; their dispatch keys
    only change with their device (checked), so the costly dispatch-key check is left out.
    """
    parent = getattr(source, "source", None)
    return (
        isinstance(source, GetItemSource)
        and isinstance(parent, AttrSource)
        and parent.attr in ("_parameters", "_buffers")
    )


def _depth(source):
    d = 0
    while source is not None and hasattr(source, "source"):
        source = source.source
        d += 1
    return d


def _order(guard):
    """Global state last; otherwise parents before children (a child's access may only be safe
    once its parent's type is checked), then cheap kinds first."""
    if guard.kind == GuardKind.SHAPE_ENV:
        return (True, 0, 0)  # after every tensor's type and rank, before global state
    last = guard.kind in (GuardKind.GLOBAL_STATE, GuardKind.STATE_QUERY)
    return (last, _depth(guard.source), guard.kind)


# Note [Guards: plain reads skip a Python __getattribute__]
# A `__dict__` source is an object's own namespace: the instance dict (or a class's) that
# attribute lookup consults, as the translator reads it (raw_load_attr, the instance-dict view, a
# NOT_IN guard). The guard reads it with `object.__getattribute__(obj, '__dict__')`, not
# `obj.__dict__`: the same dict, but a class with a Python `__getattribute__` (Hugging Face's
# configs: two Python frames per read) ran that function on every check, ~2.4 us per read and
# eight reads in hf_llama's guard. Likewise a class attribute that the plain lookup at the end of
# such a `__getattribute__` found has a PlainAttrSource (user_defined.plain_getattr).


class _Hoister:
    """Gives each source a short local name, computed once from its parent's (Note [Guards:
    one function per entry]): `___s3 = ___s1['fc1']`."""

    def __init__(self, types=None):
        self.names = {}
        self.lines = []
        self.types = types or {}  # source -> the class its TYPE_MATCH guard pins

    def __call__(self, source):
        if source is None:
            return ""
        if isinstance(source, LocalSource):
            return source.local_name
        name = self.names.get(source)
        if name is not None:
            return name
        if type(source) is AttrSource and source.attr == "__class__" and self._plain_class(source):
            expr = f"___type({self(source.source)})"  # Note [Guards: plain reads skip ...]
        elif isinstance(source, PlainAttrSource) or (
            isinstance(source, AttrSource) and source.attr == "__dict__"
        ):
            # Note [Guards: plain reads skip a Python __getattribute__]
            expr = f"___plain_attr({self(source.source)}, {source.attr!r})"
        elif isinstance(source, AttrSource):
            expr = f"{self(source.source)}.{source.attr}"
        elif isinstance(source, GetItemSource):
            expr = f"{self(source.source)}[{key_text(source.index)}]"
        elif type(source).__name__ == "DictGetSource":
            expr = f"___dict_get({self(source.source)}, {key_text(source.key)})"
        elif type(source).__name__ == "DictGetByKeySource":
            expr = f"___dict_get({self(source.source)}, {self(source.key_source)})"
        elif isinstance(source, IterRestSource):
            expr = f"___iter_rest({self(source.source)})"
        elif isinstance(source, ProxiedDictSource):
            expr = f"___proxied_dict({self(source.source)})"
        elif isinstance(source, DictIterSource):
            expr = f"___dict_iter_{source.part}({self(source.source)})"
        elif isinstance(source, PartialDictSource):
            expr = f"___partial_dict({self(source.source)})"
        elif isinstance(source, ProxyReferentSource):
            expr = f"___proxy_referent({self(source.source)})"
        elif isinstance(source, IterHasSource):
            expr = f"___iter_has({self(source.source)}, {source.n})"
        elif isinstance(source, FlattenSpecSource):
            expr = f"___flatten_spec({self(source.source)})"
        else:
            expr = source.name()
        name = self.names[source] = f"___s{len(self.names)}"
        self.lines.append(f"{name} = {expr}")
        return name

    def _plain_class(self, source):
        """Whether `obj.__class__` is `type(obj)` for the class its guard pins: no `__class__`
        of its own, and the plain lookup or a Python __getattribute__ (which the translator
        does not run for `__class__` either), not a C one (a weakref.proxy forwards it)."""
        cls = self.types.get(source.source)
        if cls is None or inspect.getattr_static(cls, "__class__", None) is not _OBJECT_CLASS:
            return False
        hook = inspect.getattr_static(cls, "__getattribute__", None)
        return hook is object.__getattribute__ or isinstance(hook, types.FunctionType)


_OBJECT_CLASS = object.__dict__["__class__"]


def signature_text(code):
    """The parameter list of a code object as source text: `x, y=..., *args, k, **kw`."""
    names = code.co_varnames
    n_pos = code.co_argcount
    n_kwonly = code.co_kwonlyargcount
    parts = list(names[:n_pos])
    if code.co_posonlyargcount:
        parts.insert(code.co_posonlyargcount, "/")
    i = n_pos + n_kwonly
    if code.co_flags & inspect.CO_VARARGS:
        parts.append("*" + names[i])
        i += 1
    elif n_kwonly:
        parts.append("*")
    parts.extend(names[n_pos : n_pos + n_kwonly])
    if code.co_flags & inspect.CO_VARKEYWORDS:
        parts.append("**" + names[i])
    return ", ".join(parts)


_TENSOR_MATCH_CALL = re.compile(
    r"(___tensor_match\w*)\("
)  # (a line to print with the facts it checks)


def build_guard_fn(fn, guard_set, extra=None, dynamic_closure=False):
    """Generate the check function of one entry; `.source`, `.parts`, `.closure_values` on it."""
    faults.hit("guards")
    namer = _Namer()
    parts = []  # readable, self-contained expressions: for the recompile reason
    in_parts = set()  # (a list input of 30000 items has as many guards: no list scan per part)
    body = []
    types_of = {g.source: g.value for g in guard_set if g.kind == GuardKind.TYPE_MATCH}
    hoist = _Hoister(types_of)
    seen = set()
    dyn = getattr(guard_set, "dynamic_dims", {})
    for g in sorted(guard_set, key=_order):
        d = dyn.get(g.source.name()) if g.kind == GuardKind.TENSOR_MATCH else None
        for p in _expr_parts(g, namer, g.source.name() if g.source else "", lambda s: s.name(), d):
            if p not in in_parts:
                in_parts.add(p)
                parts.append(p)
        s = hoist(g.source)
        body.extend(hoist.lines)
        hoist.lines.clear()
        for p in _expr_parts(g, namer, s, hoist, d, fast=True):
            body.extend(hoist.lines)
            hoist.lines.clear()
            if p not in seen:
                seen.add(p)
                match = _TENSOR_MATCH_CALL.match(p)
                note = f"  # {namer.values[match.group(1)]!r}" if match else ""
                body.append(f"if not ({p}): return False{note}")
    fixed = {
        "___G": fn.__globals__,
        "___closure": fn.__closure__,
        "___type": type,
        "___len": len,
        "___typed": typed_constant,  # Note [Guards: constants compared]
        "___copysign": math.copysign,
        "___list": list,
        "___dict_keys": _dict_keys,
        "___storage_id": _storage_id,
        "___device": torch.device,  # keys rendered by source.key_text
        "___is_grad_enabled": torch.is_grad_enabled,
        "___deterministic": torch._C._get_deterministic_algorithms,
        "___cublas_tf32": torch._C._get_cublas_allow_tf32,
        "___function_modes_on": dispatch_modes.function_modes_on,
        "___default_devices": dispatch_modes.default_devices,
        "___function_mode_at": dispatch_modes.function_mode_at,
        "___function_modes_called": dispatch_modes.function_modes_called,
        "___functorch_transform": torch._C._functorch.peek_interpreter_stack,
        "___kiln_config": _config,
        "___dispatch_keys": torch._C._dispatch_keys,
        "___untf": untf,  # Note [Guards: tensor subclasses with __torch_function__]
        "___dict_get": dict_get,
        "___tuple_item": tuple.__getitem__,  # TupleItemSource
        "___plain_attr": object.__getattribute__,  # PlainAttrSource, __dict__
        "___dict_key_at": dict_key_at,  # DictKeyAtSource
        "___weak_key_get": weak_key_get,  # WeakKeyGetSource
        "___torch_attr": torch_attr,  # TorchAttrSource
        "___proxied_dict": proxied_dict,  # ProxiedDictSource
        "___from_numpy": tensor_of_array,  # NumpyTensorSource
        "___iter_rest": iter_rest,  # IterRestSource
        "___iter_has": iter_has,  # IterHasSource
        "___partial_dict": partial_dict,  # PartialDictSource
        "___proxy_referent": proxy_referent,  # ProxyReferentSource
        "___flatten_spec": flatten_spec,  # FlattenSpecSource
        "___dict_iter_dict": dict_iter_dict,  # DictIterSource
        "___dict_iter_pos": dict_iter_pos,
        "___missing": MISSING,
        "___is_any_autocast_enabled": torch._C._is_any_autocast_enabled,
        "___autocast_settings": amp.settings,
        "___global_forward_hooks": torch.nn.modules.module._global_forward_hooks,
        "___global_forward_pre_hooks": torch.nn.modules.module._global_forward_pre_hooks,
        "___global_backward_hooks": torch.nn.modules.module._global_backward_hooks,
        "___global_backward_pre_hooks": torch.nn.modules.module._global_backward_pre_hooks,
    }
    closure_values = {**fixed, **(extra or {}), **namer.values}
    params = signature_text(fn.__code__)
    if dynamic_closure:
        # Note [Cache: closures made per call]: the function object comes first; its cells are
        # read from it on each call
        params = f"___fn, {params}" if params else "___fn"
        body.insert(0, "___closure = ___fn.__closure__")
        closure_values.pop("___closure")
    lines = "".join("        " + line + "\n" for stmt in body for line in stmt.splitlines())
    lines = lines or "        pass\n"
    source = (
        f"def guard({params}):\n    try:\n{lines}"
        "    except Exception:  # a failing access is a failing guard\n"
        "        return False\n    return True\n"
    )
    words = set(re.findall(r"\w+", source))  # (one scan: a guard may hold hundreds of names)
    used = [n for n in closure_values if n in words]
    maker_src = f"def ___make_guard({', '.join(used)}):\n" + "".join(
        "    " + line + "\n" for line in source.splitlines()
    )
    maker_src += "    return guard\n"
    ns = {"__builtins__": builtins}
    exec(compile(maker_src, f"<kiln guard {fn.__qualname__}>", "exec"), ns)
    guard = ns["___make_guard"](*(closure_values[n] for n in used))
    guard.__defaults__ = fn.__defaults__
    guard.__kwdefaults__ = fn.__kwdefaults__
    guard.source = source
    guard.parts = parts
    guard.closure_values = closure_values
    # the objects its identity guards hold weakly (Note [Cache: entries of objects that died])
    guard.weak_values = [v for v in namer.values.values() if type(v) is weakref.ref]
    guard.fn = fn
    guard.dynamic_closure = dynamic_closure
    if logs.enabled("guards"):
        logs.log("guards", "guards of %s:\n%s", fn.__qualname__, source)
    return guard_program.program_guard(guard)  # Note [Guards: a program evaluated in C]


def _namespace(guard, args, kwargs):
    """The guard's names bound for these arguments; raises TypeError when they do not bind."""
    fn = guard.fn
    closure = None
    if getattr(guard, "dynamic_closure", False):
        closure, args = args[0].__closure__, args[1:]
    bound = inspect.signature(fn, follow_wrapped=False).bind(*args, **kwargs)
    bound.apply_defaults()
    ns = dict(guard.closure_values)
    if closure is not None:
        ns["___closure"] = closure
    ns.update(bound.arguments)
    return ns


def eval_sources(guard, args, kwargs, names):
    """{source name: value} for these arguments (sources that cannot be read are left out)."""
    out = {}
    try:
        ns = _namespace(guard, args, kwargs)
    except TypeError:
        return out
    for name in names:
        try:
            out[name] = eval(name, {"__builtins__": builtins}, ns)
        except Exception:
            continue
    return out


def first_failure(guard, args, kwargs):
    """The first guard part that fails for these arguments (evaluated part by part)."""
    try:
        ns = _namespace(guard, args, kwargs)
    except TypeError as e:
        return f"arguments do not bind: {e}"
    for part in guard.parts:
        try:
            ok = eval(part, {"__builtins__": builtins}, ns)
        except Exception as e:  # a failing access is a failing guard
            return f"{part}  (raised {type(e).__name__}: {e})"
        if not ok:
            return _with_mismatch(part, ns)
    return None


_SHAPE_PART = re.compile(r"^(?P<t>.+)\.shape == (?P<sizes>\([0-9, ]*\))$")
_SIZE_PART = re.compile(r"^(?P<t>.+)\.size\(\)\[(?P<d>[0-9]+)\] == (?P<n>[0-9]+)$")


def _with_mismatch(part, ns):
    """A failed layout part with the dimension that differs, in the words torch.compile's
    recompile reasons use (`x.shape == (2, 3) (tensor 'x' size mismatch at index 0. expected
    2, actual 5)`); other parts as they are."""
    m = _SHAPE_PART.match(part) or _SIZE_PART.match(part)
    if m is None:
        return part
    name = m.group("t")
    try:
        actual = tuple(eval(f"{name}.shape", {"__builtins__": builtins}, ns))
    except Exception:
        return part
    if "sizes" in m.groupdict():
        expected = ast.literal_eval(m.group("sizes"))
        if len(expected) != len(actual):
            what = f"rank mismatch. expected {len(expected)}, actual {len(actual)}"
            return f"{part} (tensor {name!r} {what})"
        dims = [d for d, (e, a) in enumerate(zip(expected, actual)) if e != a]
        if not dims:
            return part
        d, want = dims[0], expected[dims[0]]
    else:
        d, want = int(m.group("d")), int(m.group("n"))
        if d >= len(actual):
            return part
    what = f"size mismatch at index {d}. expected {want}, actual {actual[d]}"
    return f"{part} (tensor {name!r} {what})"
