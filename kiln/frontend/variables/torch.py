"""torch functions and classes as callables, and the one path that puts a tensor op in the graph.

Note [Tensors: meta execution]
Every op recorded in the graph is also run on meta tensors (same shape, stride, dtype, no data) to
learn its result's metadata. Factory calls run with device "meta" and remember the real device.
An op whose meta run raises is not guessed: it is `unimplemented`, so the frame runs in Python and
eager PyTorch raises (or computes) exactly what it would have.
"""

import contextlib
import functools
import operator
import types

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from kiln.exc import unimplemented
from kiln.frontend.dispatch_modes import modes_traced
from kiln.frontend.markers import is_disallowed_in_graph
from kiln.frontend.variables import autocast, ctx_managers, optim, torch_queries, unspec_float
from kiln.frontend.variables.base import PythonValueVariable, VariableTracker, wrap_constant_like
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.ctx_managers import GradModeVariable, record_grad_switch
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.functions import inline_call
from kiln.frontend.variables.lists import (
    BaseListVariable,
    ListVariable,
    SizeVariable,
    TupleVariable,
)
from kiln.frontend.variables.misc import ConstantObjectVariable
from kiln.frontend.variables.nn_module import build_module, buildable_module
from kiln.frontend.variables.sym import SliceVariable, SymNodeVariable
from kiln.frontend.variables.tensor_hooks import has_pending_hooks
from kiln.frontend.variables.unspec_float import SymFloatVariable
from kiln.symbolic import custom_op_fakes, shape_env
from kiln.symbolic.fake import ProxyTensor, is_fake

_META = torch.device("meta")

# Results of these (non-tensor) are metadata and may be trusted from a meta run.
_METADATA_RESULTS = {
    "is_contiguous",
    "is_floating_point",
    "is_complex",
    "numel",
    "dim",
    "ndimension",
    "nelement",
    "element_size",
    "get_device",
    "is_signed",
    "size",
    "stride",
    "storage_offset",
    "is_tensor",
    "is_nonzero_meta_never",
}

# Functions whose result never depends on tensor data nor goes into the graph.
_TRACE_TIME = {torch.is_tensor, torch.is_floating_point, torch.is_complex, torch.numel}

# Functions that read or change global state, or return data; never put in a graph.
_BANNED = {
    torch.manual_seed,
    torch.seed,
    torch.set_default_dtype,
    torch.set_default_device,
    torch.save,
    torch.load,
}


# torch functions answered first by another family's module (torch.from_numpy -> numpy_vars),
# registered by it: fn(tx, torch_fn, args, kwargs) -> a tracker, or None to go on as usual.
_FUNCTION_HOOKS = {}
# the frame pushing or popping torch's function-mode stack (function_modes.STACK_CHANGES)
_MODE_STACK_CHANGES = (
    torch._C._pop_torch_function_stack,
    torch._C._push_on_torch_function_stack,
    torch.overrides._pop_mode,
    torch.overrides._push_mode,
    torch.set_default_device,
)


def register_function(torch_fn, fn):
    """Calls of `torch_fn` are first offered to fn."""
    _FUNCTION_HOOKS[torch_fn] = fn


def has_function_hook(value):
    """Whether calls of `value` are offered to a function registered for it (a torch callable
    kiln models, C methods of torch classes among them: `torch.Tensor._make_subclass`)."""
    try:
        return value in _FUNCTION_HOOKS
    except TypeError:  # (unhashable)
        return False


# `C(*args)` of a plain subclass of Tensor (its variable, or None), registered by torch_function.py
# (Note [Tensors: constructing a plain subclass])
_SUBCLASS_CONSTRUCTORS = []


def register_subclass_constructor(fn):
    """Calls of torch.Tensor subclasses are offered to fn(tx, class variable, args, kwargs)."""
    _SUBCLASS_CONSTRUCTORS.append(fn)


# the dispatch of calls with a value of a plain subclass with __torch_function__, registered by
# torch_function.py (Note [Tensors: subclasses with __torch_function__])
_TORCH_FUNCTION_DISPATCH = []


def register_torch_function_dispatch(fn, operator_fn, object_fn):
    """fn(tx, ("function", torch_fn), args, kwargs) answers torch calls on such values, and
    operator_fn(tx, op, a, b) their binary operators and comparisons; object_fn(tx, torch_fn,
    args, kwargs) torch calls with an object (no tensor) whose class has __torch_function__, or
    None when there is none."""
    _TORCH_FUNCTION_DISPATCH[:] = [fn, operator_fn, object_fn]


def torch_function_operator(tx, op, a, b=None):
    """`a <op> b` (or `<op> a`) where an operand is a value of a plain subclass with
    __torch_function__."""
    return _TORCH_FUNCTION_DISPATCH[1](tx, op, a, b)


