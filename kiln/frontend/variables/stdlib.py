"""The standard library that model code leans on, modelled: operator's getters, more of itertools,
copy, dict.fromkeys, lru_cache'd functions of constants, id().

Each entry of CALLS takes (tx, *args, **kwargs) of traced values and returns a traced value, as
the library function would (a TypeError Python raises for other arguments is a graph break).
"""

import ast
import collections
import copy
import functools
import itertools
import operator
import sys

import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource
from kiln.frontend.variables.base import VariableTracker, wrap_value
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dicts import (
    ConstDictVariable,
    check_fromkeys_count,
    check_iterable,
    hashable_key,
)
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import (
    _ITER_UNDO,
    BaseListVariable,
    DequeVariable,
    ListIteratorVariable,
    ListVariable,
    TupleVariable,
)
from kiln.frontend.variables.optim import CallSource
from kiln.frontend.variables.sets import SetVariable
from kiln.frontend.variables.torch_queries import no_active_exception


def _is_tensor(var):
    """A TensorVariable (by its example value: tensor.py imports this module's importers)."""
    return isinstance(getattr(var, "example", None), torch.Tensor)


def _const(var, what):
    if not var.is_python_constant():
        unimplemented(f"{what} is not a constant ({var})")
    return var.as_python_constant()


# --- operator.itemgetter / attrgetter / methodcaller --------------------------------------------
class OperatorGetterVariable(VariableTracker):
    """`operator.itemgetter(*items)` / `attrgetter(*names)` / `methodcaller(name, ...)` made while
    tracing: calling it reads the items / attributes / calls the method of its argument."""

    keeps_identity = True

    def __init__(self, cls, args, kwargs, **kw):
        super().__init__(**kw)
        self.cls = cls
        self.args = list(args)
        self.kwargs = dict(kwargs)

    def python_type(self):
        return self.cls

    def call_function(self, tx, args, kwargs):
        if len(args) != 1 or kwargs:
            unimplemented(f"{self.cls.__name__} object called with these arguments")
        obj = args[0]
        if self.cls is operator.methodcaller:
            name = _const(self.args[0], "methodcaller's method name")
            return obj.var_getattr(tx, name).call_function(tx, self.args[1:], self.kwargs)
        if self.cls is operator.itemgetter:
            got = [obj.call_method(tx, "__getitem__", [a], {}) for a in self.args]
        else:
            got = [_dotted(tx, obj, _const(a, "attrgetter's name")) for a in self.args]
        return got[0] if len(got) == 1 else TupleVariable(got)

    def reconstruct(self, cg):
        cg.load_object(self.cls, push_null=True)
        for a in [*self.args, *self.kwargs.values()]:
            cg.reconstruct(a)
        n = len(self.args) + len(self.kwargs)
        cg.extend(emit.call_kw(n, tuple(self.kwargs)) if self.kwargs else emit.call(n))


def _dotted(tx, obj, name):
    for part in name.split("."):
        obj = obj.var_getattr(tx, part)
    return obj


def _getter(cls):
    def make(tx, *args, **kwargs):
        if not args or (kwargs and cls is not operator.methodcaller):
            unimplemented(f"operator.{cls.__name__} with these arguments")
        return OperatorGetterVariable(cls, args, kwargs)

    return make


# --- itertools ------------------------------------------------------------------------------------
def _combinations(tx, iterable, r):
    items = iterable.unpack_var_sequence(tx)
    it = ListIteratorVariable(
        [TupleVariable(list(c)) for c in itertools.combinations(items, _const(r, "r"))]
    )
    it.kind = itertools.combinations  # Note [Iterators: itertools kinds]
    return it


def _permutations(tx, iterable, r=None):
    items = iterable.unpack_var_sequence(tx)
    n = None if r is None else _const(r, "r")
    it = ListIteratorVariable([TupleVariable(list(p)) for p in itertools.permutations(items, n)])
    it.kind = itertools.permutations
    return it


def _groupby(tx, iterable, key=None):
    """groupby over traced items whose keys are constants; each group a list iterator."""
    items = iterable.unpack_var_sequence(tx)
    none_key = key is None or (key.is_python_constant() and key.as_python_constant() is None)
    groups = []
    for item in items:
        k = item if none_key else key.call_function(tx, [item], {})
        kc = _const(k, "groupby key")
        if groups and groups[-1][0] == kc:
            groups[-1][2].append(item)
        else:
            groups.append((kc, k, [item]))
    return ListIteratorVariable(
        [TupleVariable([k, ListIteratorVariable(group)]) for _, k, group in groups]
    )


