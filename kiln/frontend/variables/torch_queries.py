"""torch functions that answer a question with a Python value, folded while tracing.

Note [Torch: folded queries]
Code asks torch about its situation: "am I traced by FX / exported to ONNX / scripted?", "are
deterministic algorithms on?", "is CUDA there?". None of these puts anything in a graph: the answer
is a Python constant while kiln traces. Three kinds (the table `QUERIES`):
  never     kiln is none of these tracers: the answer inside kiln is fixed (False / None)
  state     global state a user may change between calls: the answer read now, with a guard
            (GuardKind.STATE_QUERY) that calls the function again before each run of the entry
  process   fixed for the process (CUDA present or not): the answer read now, no guard
"""

import sys
import types

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.base import wrap_constant_like
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import ListVariable, SizeVariable, TupleVariable
from kiln.frontend.variables.misc import ConstantObjectVariable
from kiln.frontend.variables.sym import SymNodeVariable

_NEVER = "never"
_STATE = "state"
_PROCESS = "process"
_TENSOR = "tensor"


def _table():
    rows = {
        ("torch.fx._symbolic_trace", "is_fx_tracing"): (_NEVER, False),
        ("torch.fx._symbolic_trace", "is_fx_symbolic_tracing"): (_NEVER, False),
        ("torch.onnx", "is_in_onnx_export"): (_NEVER, False),
        ("torch.onnx._globals", "is_in_onnx_export"): (_NEVER, False),
        ("torch._C", "_get_tracing_state"): (_NEVER, None),
        ("torch", "are_deterministic_algorithms_enabled"): (_STATE, None),
        ("torch", "is_deterministic_algorithms_warn_only_enabled"): (_STATE, None),
        ("torch", "is_inference_mode_enabled"): (_STATE, None),
        ("torch", "get_default_dtype"): (_STATE, None),
        ("torch._C", "_dispatch_tls_local_include_set"): (_STATE, None),
        ("torch._C", "_dispatch_tls_local_exclude_set"): (_STATE, None),
        ("torch._C", "_dispatch_keys"): (_TENSOR, None),
        ("torch.cuda", "is_available"): (_PROCESS, None),
        ("torch.backends.mps", "is_available"): (_PROCESS, None),
        ("torch.distributed", "is_available"): (_PROCESS, None),
        ("torch.distributed.distributed_c10d", "is_initialized"): (_STATE, None),
        ("torch.autograd", "_is_checkpoint_valid"): (_STATE, None),
        ("torch._C", "_are_functorch_transforms_active"): (_STATE, None),
        # (DisableTorchFunction, which kiln does not trace: DisableTorchFunctionSubclass, which
        # it does, leaves this answer as it is)
        ("torch._C", "_is_torch_function_all_disabled"): (_STATE, None),
        ("torch._C", "_get_privateuse1_backend_name"): (_STATE, None),
        ("torch._C", "_get_cublas_allow_tf32"): (_STATE, None),
        ("torch._C", "_get_cublas_allow_fp16_accumulation"): (_STATE, None),
        ("torch", "get_num_threads"): (_STATE, None),
        ("torch", "get_num_interop_threads"): (_STATE, None),
        ("torch", "get_float32_matmul_precision"): (_STATE, None),
        ("torch", "is_warn_always_enabled"): (_STATE, None),
        ("torch", "get_deterministic_debug_mode"): (_STATE, None),
        ("torch", "get_default_device"): (_STATE, None),
        ("torch.accelerator", "is_available"): (_PROCESS, None),
        ("torch.accelerator", "current_accelerator"): (_PROCESS, None),
        ("torch.accelerator", "device_count"): (_PROCESS, None),
        ("torch.cuda", "device_count"): (_PROCESS, None),
        ("torch.xpu", "is_available"): (_PROCESS, None),
        ("torch.mtia", "is_available"): (_PROCESS, None),
        ("torch.backends.cuda", "is_built"): (_PROCESS, None),
        ("torch.backends.cpu", "get_cpu_capability"): (_PROCESS, None),
    }
    return rows