def torch_function_involved(values):
    """Whether a value (or an item of a list/tuple of them) is a traced tensor of a plain
    subclass with __torch_function__ (its variable has `torch_function_class`)."""
    items = list(values)
    while items:
        v = items.pop()
        if isinstance(v, BaseListVariable):
            items.extend(v.items)
        elif getattr(v, "torch_function_class", None) is not None:
            return True
    return False


@functools.cache
def _overridable():
    """The torch functions that call __torch_function__, and those that never do."""
    funcs = {f for fs in torch.overrides.get_overridable_functions().values() for f in fs}
    return funcs, set(torch.overrides.get_ignored_functions())


def _call_torch(tx):
    """`call(fn, args)`: a torch function called from traced code (for optim's rewrites)."""
    return lambda fn, args: TorchVariable(fn).call_function(tx, list(args), {})


def _device_of(value):
    try:
        return torch.device(value)
    except (TypeError, RuntimeError):
        return None


def _sequence_builder(typ):
    """How to rebuild a traced sequence argument of type typ from an iterable of its items:
    a namedtuple takes its fields positionally; torch.Size (whose items may be size nodes) and
    other subclasses become a plain tuple or list."""
    if typ in (tuple, list):
        return typ
    if issubclass(typ, tuple) and hasattr(typ, "_fields"):
        return lambda items: typ(*items)
    return list if issubclass(typ, list) else tuple


class _Unpack:
    """Splits traced arguments into FX arguments and meta arguments."""

    def __init__(self, tx):
        self.tx = tx
        self.devices = []
        self.has_tensor = False
        self.symbolic = False  # a symbolic size is among the arguments

    def __call__(self, v):
        from kiln.frontend.variables.tensor import TensorVariable

        if isinstance(v, TensorVariable):
            if getattr(v, "data_replaced", False):  # Note [Tensors: attributes stored in the frame]
                unimplemented("an op on a tensor whose .data was assigned while grads flow")
            self.has_tensor = True
            self.devices.append(v.device)
            return v.proxy, v.example
        if isinstance(v, SymNodeVariable):
            # Note [Shapes: SymNodeVariable]: the size node in the graph, a SymInt in the fake run
            self.symbolic = True
            return v.proxy, shape_env.to_torch(v.value)
        if isinstance(v, SliceVariable):
            self.symbolic = True
            return v.fx_and_value()
        if isinstance(v, SymFloatVariable):
            return v.proxy, v.value  # Note [Shapes: unspecialised floats]
        if hasattr(v, "op_argument"):  # (a float read by `.item()`: Note [Shapes: item() ...])
            return v.op_argument()
        if isinstance(v, ConstantVariable):
            val = v.value
            if isinstance(val, slice):
                return val, val
            if isinstance(val, torch.device):
                self.devices.append(val)
                return val, _META
            return val, val
        if isinstance(v, BaseListVariable):
            typ = v.python_type()
            if typ is range:  # (a range's items are ints: the range itself)
                r = v.as_python_constant()
                return r, r
            pairs = [self(i) for i in v.items]
            build = _sequence_builder(typ)
            return build(p[0] for p in pairs), build(p[1] for p in pairs)
        if isinstance(v, ConstDictVariable):
            pairs = {k: self(i) for k, i in v.items.items()}
            return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
        if v.is_python_constant() and is_literal(v.as_python_constant()):
            c = v.as_python_constant()
            return c, c
        c = v.as_python_constant() if v.is_python_constant() else None
        dtype = _DTYPE_OF_PYTHON_TYPE.get(c) if isinstance(c, type) else None
        if dtype is not None:  # `t.to(float)`: torch's argument parser reads the type as a dtype
            return dtype, dtype
        unimplemented(f"argument {v} of a tensor op")


_DTYPE_OF_PYTHON_TYPE = {
    bool: torch.bool,
    int: torch.int64,
    float: torch.float64,
    complex: torch.complex128,
}


_META_FALLBACKS = []  # (tx, target, args, kwargs) -> a variable, or None
_SET_HOOKS_TRACING = getattr(torch._C._autograd, "_saved_tensors_hooks_set_tracing", None)


@contextlib.contextmanager
def _quiet_saved_tensor_hooks():
    """The user's saved-tensor hooks do not run on an op's meta example (eager runs them once,
    when the op runs; the graph's run does that)."""
    if _SET_HOOKS_TRACING is None:
        yield
        return
    prev = _SET_HOOKS_TRACING(True)
    try:
        yield
    finally:
        _SET_HOOKS_TRACING(prev)