class CountVariable(ListIteratorVariable):
    """`itertools.count(start, step)` made in the frame: an endless iterator of numbers (its
    position is the iterator's index, so a graph break rolls it back like any iterator)."""

    def __init__(self, start, step, **kw):
        super().__init__((), **kw)
        self.start, self.step = start, step
        self.values = [start]  # (count adds step to the last value: `10, 12.5, 15.0` for 2.5)

    def python_type(self):
        return itertools.count

    def _value(self, k):
        """The k-th number, as count makes it: start itself, then repeated additions."""
        while len(self.values) <= k:
            self.values.append(self.values[-1] + self.step)
        return self.values[k]

    def next_item(self, tx=None):
        _ITER_UNDO.append((self, self.index))
        self.index += 1
        return ConstantVariable(self._value(self.index - 1))

    def unpack_var_sequence(self, tx):
        unimplemented("all items of an endless itertools.count")

    def reconstruct(self, cg):
        cg.load_object(itertools.count, push_null=True)
        cg.extend(emit.load_const(self._value(self.index)))
        cg.extend(emit.load_const(self.step))
        cg.extend(emit.call(2))


# Note [Stdlib: itertools.count inputs]
# An itertools.count from outside the frame (a global counter, a closure's) is shared with the
# caller: the numbers the trace takes from it are constants of the trace, read from its state, and
# the items taken are taken from the real one after the graph (`advance_iter`, as for other
# iterator inputs: Note [Iterators: inputs]). Its state (next number, step) has no attribute: it
# is read from its repr (`count(5)`, `count(2.5, 0.5)`), which a count's class cannot change,
# and the entry is guarded on that repr: each call that finds the counter elsewhere compiles
# again (the numbers are baked into the graph), up to the cache limit.
class InputCountVariable(CountVariable):
    """An itertools.count from outside the frame (Note [Stdlib: itertools.count inputs])."""

    def reconstruct(self, cg):
        self.source.reconstruct(cg)  # the real counter, advanced by the replay


def wrap_count_input(tx, value, source):
    """An itertools.count input, guarded on its state (Note [Stdlib: itertools.count inputs])."""
    text = repr(value)
    try:
        state = ast.literal_eval(text[len("count") :])
    except (ValueError, SyntaxError):
        unimplemented(f"an itertools.count input whose state is not plain numbers ({text})")
    start, step = state if type(state) is tuple else (state, 1)
    if not all(type(v) in (int, float) for v in (start, step)):
        unimplemented(f"an itertools.count input over non-numbers ({text})")
    tx.output.guards.add(GuardKind.TYPE_MATCH, source, itertools.count)
    tx.output.guards.add(GuardKind.CONSTANT_MATCH, CallSource(AttrSource(source, "__repr__")), text)
    return tx.output.side_effects.track_iterator(InputCountVariable(start, step, source=source))


def _count(tx, start=None, step=None):
    start = 0 if start is None else _const(start, "start")
    step = 1 if step is None else _const(step, "step")
    if not all(type(v) in (int, float) for v in (start, step)):
        unimplemented("itertools.count of non-numbers")
    return CountVariable(start, step)


# Note [Stdlib: itertools.tee]
# tee(iterable, n) made in the frame is n TeeVariables over one shared buffer: a tee that is
# ahead pulls the next item from the one real iterator (as Python's does, so a generator's code
# runs when the first tee asks, and the source is advanced only as far as the furthest tee),
# later tees read the buffer. The buffer's length is undone with the iterators' positions at a
# break (_ITER_UNDO). Rebuilding tees at a graph break (their shared state) is not modelled: the
# break takes the whole frame back to Python.
class _TeeBuffer:
    """The items the tees of one tee() call took from their source, in order."""

    def __init__(self, source):
        self.source = source
        self.items = []
        self.index = 0  # how many of `items` are valid (undone at a break)

    def item(self, tx, i):
        if i < self.index:
            return self.items[i]
        del self.items[self.index :]
        item = self.source.next_item(tx)
        if item is None:
            return None
        _ITER_UNDO.append((self, self.index))
        self.items.append(item)
        self.index += 1
        return item


class TeeVariable(ListIteratorVariable):
    """One iterator returned by itertools.tee (Note [Stdlib: itertools.tee])."""

    def __init__(self, buffer, **kw):
        super().__init__((), **kw)
        self.buffer = buffer

    def python_type(self):
        return _TEE_TYPE

    def next_item(self, tx=None):
        item = self.buffer.item(tx, self.index)
        if item is not None:
            _ITER_UNDO.append((self, self.index))
            self.index += 1
        return item

    def unpack_var_sequence(self, tx):
        out = []
        while (item := self.next_item(tx)) is not None:
            out.append(item)
        return out

    def reconstruct(self, cg):
        unimplemented("an itertools.tee iterator kept across a graph break")