# pure functions of dtypes: folded when every argument is a constant (torch._prims_common's
# dtype helpers: elementwise_dtypes's promotion walks them)
_PURE = (torch.promote_types, torch.can_cast) + tuple(
    getattr(torch._prims_common, name)
    for name in (
        "dtype_to_type",
        "type_to_dtype",
        "get_higher_type",
        "get_higher_dtype",
        "is_boolean_dtype",
        "is_integer_dtype",
        "is_float_dtype",
        "is_complex_dtype",
        "corresponding_real_dtype",
        "corresponding_complex_dtype",
        "get_computation_dtype",
    )
    if hasattr(torch._prims_common, name)
)


QUERIES = _table()


def _key(fn):
    name = getattr(fn, "__name__", None)
    key = (getattr(fn, "__module__", None), name)
    if key not in QUERIES and isinstance(name, str) and getattr(torch._C, name, None) is fn:
        return ("torch._C", name)  # (pybind functions name no module, or an odd one)
    return key


def is_query(fn):
    """Whether fn is one of the folded queries."""
    if not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
        return False  # never probe a user object's attributes (its __getattr__ may raise)
    try:
        return _key(fn) in QUERIES and _resolves(fn)
    except TypeError:
        return False


def _resolves(fn):
    """The table names a function by module and name: it must be that very function."""
    mod, name = _key(fn)
    if mod == "torch._C":
        return getattr(torch._C, name, None) is fn
    module = _module(mod)
    return module is not None and getattr(module, name, None) is fn


def _module(name):
    obj = torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _is_tensor_like(v):
    """`torch.overrides.is_tensor_like(v)` of a traced value, or None when not known."""
    if isinstance(v, ConstantVariable):
        return torch.overrides.is_tensor_like(v.value)
    if getattr(v, "proxy", None) is not None and getattr(v, "example", None) is not None:
        # a TensorVariable (not imported: tensor.py imports this module's users)
        return v.python_type() in (torch.Tensor, torch.nn.Parameter) or None
    return None


def fold(tx, fn, args, kwargs):
    """The folded answer of a query (None when fn is none, or the answer is not known)."""
    if fn is torch.overrides.is_tensor_like and len(args) == 1 and not kwargs:
        answer = _is_tensor_like(args[0])
        return ConstantVariable(answer) if answer is not None else None
    if _comptime_name(fn) is not None:
        return _comptime_static(fn, args, kwargs)
    if fn is torch._check and len(args) in (1, 2) and set(kwargs) <= {"message"}:
        message = args[1] if len(args) == 2 else kwargs.get("message")
        return _torch_check(tx, args[0], message)
    if fn is torch._C._dispatch_keys and len(args) == 1 and not kwargs:
        return _dispatch_keys(tx, args[0])
    if fn is _mode_stack and not args and not kwargs:
        return _dispatch_mode_stack(tx)
    if fn is torch.broadcast_shapes and not kwargs:
        return _broadcast_shapes(args)
    if fn in _PURE and all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        cargs = [a.as_python_constant() for a in args]
        ckwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
        try:
            value = fn(*cargs, **ckwargs)
        except Exception:
            return None  # (the call runs where it raises)
        if isinstance(value, type):  # (dtype_to_type: `float`, compared with `is float`)
            return wrap_constant_like(tx, value)
        return ConstantVariable(value)
    if args or kwargs or not is_query(fn):
        return None
    if fn is torch._C._are_functorch_transforms_active and tx.output.__dict__.get(
        "functorch_levels"
    ):
        unimplemented("_are_functorch_transforms_active inside a traced torch.vmap")
    kind, value = QUERIES[_key(fn)]
    if kind == _TENSOR:
        return None
    if kind == _NEVER:
        return ConstantVariable(value)
    if fn is torch.get_default_device and "default_device_set" in tx.output.__dict__:
        # (set by the frame: Note [Frames: set_default_device inside the frame])
        device = tx.output.default_device_set or torch.device("cpu")
        if device.type not in ("cpu", "meta") and device.index is None:
            unimplemented("torch.get_default_device() after the frame set a device without index")
        return ConstantVariable(device)
    value = fn()
    if fn is torch.get_default_dtype and hasattr(tx.output, "entry_default_dtype"):
        return ConstantVariable(value)  # set by the trace (Note [Torch: set_default_dtype traced])
    if kind == _STATE:
        tx.output.guards.add(GuardKind.STATE_QUERY, None, (fn, value))
    if isinstance(value, torch._C.DispatchKeySet):
        return ConstantObjectVariable(value)
    return ConstantVariable(value)