def register_meta_fallback(fn):
    """fn traces an op whose meta run raised another way (or returns None)."""
    _META_FALLBACKS.append(fn)


def call_tensor_op(tx, kind, target, args, kwargs, *, what=None):
    """Record `target(*args, **kwargs)` in the graph (kind call_function/call_method), run on meta."""
    what = what or (target if isinstance(target, str) else getattr(target, "__name__", str(target)))
    tensor_cls = _tensor_cls()
    has_tensor = any(  # a tensor, or a list of them (the _foreach_* ops)
        isinstance(a, tensor_cls)
        or (isinstance(a, BaseListVariable) and any(isinstance(i, tensor_cls) for i in a.items))
        for a in [*args, *kwargs.values()]
    )
    if modes_traced(tx):  # Note [Frames: tracing a user's torch function modes]
        from kiln.frontend.variables import function_modes

        if function_modes.active(tx):
            unimplemented(f"{what} under a torch function mode (not traced through the mode)")
    if torch_function_involved([*args, *kwargs.values()]):
        # (every such call goes through its __torch_function__ first, and then on plain values)
        unimplemented(
            f"{what} on a tensor subclass with __torch_function__ (not traced through it)"
        )
    rg = kwargs.get("requires_grad")
    if rg is not None and (not rg.is_python_constant() or rg.as_python_constant()):
        # Note [Torch: factories with requires_grad=True]
        # `torch.ones(2, requires_grad=True)` makes a new leaf that wants a gradient of its own.
        # Inside a graph it is an intermediate: an AOT plan whose inputs need no grad runs as
        # inference (the leaf came back not requiring grad), and with inputs that do, the leaf
        # is no input of the compiled node, so no gradient could reach it. Made eagerly, it is
        # the user's leaf (torch.compile breaks the graph there too).
        unimplemented(f"{what} with requires_grad=True (a new leaf) inside the compiled frame")
    args, kwargs = unspec_float.settle_args(target, args, kwargs, has_tensor)
    if _mutates(target, kwargs) and any(
        getattr(a, "wrapper_subclass", False) for a in [*args, *kwargs.values()]
    ):  # Note [Tensors: wrapper subclass inputs]
        unimplemented(f"{what} writes into a tensor subclass value")
    unpack = _Unpack(tx)
    pairs = [unpack(a) for a in args]
    kw_pairs = {k: unpack(v) for k, v in kwargs.items()}
    node_args = tuple(p[0] for p in pairs)
    meta_args = [p[1] for p in pairs]
    node_kwargs = {k: p[0] for k, p in kw_pairs.items()}
    meta_kwargs = {k: p[1] for k, p in kw_pairs.items()}
    # Note [Tensors: meta execution]: explicit devices become meta, and the real one is kept.
    explicit_device = None
    if "device" in meta_kwargs:
        explicit_device = _device_of(node_kwargs["device"])  # the real one (meta args have meta)
        meta_kwargs["device"] = _META
    if kind == "call_method" and what == "to":
        for i, a in enumerate(meta_args[1:], 1):
            if isinstance(a, str) and _device_of(a) is not None:
                explicit_device = _device_of(a)
                meta_args[i] = _META
            elif a is _META:
                explicit_device = unpack.devices[-1]
    if kind == "call_method" and what in ("cuda", "cpu", "numpy", "tolist", "item", "data_ptr"):
        unimplemented(f"Tensor.{what}() is not traced")
    ctx = torch.device("meta") if not unpack.has_tensor else contextlib.nullcontext()

    def run(margs, mkwargs):
        if kind == "call_method":
            return getattr(margs[0], target)(*margs[1:], **mkwargs)
        return custom_op_fakes.run_on_meta(target, margs, mkwargs)

    out_shapes = _tensor_shapes(meta_kwargs.get("out"))
    try:
        with ctx, _quiet_saved_tensor_hooks():
            if _mutates(target, kwargs):
                result = run(meta_args, meta_kwargs)
            else:  # Note [Autocast: meta examples]
                result = autocast.run_under_autocast(run, meta_args, meta_kwargs, unpack.devices)
    except Exception as e:
        for fallback in _META_FALLBACKS:  # Note [Torch: foreach ops one tensor at a time]
            done = fallback(tx, target, args, kwargs)
            if done is not None:
                return done
        unimplemented(f"{what} on meta tensors raised {type(e).__name__}: {e}")
    if explicit_device is not None:
        device = explicit_device
    elif unpack.devices:
        device = unpack.devices[0]
    else:
        if "default_device_set" in tx.output.__dict__:  # Note [Frames: set_default_device ...]
            unimplemented(f"{what} without a device after torch.set_default_device in the frame")
        device = torch.get_default_device()
    if device.type == "meta" and not any(d.type == "meta" for d in unpack.devices):
        # never let the meta device of the trace leak into the program (a safety net)
        unimplemented(f"{what}: could not determine the device of its result")
    if result is None and out_shapes and out_shapes == _tensor_shapes(meta_kwargs["out"]):
        # Note [Torch: out= ops that return None]
        # `torch.unbind_copy(x, out=(a, b, c))` writes the tensors of `out` in place (their
        # shapes unchanged, checked on the meta run) and returns None, as eager does: the node
        # is recorded for its writes (the graph's inputs written are found by their versions).
        tx.output.create_node(kind, target, node_args, node_kwargs)
        return ConstantVariable(None)
    if result is None and custom_op_fakes.returns_nothing_by_schema(target) is not None:
        # Note [Custom ops: results that follow from the schema]
        tx.output.create_node(kind, target, node_args, node_kwargs)
        return ConstantVariable(None)
    if not _contains_tensor(result):
        name = what if isinstance(what, str) else ""
        if name in _METADATA_RESULTS and is_literal(result):
            return ConstantVariable(result)
        if name == "dim_order" and is_literal(result) and _static_strides(meta_args[0]):
            return ConstantVariable(result)  # (an order of static strides: theirs, guarded)
        if isinstance(target, types.FunctionType) and vars(target).get("_kiln_nonstrict_body"):
            constants = _constant_tree(result)
            if constants is not None:  # Note [nonstrict_trace: one opaque call over flattened ...]
                node = tx.output.create_node(kind, target, node_args, node_kwargs)
                node.meta["example_value"] = result
                return constants
        unimplemented(f"{what} returned a non-tensor value ({type(result).__name__})")
    # Note [Tensors: in-place results]; an op that gave back its meta argument otherwise (`.to()`
    # of its own dtype, `.contiguous()`) may return its input itself: remembered for `is`
    given_back = _mutated_input(result, args, meta_args, kwargs, meta_kwargs)
    mutated = given_back if _mutates(target, kwargs) else None
    if tx.output.fake_inputs or unpack.symbolic:
        result = _as_fakes(result, device)
    node = tx.output.create_node(kind, target, node_args, node_kwargs)
    if mutated is not None:
        return mutated  # Note [Tensors: in-place results]
    var = wrap_tensor_result(tx, node, result, device)
    if given_back is not None:
        var.may_be = given_back  # (identity with it unknown: Note [Operators: tensor identity])
    return var