_TEE_TYPE = type(itertools.tee(())[0])


def _tee(tx, iterable, n=None):
    count = 2 if n is None else _const(n, "tee's n")
    if type(count) is not int:
        unimplemented("itertools.tee with a non-int n")
    if count < 0:
        raise_observed(tx, ValueError, "n must be >= 0")
    source = ListIteratorVariable.over(tx, iterable)
    buffer = _TeeBuffer(source)
    return TupleVariable([TeeVariable(buffer) for _ in range(count)])


def _chain_from_iterable(tx, iterable):
    """`chain.from_iterable(seqs)`: chain(*seqs), reading each list as it goes (a list changed
    after the call and before its items are reached gives its new items, as in eager)."""
    from kiln.frontend.variables.live_iters import LazyIteratorVariable, lazy_sources_ok

    seqs = iterable.unpack_var_sequence(tx)
    if lazy_sources_ok(seqs):
        return LazyIteratorVariable(tx, itertools.chain, seqs, (0,))
    return ListIteratorVariable([i for seq in seqs for i in seq.unpack_var_sequence(tx)])


# --- copy -----------------------------------------------------------------------------------------
# Note [Stdlib: copy and deepcopy]
# copy.copy of a list / dict / set / deque made or read while tracing is a new container of the
# same items; of an immutable value (constants, tuples) the value itself, as Python returns it.
# copy.deepcopy copies containers recursively, keeping Python's memo (an object reached twice is
# copied once); a tensor that does not require grad is cloned (what Tensor.__deepcopy__ does for
# it: same values, a new storage); anything else (user objects, tensors requiring grad, whose copy
# is a new leaf) breaks.
def _copy(tx, obj):
    if obj.is_python_constant() and is_literal(obj.as_python_constant()):
        return obj
    if isinstance(obj, TupleVariable) and obj.tuple_cls is tuple:
        return obj
    return _shallow(obj, list(obj.items) if isinstance(obj, BaseListVariable) else None)


def _shallow(obj, items):
    if isinstance(obj, DequeVariable):
        return DequeVariable(items, maxlen=obj.maxlen)
    if type(obj) is ListVariable:
        return ListVariable(items)
    if isinstance(obj, ConstDictVariable) and obj.user_cls in _DICT_CLASSES:
        return ConstDictVariable(dict(obj.items), obj.user_cls, obj.default_factory)
    if isinstance(obj, SetVariable):
        return SetVariable(obj.values, frozen=obj.frozen)
    unimplemented(f"copy.copy of {obj}")


_DICT_CLASSES = (dict,)


def _deepcopy(tx, obj, memo=None):
    if memo is not None:
        unimplemented("copy.deepcopy with a memo argument")
    return _deep(tx, obj, {})


def _deep(tx, obj, memo):
    if id(obj) in memo:
        return memo[id(obj)]
    if obj.is_python_constant() and is_literal(obj.as_python_constant()):
        return obj
    if _is_tensor(obj):
        if obj.example.requires_grad:
            unimplemented("copy.deepcopy of a tensor that requires grad (a new leaf)")
        result = obj.call_method(tx, "clone", [], {})
    elif isinstance(obj, (ListVariable, TupleVariable)) and type(obj) in (
        ListVariable,
        TupleVariable,
    ):
        items = [_deep(tx, i, memo) for i in obj.items]
        if isinstance(obj, TupleVariable):
            if all(a is b for a, b in zip(items, obj.items)):
                return obj  # (Python returns the tuple itself when no item changed)
            result = TupleVariable(items, tuple_cls=obj.tuple_cls)
        else:
            result = ListVariable(items)
    elif isinstance(obj, ConstDictVariable) and obj.user_cls in _DICT_CLASSES:
        result = ConstDictVariable({k: _deep(tx, v, memo) for k, v in obj.items.items()})
    else:
        unimplemented(f"copy.deepcopy of {obj}")
    memo[id(obj)] = result
    return result


# --- dict.fromkeys --------------------------------------------------------------------------------
def _fromkeys(tx, iterable, value=None):
    value = ConstantVariable(None) if value is None else value
    keys = iterable.unpack_var_sequence(tx)
    return ConstDictVariable({hashable_key(_const(k, "dict key")): value for k in keys})