def _broadcast_shapes(args):
    """`torch.broadcast_shapes(*shapes)` of known sizes, folded to a torch.Size (None: sizes
    that are symbols, or shapes eager refuses: the call runs as written)."""
    shapes = []
    for a in args:
        if a.is_python_constant():
            shapes.append(a.as_python_constant())
        elif isinstance(a, (TupleVariable, ListVariable)) and all(
            i.is_python_constant() for i in a.items
        ):
            shapes.append(tuple(i.as_python_constant() for i in a.items))
        else:
            return None
    try:
        size = torch.broadcast_shapes(*shapes)
    except Exception:
        return None
    return SizeVariable([ConstantVariable(int(n)) for n in size])


# Note [Torch: the dispatch mode stack]
# `torch.utils._python_dispatch._get_current_dispatch_mode_stack()` is asked by library code that
# looks for a tracer's mode (nn.MultiheadAttention's fast path asks `_is_make_fx_tracing()`). With
# no Python dispatch mode active the answer is an empty list, folded with a guard that no mode is
# active at run time either; under an active mode (the objects themselves) the call is a break.
_mode_stack = torch.utils._python_dispatch._get_current_dispatch_mode_stack


def _dispatch_mode_stack(tx):
    """The folded (empty) stack of active Python dispatch modes."""
    if _mode_stack():
        unimplemented("_get_current_dispatch_mode_stack under an active dispatch mode")
    tx.output.guards.add(GuardKind.STATE_QUERY, None, (_no_dispatch_mode, True))
    return ListVariable([])


def _no_dispatch_mode():
    """Whether no Python dispatch mode is active (the guard of a folded mode stack)."""
    return not torch._C._len_torch_dispatch_stack()  # (the stack's depth: no list made)