def _constant_tree(value):
    """A literal, or a tuple or list of them (nested), as traced constants; else None."""
    if type(value) in (tuple, list):
        items = [_constant_tree(v) for v in value]
        if any(i is None for i in items):
            return None
        return TupleVariable(items) if type(value) is tuple else ListVariable(items)
    return ConstantVariable(value) if is_literal(value) else None


_INPLACE_NAMES = ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow")
_INPLACE_NAMES += ("and", "or", "xor", "lshift", "rshift")
_INPLACE_OPERATORS = frozenset(getattr(operator, f"i{n}") for n in _INPLACE_NAMES)
INPLACE_DUNDERS = frozenset(f"__i{n}__" for n in _INPLACE_NAMES)


def _mutates(target, kwargs):
    """Whether the op writes into a tensor argument: `x.add_()`, `out=`, `x += 1`.

    Only these may return a mutated input (Note [Tensors: in-place results]). An op that merely
    returns its input unchanged (`y.float()` on a float32 meta example, `.to()`, `.contiguous()`)
    is no mutation: its meta example may have the wrong dtype (an op traced under autocast runs
    on meta tensors, which autocast does not cast), so the identity of the meta result is no proof.
    """
    if "out" in kwargs or target in _INPLACE_OPERATORS:
        return True
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if not isinstance(name, str):
        return False
    return name in INPLACE_DUNDERS or (name.endswith("_") and not name.endswith("__"))


def _mutated_input(result, args, meta_args, kwargs, meta_kwargs):
    """The traced tensor an in-place op returned (its own meta tensor came back), else None.

    Note [Tensors: in-place results]
    `x.add_(1)`, `torch.add(a, b, out=x)`, `x += 1` return the very tensor they mutated, so the
    result must be the same TensorVariable (`y is x` holds, and a later `y` is `x`'s node). The
    meta run tells which: an in-place op on meta tensors returns its meta argument itself.
    """
    from kiln.frontend.variables.tensor import TensorVariable

    if not isinstance(result, torch.Tensor):
        return None
    pairs = [*zip(args, meta_args), *((kwargs[k], meta_kwargs[k]) for k in kwargs)]
    for var, meta in pairs:
        if isinstance(var, TensorVariable) and meta is result:
            return var
    return None