def _fromkeys_keywords(tx, args, kwargs):
    """OrderedDict.fromkeys's keyword arguments bound as positional ones, or its TypeError (the
    method itself, called with stand-in arguments, gives this Python's message)."""
    names = ("iterable", "value")
    try:
        collections.OrderedDict.fromkeys(*[()] * len(args), **dict.fromkeys(kwargs, ()))
    except TypeError as e:
        raise_observed(tx, TypeError, str(e))
    bound = list(args)
    for i, name in enumerate(names):
        if name in kwargs:
            if i != len(bound):  # given twice, or value without iterable: TypeErrors
                unimplemented("OrderedDict.fromkeys with these arguments")
            bound.append(kwargs[name])
    return bound, {}


class FromKeysVariable(VariableTracker):
    """`dict.fromkeys` looked up on dict (a classmethod)."""

    def __init__(self, cls, **kw):
        super().__init__(**kw)
        self.cls = cls

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(getattr(self.cls.fromkeys, name))
        return super().var_getattr(tx, name)

    def call_function(self, tx, args, kwargs):
        if kwargs and self.cls is collections.OrderedDict:  # (iterable, value=None): keywords too
            args, kwargs = _fromkeys_keywords(tx, args, kwargs)
        check_fromkeys_count(tx, args, kwargs)
        if not kwargs:
            check_iterable(tx, args[0])
        if kwargs or not 1 <= len(args) <= 2:
            unimplemented("dict.fromkeys with these arguments")
        d = _fromkeys(tx, *args)
        d.user_cls = self.cls
        return d

    def reconstruct(self, cg):
        cg.load_object(self.cls.fromkeys)


# Note [Stdlib: Python functions traced as user code]
# The standard library's modules are read as constants (their attributes unguarded: Note
# [Objects: hasattr on a module]), and a function read from one is opaque: its call breaks. A few
# are plain Python over the objects they are given and are traced like user code instead:
# functools.wraps (a partial of update_wrapper) and update_wrapper (attribute copies onto the
# wrapper: Note [Functions: the __dict__ of a function made in the frame]).
TRACED_FUNCTIONS = frozenset({functools.wraps, functools.update_wrapper})


# --- functools.lru_cache --------------------------------------------------------------------------
# Note [Stdlib: lru_cache'd functions]
# A call of an lru_cache'd function with literal arguments runs the real function while tracing
# (filling its cache as the first eager call would) and folds a literal result: the function is
# taken as pure, as lru_cache assumes (a later eager call would not run its body either). A call
# without arguments of a function read from a source may return any object: every call returns
# that same cached object, so it is wrapped as read from the source `f()` (optim.CallSource: the
# guard calls it again, and a set is guarded by its contents like any set input,
# `torch.overrides.get_default_nowrap_functions()`). Other arguments, or another result that is
# not a literal, break.
def call_lru_cached(tx, var, args, kwargs):
    """`f(*args)` of a functools.lru_cache wrapper `var` (an object read from a source)."""
    values = [*args, *kwargs.values()]
    if not all(v.is_python_constant() and is_literal(v.as_python_constant()) for v in values):
        unimplemented("an lru_cache'd function called with non-literal arguments")
    if var.source is not None:
        tx.output.guards.add(GuardKind.ID_MATCH, var.source, var.value)
    cargs = [a.as_python_constant() for a in args]
    ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
    try:
        result = var.value(*cargs, **ckw)
    except Exception as e:
        unimplemented(f"an lru_cache'd function raised {type(e).__name__} while tracing")
    if is_literal(result):
        return ConstantVariable(result)
    if var.source is None or args or kwargs:
        unimplemented("an lru_cache'd function returned a non-literal value")
    return wrap_value(tx, result, CallSource(var.source))


def is_lru_cached(value):
    return isinstance(value, functools._lru_cache_wrapper)