# Note [Torch: dispatch keys of a traced tensor]
# `torch._C._dispatch_keys(t)` of a plain strided tensor is a constant while tracing. Of an input,
# it is the keys of the real input (its TENSOR_MATCH guard checks them). Of a tensor the frame
# makes, the keys of a tensor of its device and dtype (its backend key, ADInplaceOrView,
# Autograd<backend>, Autocast<backend>; none of them depends on sizes or requires_grad), unless it
# is an inference tensor (no autograd keys): made under inference mode, or a view of an inference
# input. So: the keys of an empty tensor of that device and dtype made now, with a guard that
# inference mode is as now, and no folding in a frame with an inference tensor input. A frame with
# a tensor subclass input (its results may be subclass instances, with the Python keys), another
# layout or conjugate/negative views are not folded either (a break).
def _dispatch_keys(tx, v):
    """The folded `torch._C._dispatch_keys(v)` of a traced tensor."""
    example = getattr(v, "example", None)
    if getattr(v, "proxy", None) is None or not isinstance(example, torch.Tensor):
        unimplemented("torch._C._dispatch_keys of something not a traced tensor")
    if tx.output.__dict__.get("functorch_levels"):
        unimplemented("torch._C._dispatch_keys inside a traced torch.vmap (Note [Vmap: metadata])")
    wrapper = getattr(v, "wrapper_subclass", False)
    if v.python_type() not in (torch.Tensor, torch.nn.Parameter) and not wrapper:
        unimplemented("torch._C._dispatch_keys of a tensor subclass")
    if example.layout != torch.strided or example.is_conj() or example.is_neg():
        unimplemented("torch._C._dispatch_keys of a non-strided or conjugate/negative tensor")
    inputs = [value for _, value, _ in tx.output.graph_inputs if isinstance(value, torch.Tensor)]
    if any(type(t) not in (torch.Tensor, torch.nn.Parameter) for t in _plain_parts(inputs)):
        unimplemented("torch._C._dispatch_keys in a frame with a tensor subclass input")
    for _, value, node in tx.output.graph_inputs:
        if node is v.proxy and isinstance(value, torch.Tensor):
            return ConstantObjectVariable(torch._C._dispatch_keys(value))
    if any(t.is_inference() for t in _plain_parts(inputs)):
        unimplemented("torch._C._dispatch_keys in a frame with an inference tensor input")
    inference = torch.is_inference_mode_enabled()
    tx.output.guards.add(GuardKind.STATE_QUERY, None, (torch.is_inference_mode_enabled, inference))
    if wrapper:
        # the fake of a wrapper subclass is made as eager makes the real one: a wrapper of the
        # real device and dtype (Note [Tensors: wrapper subclass inputs])
        return ConstantObjectVariable(torch._C._dispatch_keys(example))
    try:
        empty = torch.empty(0, dtype=example.dtype, device=v.device)
    except Exception as e:
        unimplemented(f"torch._C._dispatch_keys: {type(e).__name__}: {e}")
    return ConstantObjectVariable(torch._C._dispatch_keys(empty))


def _plain_parts(tensors):
    """Tensors, with traceable wrapper subclasses replaced by their inner tensors (recursively)."""
    out = []
    for t in tensors:
        if is_traceable_wrapper_subclass(t):
            out.extend(_plain_parts([getattr(t, n) for n in t.__tensor_flatten__()[0]]))
        else:
            out.append(t)
    return out


# Note [Torch: no active exception]
# sys.exc_info() in a compiled frame outside any except block the trace is in answers what the
# caller handles: (None, None, None) when nothing is. That is folded with a STATE_QUERY guard that
# asks the same before each run (an entry traced outside a handler is not used inside one). An
# exception being handled (in the trace or by the caller) has a traceback kiln does not model: a
# break.
def no_active_exception():
    """Whether no exception is being handled (what the guard asks)."""
    return sys.exc_info()[0] is None


# Note [Torch: comptime static sizes]
# torch's `comptime.force_static(v)` / `comptime.assert_static(v)` (what `torch._dynamo.mark_static`
# calls inside a compiled frame) are no-ops when run eagerly and act on the trace when compiled:
#   force_static   a symbolic int becomes its value, with the guard `Eq(s, value)` (later reads
#                  of the same size then are that constant); a constant is already static
#   assert_static  the value must not be symbolic (torch raises AssertionError while compiling;
#                  kiln breaks the graph, and the call runs as the no-op it is in eager)
# Recognised by module and qualified name, and only when torch's own function is that very object.
_COMPTIME = ("force_static", "assert_static")


def _comptime_name(fn):
    """ "force_static"/"assert_static" when fn is torch's comptime helper of that name, else None."""
    if not isinstance(fn, types.FunctionType) or fn.__module__ != "torch._dynamo.comptime":
        return None
    name = fn.__name__
    owner = getattr(sys.modules.get("torch._dynamo.comptime"), "comptime", None)
    if name not in _COMPTIME or fn.__qualname__ != f"_Comptime.{name}":
        return None
    return name if getattr(owner, name, None) is fn else None