def _as_fakes(result, device):
    """Tensor results of a frame with symbolic sizes as fakes on the real device.

    Note [Shapes: factories]: a factory given a SymInt (`torch.zeros(b, 3)`, `torch.arange(T)`)
    runs on meta and gives a plain meta tensor with symbolic sizes; every tensor of such a frame is
    made a fake (kiln.symbolic.fake.ProxyTensor) so that later ops see symbolic sizes through
    their shape rules.
    """
    if isinstance(result, (tuple, list)):
        return type(result)(_as_fakes(r, device) for r in result)
    if not isinstance(result, torch.Tensor) or is_fake(result) or result.layout != torch.strided:
        return result
    if is_traceable_wrapper_subclass(result):  # its inner tensors are fakes already
        return result
    sizes = [shape_env.from_torch(v) for v in result.shape]
    strides = [shape_env.from_torch(v) for v in result.stride()]
    offset = shape_env.from_torch(result.storage_offset())
    meta = torch.empty_strided(
        [shape_env.hint_of(v) for v in sizes],
        [shape_env.hint_of(v) for v in strides],
        dtype=result.dtype,
        device="meta",
    )
    symbolic = any(isinstance(v, shape_env.SymNode) for v in (*sizes, *strides, offset))
    if not symbolic:
        return ProxyTensor(meta, device, None, result.requires_grad)
    return ProxyTensor(meta, device, None, result.requires_grad, sizes, strides, offset)


def _static_strides(t):
    """Whether a meta example's strides are all plain ints."""
    return isinstance(t, torch.Tensor) and all(type(s) is int for s in t.stride())


def _tensor_shapes(out):
    """The shapes of the tensors of an `out=` tensor, tuple or list (None for anything else)."""
    if isinstance(out, torch.Tensor):
        return [tuple(out.shape)]  # (a custom op's `Tensor(a!) out` that returns nothing)
    if not isinstance(out, (tuple, list)) or not out:
        return None
    if not all(isinstance(t, torch.Tensor) for t in out):
        return None
    return [tuple(t.shape) for t in out]


def _contains_tensor(x):
    if isinstance(x, torch.Tensor):
        return True
    if isinstance(x, (tuple, list)):
        return any(_contains_tensor(i) for i in x)
    return False


def wrap_tensor_result(tx, node, result, device):
    """Wrap a meta result (tensor, or tuple/list of them) of `node`."""
    from kiln.frontend.variables.tensor import tensor_variable

    if isinstance(result, torch.Tensor):
        node.meta["example_value"] = result
        return tensor_variable(node, result, device)
    if isinstance(result, (tuple, list)):
        node.meta["example_value"] = result
        items = []
        for i, r in enumerate(result):
            if isinstance(r, torch.Tensor):
                item = tx.output.create_node("call_function", operator.getitem, (node, i), {})
                item.meta["example_value"] = r
                items.append(tensor_variable(item, r, device))
            elif is_literal(r):
                items.append(ConstantVariable(r))
            elif isinstance(r, torch.SymInt):  # (a size a nonstrict_trace body returned)
                item = tx.output.create_node("call_function", operator.getitem, (node, i), {})
                items.append(SymNodeVariable.create(tx, item, r))
            else:
                unimplemented(f"op result item of type {type(r).__name__}")
        if isinstance(result, list):
            return ListVariable(items)
        return TupleVariable(items, tuple_cls=type(result))
    unimplemented(f"op result of type {type(result).__name__}")


def _returns_tensor(tx, fn, args, kwargs):
    """Whether a torch Python function returns a tensor here (a meta run, nothing recorded)."""
    unpack = _Unpack(tx)
    try:
        meta_args = [unpack(a)[1] for a in args]
        meta_kwargs = {k: unpack(v)[1] for k, v in kwargs.items()}
    except Exception:
        return True  # arguments only an inlined trace understands: decided by call_tensor_op
    ctx = torch.device("meta") if not unpack.has_tensor else contextlib.nullcontext()
    try:
        with ctx:
            return _contains_tensor(fn(*meta_args, **meta_kwargs))
    except Exception:
        return True


# torch Python functions taking no tensor that kiln traces (argument canonicalisation helpers).
_TRACEABLE_HELPER_MODULES = (
    "torch.nn.functional",
    "torch.nn.modules",
    "torch.functional",
    "torch.backends.mha",
)

_STATEFUL_PREFIXES = (
    "set_",
    "_set",
    "use_",
    "manual_seed",
    "seed",
    "initial_seed",
    "empty_cache",
    "synchronize",
    "init_",
    "_init",
    "load",
    "save",
)


def _resize():
    from kiln.frontend.variables import resize

    return resize


def _tensor_cls():
    from kiln.frontend.variables.tensor import TensorVariable

    return TensorVariable