# --- id() -----------------------------------------------------------------------------------------
# Note [Stdlib: id()]
# id(obj) of an object that exists before the frame is a constant once the object itself is pinned:
# an ID_MATCH guard on its source (the next call with another object recompiles). Classes and
# functions kiln holds as constants are the objects themselves; a list, dict or deque read from a
# source is the real container it stands for. An object made while tracing gets
# a new id on every call, and a tensor input is not pinned by identity: those break.
# A tensor read from a source (an input, a module's plain tensor attribute) is the real tensor
# given as the graph's input: id() of it pins it by an ID_MATCH guard too (held weakly), as
# torch.compile does, so another tensor there recompiles. A tensor the graph computes breaks.
def _id(tx, obj):
    value = getattr(obj, "value", getattr(obj, "fn", _NONE))
    if value is _NONE and obj.source is not None:  # a list/dict/deque read from a source
        tracked = tx.output.side_effects.containers.values()
        value = next((real for real, var in tracked if var is obj), _NONE)
    if _is_tensor(obj):
        value = _graph_input_tensor(tx, obj) if obj.source is not None else _NONE
    if value is _NONE:
        unimplemented(f"id() of {obj}")
    if obj.source is not None:
        tx.output.guards.add(GuardKind.ID_MATCH, obj.source, value)
        return ConstantVariable(id(value))
    if isinstance(value, type) or callable(value) and hasattr(value, "__code__"):
        return ConstantVariable(id(value))
    unimplemented(f"id() of {obj} (made or computed while tracing)")


def _graph_input_tensor(tx, var):
    """The real tensor a tensor variable with a source stands for (a graph input), else _NONE."""
    proxy = getattr(var, "proxy", None)
    return next((v for _, v, n in tx.output.graph_inputs if n is proxy and v is not None), _NONE)


_NONE = object()


def _exc_info(tx):
    """sys.exc_info() outside any handled exception (Note [Torch: no active exception])."""
    if tx.current_exception() is not None or not no_active_exception():
        unimplemented("sys.exc_info() while an exception is handled (its traceback)")
    tx.output.guards.add(GuardKind.STATE_QUERY, None, (no_active_exception, True))
    return TupleVariable([ConstantVariable(None)] * 3)


def _count_elements_py(mapping, iterable):
    """collections._count_elements (C) as Python: what Counter(iterable) and .update run."""
    get = mapping.get
    for elem in iterable:
        mapping[elem] = get(elem, 0) + 1


def _count_elements(tx, mapping, iterable):
    """Counter's C helper, traced as its Python equivalent (the mapping's own get/setitem)."""
    from kiln.frontend.variables.functions import inline_call

    return inline_call(tx, _count_elements_py, [mapping, iterable], {}, None)


CALLS = {
    sys.exc_info: _exc_info,
    operator.itemgetter: _getter(operator.itemgetter),
    operator.attrgetter: _getter(operator.attrgetter),
    operator.methodcaller: _getter(operator.methodcaller),
    itertools.combinations: _combinations,
    itertools.permutations: _permutations,
    itertools.groupby: _groupby,
    itertools.count: _count,
    itertools.tee: _tee,
    id: _id,
}
if hasattr(collections, "_count_elements"):  # (the C helper; absent, Counter is Python already)
    CALLS[collections._count_elements] = _count_elements
FOLDED = {copy.copy: _copy, copy.deepcopy: _deepcopy}
CLASS_METHODS = {(itertools.chain, "from_iterable"): _chain_from_iterable}


def class_method(cls, name):
    """A variable for `cls.name` when stdlib models it (dict.fromkeys ...), else None."""
    if name == "fromkeys" and cls in (dict, collections.OrderedDict):
        return FromKeysVariable(cls)
    fn = CLASS_METHODS.get((cls, name))
    if fn is None:
        return None
    return _Call(fn, getattr(cls, name))


class _Call(VariableTracker):
    """A modelled library callable held by its handler."""

    def __init__(self, handler, real, **kw):
        super().__init__(**kw)
        self.handler = handler
        self.real = real

    def call_function(self, tx, args, kwargs):
        return self.handler(tx, *args, **kwargs)

    def reconstruct(self, cg):
        cg.load_object(self.real)


# Note [Stdlib: locals()]
# locals() in a function returns a new dict of the frame's bound locals, cell contents and free
# variables. The traced frame's values are kiln's symbolic locals (the real frame has not stored
# them), so locals() must be answered while tracing: calling it at a graph break would read the
# transformed frame, where those names are not yet bound (eval("x < y", locals()) then raised
# NameError). Unbound names are left out, as Python does.
def frame_locals(tx):
    """locals() of the frame `tx` traces: a dict of its bound names."""
    code = tx.code
    items = {}
    for name in dict.fromkeys([*code.co_varnames, *code.co_cellvars]):
        v = tx.symbolic_locals.get(name)
        if v is None or type(v).__name__ == "DeletedVariable":
            continue
        items[name] = tx.get_local(name)
    for name in code.co_freevars:
        if name not in tx.closure:
            unimplemented(f"locals(): free variable {name!r} kiln does not hold")
        items[name] = tx.load_closure_var(name)
    return ConstDictVariable(items)