def _comptime_static(fn, args, kwargs):
    """The traced call of comptime.force_static / assert_static (Note [Torch: comptime static sizes])."""
    name = _comptime_name(fn)
    if len(args) != 1 or kwargs:
        unimplemented(f"comptime.{name} with {len(args)} arguments")
    (v,) = args
    if isinstance(v, SymNodeVariable):
        if v.value.env.substitute(v.value.expr).is_Integer:
            return ConstantVariable(None)  # a size already specialised (force_static before)
        if name == "assert_static":
            unimplemented("comptime.assert_static of a dynamic size")
        v.evaluate()
    elif not v.is_python_constant():
        unimplemented(f"comptime.{name} of {type(v).__name__}")
    return ConstantVariable(None)


# Note [Torch: torch._check of a Python condition]
# `torch._check(cond)` raises RuntimeError when cond is false. A condition on sizes (`x.size(0) !=
# 3`, a symbolic bool) is answered now with the guard that keeps it true or false (as torch does
# for a size with a value); a constant is answered now. A true answer is a no-op; a false one is
# eager's RuntimeError raised in the traced frame (the frame's handlers see it; uncaught, the call
# raises it, under fullgraph too), its message the message function's string, traced; a message
# kiln cannot compute breaks the graph, so the call runs in Python. A tensor condition is not
# handled here.
_CHECK_DEFAULT = (
    "Expected cond to be True, but got False. (Could this error message be improved? If so, "
    "please report an enhancement request to PyTorch.)"
)


def _torch_check(tx, cond, message=None):
    """The traced `torch._check(cond, message)`: None (ConstantVariable) when it holds; None when
    not handled."""
    if isinstance(cond, SymNodeVariable):
        holds = cond.truthy(tx)
    elif cond.is_python_constant() and isinstance(cond.as_python_constant(), bool):
        holds = cond.as_python_constant()
    else:
        return None
    if holds:
        return ConstantVariable(None)
    if message is None or (message.is_python_constant() and message.as_python_constant() is None):
        raise_observed(tx, RuntimeError, _CHECK_DEFAULT)
    text = message.call_function(tx, [], {})
    if not (text.is_python_constant() and isinstance(text.as_python_constant(), str)):
        unimplemented("torch._check of a false condition whose message is not a known string")
    raise_observed(tx, RuntimeError, text.as_python_constant())


# Note [Torch: backend flags objects]
# `torch.backends.cuda.matmul` is an object whose class answers attribute reads with a call into
# torch._C (`allow_tf32` is `torch._C._get_cublas_allow_tf32()`): a flag a user may flip between
# calls. A read of one of those flags folds to the value now, with the STATE_QUERY guard of that
# getter (Note [Torch: folded queries]); any other attribute is a break.
_CUBLAS_FLAGS = {
    "allow_tf32": torch._C._get_cublas_allow_tf32,
    "allow_fp16_accumulation": getattr(torch._C, "_get_cublas_allow_fp16_accumulation", None),
}


def _cublas_type():
    cuda = getattr(getattr(torch, "backends", None), "cuda", None)
    return getattr(cuda, "cuBLASModule", None)


class BackendFlagsVariable(ConstantObjectVariable):
    """`torch.backends.cuda.matmul` (Note [Torch: backend flags objects])."""

    def var_getattr(self, tx, name):
        getter = _CUBLAS_FLAGS.get(name)
        if getter is None:
            unimplemented(f"torch.backends.cuda.matmul.{name}")
        value = getter()
        tx.output.guards.add(GuardKind.STATE_QUERY, None, (getter, value))
        return ConstantVariable(value)

    def call_method(self, tx, name, args, kwargs):
        unimplemented(f"torch.backends.cuda.matmul.{name}()")


def backend_flags(value):
    """The variable of a torch backend flags object, or None."""
    cls = _cublas_type()
    return BackendFlagsVariable(value) if cls is not None and type(value) is cls else None