# Queries answered while tracing: (module, name) -> value. kiln never scripts nor traces with jit.
_FOLDED = {
    ("torch._jit_internal", "is_scripting"): False,
    ("torch.jit._trace", "is_tracing"): False,
    ("torch.compiler", "is_exporting"): False,
}


# Knob reads folded while tracing when their arguments are constants: torch's killswitches,
# constant for a process (OSS torch returns the default; torch.compile folds them alike)
_KNOB_READS = {
    ("torch._utils_internal", "justknobs_check"),
    ("torch._utils_internal", "justknobs_getval_int"),
}


# `has_torch_function*(args)`: True only for tensor subclasses / objects with __torch_function__.
_HAS_TORCH_FUNCTION = {
    torch._C._has_torch_function,
    torch._C._has_torch_function_unary,
    torch._C._has_torch_function_variadic,
}


def _has_torch_function(tx, args):
    """Fold `has_torch_function(...)` over traced values; None when it cannot be known."""
    items = list(args)
    while items:
        v = items.pop()
        if isinstance(v, BaseListVariable):
            items.extend(v.items)
        elif isinstance(v, _tensor_cls()):
            if v.python_type() not in (torch.Tensor, torch.nn.Parameter):
                return None
        elif not (isinstance(v, VariableTracker) and v.is_python_constant()):
            return None  # a user object might define __torch_function__
    return False


# Note [Torch: profilers in a with]
# `with torch.profiler.profile():` (or torch.autograd.profiler.profile) inside a compiled frame is
# entered and left as nothing, as torch.compile does: the block's ops are traced into the graph
# around it, and the compiled graph's own profiler range stands for them. Only the plain form is
# modelled: the profiler object is not bound (`with profile() as p` would let code read what it
# recorded), and no callback the profiler would call on exit (`on_trace_ready`, a `schedule`,
# trace observers) is given; every argument is a constant flag. Other forms stay a graph break,
# and Python runs the profiler: its construction, its with statement and its __exit__ break with
# one reason (ctx_managers.untraced_reason).
_PROFILERS = ctx_managers.PROFILERS
_PROFILER_CALLBACKS = frozenset(
    ("schedule", "on_trace_ready", "execution_trace_observer", "custom_trace_id_callback")
)


def _ignorable_profiler(tx, args, kwargs):
    """Whether `profile(*args, **kwargs)` here is `with profile(<constant flags>):` with no `as`
    target (Note [Torch: profilers in a with])."""
    if set(kwargs) & _PROFILER_CALLBACKS:
        return False
    if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        return False
    ahead = tx.instructions[tx.ip : tx.ip + 2]
    return [i.opname for i in ahead] == ["BEFORE_WITH", "POP_TOP"]


def _qualified(fn):
    """(module, name) of a function, recognised by name (kiln never touches torch.jit itself)."""
    return getattr(fn, "__module__", None), getattr(fn, "__name__", None)


def _is_compiling_query(fn):
    """torch.compiler.is_compiling / is_dynamo_compiling, torch._utils.is_compiling (without
    importing torch._dynamo)."""
    name = getattr(fn, "__name__", "")
    mod = getattr(fn, "__module__", "") or ""
    return name in ("is_compiling", "is_dynamo_compiling") and (
        mod.startswith("torch.compiler") or mod.startswith("torch._dynamo") or mod == "torch._utils"
    )


class TorchVariable(PythonValueVariable):
    """A function or class from torch (torch.sin, F.relu, torch.Tensor ...), called into the graph."""

    def var_getattr(self, tx, name):
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unimplemented(f"{self.value} has no attribute {name!r}")
        return wrap_constant_like(tx, attr)

    def call_function(self, tx, args, kwargs):
        fn = self.value
        if is_disallowed_in_graph(fn):
            name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
            unimplemented(f"call to {name}, kept out of graphs by disallow_in_graph")
        if modes_traced(tx) or fn in _MODE_STACK_CHANGES:  # Note [Frames: tracing a user's ...]
            from kiln.frontend.variables import function_modes

            done = function_modes.call_function(tx, fn, args, kwargs)
            if done is not None:
                return done
        if _TORCH_FUNCTION_DISPATCH and torch_function_involved([*args, *kwargs.values()]):
            overridable, ignored = _overridable()
            if fn in overridable:
                return _TORCH_FUNCTION_DISPATCH[0](tx, ("function", fn), args, kwargs)
            if fn not in ignored:
                name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
                unimplemented(f"{name} on a tensor subclass with __torch_function__")
            if isinstance(fn, types.FunctionType):  # (F.sigmoid: its body calls x.sigmoid())
                return inline_call(tx, fn, args, kwargs, None)
        if _TORCH_FUNCTION_DISPATCH:
            done = _TORCH_FUNCTION_DISPATCH[2](tx, fn, args, kwargs)
            if done is not None:
                return done
        hook = _FUNCTION_HOOKS.get(fn)
        if hook is not None:
            done = hook(tx, fn, args, kwargs)
            if done is not None:
                return done
        if fn in optim.FOREACH_REWRITES:  # Note [Optimizers: scalar tensors as op scalars]
            from kiln.frontend.variables.tensor import TensorVariable

            done = optim.rewrite_foreach(tx, fn, args, kwargs, _call_torch(tx), TensorVariable)
            if done is not None:
                return done
        if fn is torch._amp_foreach_non_finite_check_and_unscale_:
            done = optim.amp_unscale(tx, args, kwargs, _call_torch(tx))
            if done is not None:
                return done
        if fn in _BANNED:
            unimplemented(f"torch.{getattr(fn, '__name__', fn)} changes or reads global state")
        if isinstance(fn, type):
            if fn in (torch.Size,) and len(args) == 1 and not kwargs:
                return SizeVariable(args[0].unpack_var_sequence(tx))
            if fn in (torch.Size,) and not args and not kwargs:
                return SizeVariable([])  # `torch.Size()`: the shape of a 0-d tensor
            if fn in (torch.device, torch.dtype, torch.finfo, torch.iinfo) and all(
                a.is_python_constant() for a in [*args, *kwargs.values()]
            ):
                cargs = [a.as_python_constant() for a in args]
                ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
                try:
                    value = fn(*cargs, **ckw)
                except Exception as e:
                    unimplemented(f"{fn.__name__}(...) raised {type(e).__name__}: {e}")
                if fn in (torch.finfo, torch.iinfo):
                    return ConstantObjectVariable(value)
                return ConstantVariable(value)
            if optim.is_record_function(fn):
                return optim.ProfilerRangeVariable(fn)
            if fn in _PROFILERS:  # Note [Torch: profilers in a with]
                if _ignorable_profiler(tx, args, kwargs):
                    return optim.ProfilerRangeVariable(fn)
                unimplemented(ctx_managers.untraced_reason(fn))
            if issubclass(fn, autocast.AUTOCAST_CLASSES):
                return autocast.make_autocast(tx, fn, args, kwargs)
            if fn in (torch.no_grad, torch.enable_grad) and not args and not kwargs:
                return GradModeVariable(fn is torch.enable_grad, fn)
            if fn in (torch.no_grad, torch.enable_grad) and len(args) == 1 and not kwargs:
                # `torch.no_grad(fn)`: the decorator form (no_grad()(fn))
                return GradModeVariable(fn is torch.enable_grad, fn).call_function(tx, args, {})
            if fn is torch.set_grad_enabled and len(args) == 1 and args[0].is_python_constant():
                # set_grad_enabled(b) switches the mode when called (`with` only restores it)
                var = GradModeVariable(bool(args[0].as_python_constant()), fn)
                var.enter(tx)
                var.applied = True
                return var
            if issubclass(fn, torch.nn.Module):
                if buildable_module(fn):
                    return build_module(tx, fn, args, kwargs)
                unimplemented(f"creating a {fn.__name__} module inside the compiled frame")
            if _is_structseq(fn) and len(args) == 1 and not kwargs:
                return _make_structseq(tx, fn, args[0])
            for construct in _SUBCLASS_CONSTRUCTORS:  # `C(t)` of a plain Tensor subclass
                made = construct(tx, self, args, kwargs)
                if made is not None:
                    return made
            unimplemented(f"calling torch class {fn.__name__}")
        if fn in (torch.autograd.grad, torch.autograd.backward):
            if has_pending_hooks(tx.output.side_effects):
                unimplemented("autograd.grad after a hook registration (registered after a graph)")
        folded = torch_queries.fold(tx, fn, args, kwargs)  # Note [Torch: folded queries]
        if folded is not None:
            return folded
        if _qualified(fn) == ("torch.jit", "annotate") and len(args) == 2 and not kwargs:
            return args[1]  # `annotate(type, value)` is value (a hint for TorchScript)
        if fn is torch._C._set_grad_enabled and len(args) == 1 and not kwargs:
            mode = args[0].as_python_constant() if args[0].is_python_constant() else None
            if isinstance(mode, bool):  # Note [Ctx: a bare _set_grad_enabled is recorded]
                record_grad_switch(tx, mode)
                return ConstantVariable(None)
        if fn is torch.is_grad_enabled and not args:
            return ConstantVariable(torch.is_grad_enabled())  # guarded; traced `with` blocks set it
        if _is_compiling_query(fn):
            tx.output.asked_is_compiling = True  # Note [Blocks: an exception on a path only ...]
            return ConstantVariable(True)
        if fn in _HAS_TORCH_FUNCTION and not kwargs:
            answer = _has_torch_function(tx, args)
            if answer is not None:
                return ConstantVariable(answer)  # code asking "am I being compiled?" is, here
        if fn in autocast.STATE_QUERIES and all(a.is_python_constant() for a in args):
            # Note [Autocast: traced under its state]: the trace-time state is the frame's
            return ConstantVariable(fn(*[a.as_python_constant() for a in args]))
        if fn in optim.FOLDED_QUERIES and not args and not kwargs:
            return ConstantVariable(optim.fold_query(fn))
        folded = _FOLDED.get((getattr(fn, "__module__", None), getattr(fn, "__name__", None)))
        if folded is not None and not args and not kwargs:
            return ConstantVariable(folded)
        if _qualified(fn) in _KNOB_READS and all(
            a.is_python_constant() for a in [*args, *kwargs.values()]
        ):
            consts = {k: v.as_python_constant() for k, v in kwargs.items()}
            return ConstantVariable(fn(*[a.as_python_constant() for a in args], **consts))
        if fn is torch.overrides.is_tensor_like and len(args) == 1 and not kwargs:
            if isinstance(args[0], _tensor_cls()):
                return ConstantVariable(True)  # (a Tensor, or a subclass: __torch_function__)
            if args[0].is_python_constant():  # (an int, None, a string...: its type decides)
                return ConstantVariable(fn(args[0].as_python_constant()))
            if isinstance(args[0], SymNodeVariable):  # (a number: no __torch_function__)
                return ConstantVariable(False)
        if fn in _TRACE_TIME:
            from kiln.frontend.variables.tensor import TensorVariable

            if fn is torch.is_tensor and len(args) == 1:
                return ConstantVariable(isinstance(args[0], TensorVariable))
            if fn is torch.numel and len(args) == 1 and isinstance(args[0], TensorVariable):
                return args[0].numel_var(tx)
            if len(args) == 1 and isinstance(args[0], TensorVariable):
                return ConstantVariable(fn(args[0].example))
        if fn is F.interpolate or fn in _resize().WRAPPERS or fn in _resize().MAX_POOL1D:
            rule = _resize().max_pool1d if fn in _resize().MAX_POOL1D else _resize().interpolate
            out = rule(tx, args, kwargs, fn)  # Note [Shapes: interpolate], [Shapes: max_pool1d]
            if out is not None:
                return out
        has_tensor = any(isinstance(a, _tensor_cls()) for a in [*args, *kwargs.values()])
        name = getattr(fn, "__name__", "")
        if not has_tensor and name.startswith(_STATEFUL_PREFIXES):
            # never run (or probe on meta) what looks like a global-state setter while tracing
            unimplemented(f"torch.{name} may change global state")
        if isinstance(fn, types.FunctionType) and not has_tensor:
            if not (fn.__module__ or "").startswith(_TRACEABLE_HELPER_MODULES):
                # torch internals run as Python (a graph break), never traced or probed
                unimplemented(f"call to torch function {fn.__module__}.{name}")
            return inline_call(tx, fn, args, kwargs, None)  # nn helpers: traced
        probe = fn not in (torch.autograd.grad, torch.autograd.backward)  # (frees the graph)
        if (
            isinstance(fn, types.FunctionType)
            and probe
            and not _returns_tensor(tx, fn, args, kwargs)
        ):
            # a torch helper written in Python that computes no tensor (argument checks,
            # canonicalisation): traced like user code
            return inline_call(tx, fn, args, kwargs, None)
        return call_tensor_op(tx, "call_function", fn, args, kwargs)

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        cg.load_object(self.value)

    def __repr__(self):
        return f"TorchVariable({getattr(self.value, '__name__', self.value)})"


def _is_structseq(cls):
    """torch.return_types.max and the like: a C tuple class with named fields."""
    return issubclass(cls, tuple) and hasattr(cls, "n_fields") and hasattr(cls, "n_sequence_fields")


def _make_structseq(tx, cls, arg):
    """`torch.return_types.qr((q, r))`: a tuple of that class holding the items."""
    if not arg.has_unpack_var_sequence(tx):
        unimplemented(f"{cls.__name__}() of {arg} (not a sequence kiln can unpack)")
    items = arg.unpack_var_sequence(tx)
    if len(items) != cls.n_fields or cls.n_fields != cls.n_sequence_fields:
        unimplemented(f"{cls.__name__}() of {len(items)} items (TypeError or unnamed fields)")
    return TupleVariable(items, tuple_cls=cls)
