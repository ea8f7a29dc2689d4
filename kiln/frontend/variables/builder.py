"""Wrapping real Python values into VariableTrackers, installing the guards they need."""

import builtins
import collections
import enum
import functools
import inspect
import itertools
import operator
import re
import sys
import types
import weakref

import torch

from kiln import config
from kiln.exc import unimplemented
from kiln.frontend import break_policy, frame_shapes, resume
from kiln.frontend.guards import GuardKind
from kiln.frontend.markers import (
    break_reason,
    graph_break,
    is_disabled_module,
    is_optimized_module,
    kiln_marker,
    nonstrict_trace,
    skip_frame,
    step_unsupported,
    torchscript_python,
)
from kiln.frontend.source import (
    RANGE_ITERATOR,
    TUPLE_ITERATOR,
    AttrSource,
    GetItemSource,
    IterHasSource,
    IterRestSource,
    LocalSource,
    ProxiedDictSource,
    TorchAttrSource,
    TupleItemSource,
    iter_rest,
    iter_tuple,
    proxied_dict,
    torch_attr,
)
from kiln.frontend.substitutes import substitute_of
from kiln.frontend.variables import (
    bound_args,  # noqa: F401  (registers Signature.bind)
    break_errors,
    class_queries,  # noqa: F401  (registers cls.__subclasses__)
    complex_ctor,  # noqa: F401  (registers complex() of constants)
    control_flow,
    control_loops,  # noqa: F401  (registers torch's map and scan)
    ctx_managers,
    default_dtype,  # noqa: F401  (registers torch.set_default_dtype)
    dict_reads,
    enum_api,  # noqa: F401  (registers Enum's functional API)
    foreach_calls,  # noqa: F401  (registers foreach ops one tensor at a time)
    functional_call,
    functorch_grad,
    functorch_vmap,
    interpolate_calls,  # noqa: F401  (registers F.interpolate to a symbolic size)
    list_subclass,
    logging_vars,
    misc,
    namedtuples,
    nested_compile,
    numpy_extra,  # noqa: F401  (registers np.meshgrid, fftshift, linalg.norm)
    numpy_info,
    numpy_scalars,
    numpy_shapes,
    numpy_vars,
    optim,
    parameter_ctor,  # noqa: F401  (registers torch.nn.Parameter)
    pytree,  # noqa: F401  (registers torch.utils._pytree functions)
    random_draws,
    runtime_asserts,  # noqa: F401  (registers torch._assert_async)
    set_subclass,
    static_marks,
    stdlib,
    sys_modules,
    tensor_of_list,
    tensor_subclass,
    tensor_type,  # noqa: F401  (registers Tensor.type)
    torch_function,
    torch_queries,
    tuple_reads,
    unbacked,
    unspec_float,
    user_modules,  # noqa: F401  (registers user modules built in the frame)
    value_checked,  # noqa: F401  (registers F.one_hot with its checks)
    warnings_ctx,  # noqa: F401  (registers warnings.catch_warnings made in the frame)
    weak_dicts,
    weak_refs,  # noqa: F401  (registers weakref.ref of a frame argument)
)
from kiln.frontend.variables.base import lookup_hooked, probe, register_builder
from kiln.frontend.variables.builtin import BuiltinVariable
from kiln.frontend.variables.checkpoint import checkpoint_function
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dict_iters import KINDS as DICT_ITERATORS
from kiln.frontend.variables.dict_iters import wrap_dict_iter
from kiln.frontend.variables.dicts import (
    ConstDictVariable,
    IdentityKeyedDictVariable,
    is_identity_keyed,
    make_mapping_proxy,
)
from kiln.frontend.variables.functions import (
    PartialVariable,
    UserFunctionVariable,
    UserMethodVariable,
    is_torch_disabled,
)
from kiln.frontend.variables.lists import (
    InputIteratorVariable,
    ListVariable,
    RangeVariable,
    SizeVariable,
    TupleVariable,
    wrap_deque,
)
from kiln.frontend.variables.misc import (
    ConstantObjectVariable,
    DisabledFunctionVariable,
    FrameEndVariable,
    GraphBreakVariable,
    OpaqueCallableVariable,
    PythonModuleVariable,
    TensorMethodDescriptorVariable,
    TensorMethodVariable,
    _is_skipped_module,
)
from kiln.frontend.variables.nn_module import NNModuleVariable
from kiln.frontend.variables.sets import SetVariable
from kiln.frontend.variables.tensor_keyed import tensor_keyed, wrap_tensor_keyed
from kiln.frontend.variables.torch import TorchVariable, has_function_hook
from kiln.frontend.variables.user_defined import (
    UserDefinedClassVariable,
    UserDefinedObjectVariable,
)

# modules that register torch-function / tensor-method hooks when imported
_HOOK_MODULES = (tensor_of_list, unbacked)


def is_torch_callable(value):
    """A torch *function* (Python or C), op overload or op namespace: put in the graph as a call.

    Instances of torch classes (optimizers, generators ...) and their bound methods are not:
    running them while tracing would run their effects (they are traced like user objects).
    """
    if isinstance(value, types.BuiltinMethodType) and has_function_hook(value):
        return True  # (a C method of a torch class kiln models: torch.Tensor._make_subclass)
    wrapped = probe(value, "__wrapped__", None) if isinstance(value, types.FunctionType) else None
    if isinstance(wrapped, types.FunctionType) and not is_torch_callable(wrapped):
        if (wrapped.__module__, wrapped.__qualname__) != (value.__module__, value.__qualname__):
            return False  # a user function decorated by torch (@torch.no_grad() ...): not an op
        # (else torch's own function behind torch's decorator: `@deprecated` torch._check_is_size)
    if isinstance(value, types.FunctionType):
        mod = value.__module__ or ""
        if _in_traced_module(mod) or not _importable(value):
            return False  # a lambda or local helper, torch.optim's code: traced like user code
    elif isinstance(value, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        self_ = probe(value, "__self__", None)
        if self_ is not None and not isinstance(self_, types.ModuleType):
            return False  # a C method bound to an object
        mod = self_.__name__ if self_ is not None else (value.__module__ or "")
    elif type(value).__module__ == "torch._ops":
        mod = "torch._ops"  # torch.ops.aten.add.Tensor, packets, namespaces
    elif isinstance(value, type):
        mod = value.__module__ or ""  # torch classes: torch.Size, torch.no_grad ...
        if _in_traced_module(mod):
            return False  # torch.optim.Optimizer ...: a class whose methods are traced
    else:
        return False
    return mod == "torch" or mod.startswith("torch.")


def _importable(fn):
    """Whether a Python function is its module's attribute by its qualified name (as FX prints it)."""
    mod = sys.modules.get(fn.__module__ or "")
    obj = mod
    for part in fn.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is fn or getattr(mod, fn.__name__, None) is fn


def _in_traced_module(mod):
    return any(mod == m or mod.startswith(m + ".") for m in config.traced_modules)


def _is_skipped_function(value):
    if resume.origin(value.__code__) is not None:
        return False  # a resume function continues a frame kiln traced (a library's wrapper)
    mod = probe(value, "__module__", None) or ""
    if _in_traced_module(mod):
        return False  # torch's test helpers, optimizers: traced (config.traced_modules)
    return any(mod == m or mod.startswith(m + ".") for m in config.skip_modules)


# torch.func's own functions traced, by name (Notes [Modules: functional_call], [Grad: the body
# traced, torch.func.grad applied at run time])
_TORCH_FUNC_VARIABLES = {
    "functional_call": functional_call.FunctionalCallVariable,
    "jvp": functorch_grad.JvpFunctionVariable,
    **dict.fromkeys(functorch_grad.TRANSFORMS, functorch_grad.GradFunctionVariable),
}


def _kiln_special(value):
    """kiln's own markers (graph_break, disabled functions, compiled wrappers), and functions
    torch keeps out of compilers (`torch._dynamo.disable`, torch's `_disable_dynamo`)."""
    if value is graph_break:
        return GraphBreakVariable()
    if value is skip_frame or value is step_unsupported:
        return FrameEndVariable(value)
    if value is nonstrict_trace:  # (traced as a fold: Note [nonstrict_trace: one opaque ...])
        return UserFunctionVariable(value)
    if nested_compile.is_compile_entry(value):  # Note [Compile: a compile call inside a ...]
        return nested_compile.CompileEntryVariable(value)
    substitute = substitute_of(value)  # Note [Substitutes: Python stand-ins for C functions]
    if substitute is not None:
        return substitute
    if optim.is_dynamo_graph_break(value):
        return optim.DynamoHintVariable()
    checkpoint = checkpoint_function(value)  # (a function torch keeps out of compilers)
    if checkpoint is not None:
        return checkpoint
    if break_reason(value) is not None:  # (kiln.set_stance in compiled code)
        return DisabledFunctionVariable(value)
    if kiln_marker(value, "_kiln_disabled"):
        return DisabledFunctionVariable(value)
    if is_torch_disabled(value):
        return DisabledFunctionVariable(value)
    if logging_vars.is_effect_function(value):  # warnings.warn, logging.warning ...
        return logging_vars.EffectCallVariable(value.__name__, fn=value)
    if kiln_marker(value, "_kiln_traced_as") == "error_on_graph_break":  # a decorated function
        return break_errors.BreakSettingCallVariable(value)
    if type(value) is break_policy.error_on_graph_break:  # (a resume function enters it again)
        return break_errors.BreakSettingVariable(value.value)
    if kiln_marker(value, "_kiln_traced_as") == "mark_static":  # kiln.mark_static in the frame
        return static_marks.MarkStaticVariable(value)
    if kiln_marker(value, "_kiln_traced_as") == "mark_dynamic":  # (raises when called)
        return static_marks.MarkDynamicVariable(value)
    if value is ctx_managers.DISABLE_SAVED_HOOKS:
        return ctx_managers.DisableSavedHooksFnVariable(value)
    if control_flow.handles(value):  # torch.cond, torch.while_loop ...
        return control_flow.ControlFlowOpVariable(value)
    if namedtuples.is_factory(value):  # Note [Namedtuples: classes made in the frame]
        return namedtuples.NamedTupleFactoryVariable(value)
    if functorch_vmap.is_vmap(value):  # Note [Vmap: the body traced, vmap applied at run time]
        return functorch_vmap.VmapFunctionVariable(value)
    traced_as = _TORCH_FUNC_VARIABLES.get(functorch_vmap.torch_func_name(value))
    if traced_as is not None:  # torch.func.functional_call, grad, jacrev ..., jvp
        return traced_as(value)
    if functorch_vmap.is_interpreter_query(value):
        return functorch_vmap.FunctorchInterpreterQueryVariable(value)
    if functorch_vmap.is_transform_type(value):
        return ConstantVariable(value)
    info = numpy_info.special(value)  # np.finfo / np.iinfo / np.dtype and info objects
    return info if info is not None else numpy_vars.special(value)  # numpy functions, dtypes


def _torch_lru_cached(value):
    """An lru_cache'd function of torch's (`torch.overrides.get_default_nowrap_functions`)."""
    mod = probe(value, "__module__", None)
    return stdlib.is_lru_cached(value) and isinstance(mod, str) and mod.split(".")[0] == "torch"


def _resolves(path, value):
    """Whether the dotted torch path names `value` itself."""
    try:
        return torch_attr(path) is value
    except Exception:
        return False


def wrap_constant_like(tx, value):
    """Wrap a value that needs no guard (reached from torch, a builtin, or a literal)."""
    special = _kiln_special(value)
    if special is not None:
        return special
    draw = random_draws.wrap(tx, value, None)  # Note [Random: draws before the graph]
    if draw is not None:
        return draw
    if is_literal(value):
        return ConstantVariable(value)
    if isinstance(value, types.ModuleType):
        return PythonModuleVariable(value)
    if _is_builtin(value):
        return BuiltinVariable(value)
    if probe(value, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor):
        return TensorMethodDescriptorVariable(value)
    if _torch_lru_cached(value):  # read from a torch module: named by its path for the guards
        path = f"{value.__module__}.{value.__qualname__}"
        if _resolves(path, value):
            return UserDefinedObjectVariable(value, source=TorchAttrSource(path))
    if isinstance(value, types.FunctionType) and _in_traced_module(value.__module__ or ""):
        return UserFunctionVariable(value)  # (read from a library module: config.traced_modules)
    if is_torch_callable(value) or (isinstance(value, type) and issubclass(value, torch.Tensor)):
        return TorchVariable(value)
    if torch_queries.is_query(value):
        return TorchVariable(value)
    if isinstance(value, type):
        return UserDefinedClassVariable(value)
    if isinstance(value, enum.Enum | torch._C.DispatchKey):
        return ConstantVariable(value)
    if isinstance(value, types.FunctionType) and value in stdlib.TRACED_FUNCTIONS:
        # Note [Stdlib: Python functions traced as user code]
        return UserFunctionVariable(value)
    if callable(value):
        return OpaqueCallableVariable(value)
    flags = torch_queries.backend_flags(value)  # Note [Torch: backend flags objects]
    if flags is not None:
        return flags
    if type(value) is torch.torch_version.TorchVersion:  # (torch.__version__)
        return ConstantObjectVariable(value)
    if type(value) is tuple:  # (`torch.Tensor.__mro__`: immutable; its items wrapped alike)
        return TupleVariable([wrap_constant_like(tx, item) for item in value])
    unimplemented(f"value of type {type(value).__name__} from a library")


_WEAK_PROXIES = (weakref.ProxyType, weakref.CallableProxyType)
# kiln's specials reached from a source that are guarded by identity
_IDENTITY_SPECIALS = (
    nested_compile.CompileEntryVariable,
    DisabledFunctionVariable,
    break_errors.BreakSettingCallVariable,
)


def wrap_value(tx, value, source):
    """Wrap a value reached from `source`, installing its guards (`source` may be None)."""
    guards = tx.output.guards
    if type(value) in _WEAK_PROXIES:  # Note [Objects: weakref.proxy]
        return weak_refs.wrap_proxy(tx, value, source, wrap_value)
    if lookup_hooked(type(value)):
        # a proxy: isinstance() and getattr() on it run its code (kiln must not look at it)
        if source is None:
            unimplemented(f"a {type(value).__name__} (its own __getattribute__) without a source")
        guards.add(GuardKind.TYPE_MATCH, source, type(value))
        return UserDefinedObjectVariable(value, source=source)
    special = _kiln_special(value)
    if special is not None:
        if source is not None and isinstance(special, _IDENTITY_SPECIALS):
            # (a disabled function's break calls the object traced: another one at the same
            # place, e.g. its undecorated original, is traced anew)
            guards.add(GuardKind.ID_MATCH, source, value)
            if isinstance(special, break_errors.BreakSettingCallVariable):
                special.source = source  # (its wrapped function is read through it)
        if source is not None and isinstance(special, break_errors.BreakSettingVariable):
            guards.add(GuardKind.CONSTANT_MATCH, _attr(source, "value"), special.value)
        if source is not None:
            numpy_info.guard_input(tx, value, special, source)  # (a numpy function, dtype ...)
            namedtuples.guard_input(tx, special, source)  # (collections.namedtuple itself)
        return special
    draw = random_draws.wrap(tx, value, source)  # Note [Random: draws before the graph]
    if draw is not None:
        return draw
    if is_optimized_module(value):
        value = value._orig_mod
        source = _attr(source, "_orig_mod") if source is not None else None
    elif (script_source := torchscript_python(value)) is not None:
        # (traced as the Python function it was made from, read through its attribute)
        if source is None:
            return UserFunctionVariable(script_source)
        guards.add(GuardKind.ID_MATCH, source, value)
        return UserFunctionVariable(script_source, source=_attr(source, "_torchdynamo_inline"))
    elif kiln_marker(value, "_kiln_orig_fn"):
        # a kiln-compiled function called from traced code: trace the original (the wrapper
        # object is what the guard pins, so the wrapped function cannot change under it); its
        # closure cells are read through the wrapper, `wrapper._kiln_orig_fn.__closure__[i]`
        if source is None:
            return UserFunctionVariable(value._kiln_orig_fn)
        tx.output.guards.add(GuardKind.ID_MATCH, source, value)
        # (one compiled with fullgraph=True: a break inside it is an error, Note [Break policy:
        # error_on_graph_break])
        cache = getattr(value, "_kiln_cache", None)
        strict = cache is not None and cache.settings.fullgraph
        cls = break_errors.FullgraphCallVariable if strict else UserFunctionVariable
        return cls(value._kiln_orig_fn, source=_attr(source, "_kiln_orig_fn"))
    if source is None:
        if isinstance(value, torch.Tensor):
            unimplemented("a tensor reached without a source")
        if isinstance(value, types.FunctionType) and not _is_skipped_function(value):
            return UserFunctionVariable(value)
        return wrap_constant_like(tx, value)
    if numpy_vars.is_numpy_array(value):  # Note [NumPy: arrays as tensors]
        return numpy_vars.wrap_array(tx, value, source)
    if numpy_scalars.is_numpy_scalar(value):  # Note [NumPy: scalar inputs]
        return numpy_scalars.wrap_scalar(tx, value, source)
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            unimplemented(f"a {value.layout} tensor input (only strided tensors are traced)")
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            # Note [Tensors: subclass inputs are not traced]
            # A tensor subclass decides its results' types and values in its own code
            # (__torch_function__, __torch_dispatch__, overridden methods), which a trace on
            # plain examples does not run: type(x), isinstance and the subclass's attributes would
            # come out as a plain tensor's. So a subclass input is a graph break (the frame runs
            # it in Python), except a traceable wrapper subclass, whose example is a fake of the
            # subclass itself (Note [Tensors: wrapper subclass inputs] in tensor_subclass.py), and
            # a plain subclass whose __torch_function__ is traced (Note [Tensors: subclasses with
            # __torch_function__] in torch_function.py).
            if torch_function.has_torch_function_class(value):
                torch_function.check_class(type(value))
                wrap = functools.partial(torch_function.wrap_input, cls=type(value))
                return tx.output.add_graph_input(value, source, variable=wrap)
            tensor_subclass.check_subclass(value)
            return tx.output.add_graph_input(value, source, tensor_subclass.fake_subclass)
        return tx.output.add_graph_input(value, source)
    if type(value) is int:
        # Note [Shapes: automatic dynamic]: an int whose value changed is an int symbol input
        tx.output.input_ints[source.name()] = value
        if tx.output.is_dynamic_int(source):
            return tx.output.add_int_input(value, source)
    if type(value) is float:
        # Note [Shapes: unspecialised floats]: a float whose value changed is a graph input
        tx.output.input_floats[source.name()] = value
        if unspec_float.is_dynamic_float(tx.output, source):
            return unspec_float.float_input(tx, value, source)
    if type(value) in (bool, type(None)) or (type(value) in (int, float) and config.specialize_int):
        guards.add(GuardKind.CONSTANT_MATCH, source, value)
        return ConstantVariable(value, source=source)
    if is_literal(value) and not _holds_ints(value, source):
        guards.add(GuardKind.CONSTANT_MATCH, source, value)
        return ConstantVariable(value, source=source)
    if isinstance(value, (torch.dtype, torch.device)):
        guards.add(
            GuardKind.ID_MATCH if isinstance(value, torch.dtype) else GuardKind.CONSTANT_MATCH,
            source,
            value,
        )
        return ConstantVariable(value, source=source)
    if isinstance(value, enum.Enum):
        guards.add(GuardKind.ID_MATCH, source, value)
        return ConstantVariable(value, source=source)
    if sys_modules.is_sys_modules(value):  # Note [Modules: sys.modules by name]
        guards.add(GuardKind.ID_MATCH, source, value)
        return sys_modules.SysModulesVariable(source=source)
    if type(value) in _MUTABLE or type(value) is tuple or list_subclass.is_plain_input(value):
        # Note [Side effects: one variable per mutable container] (and per tuple: `a is b`)
        var = tx.output.side_effects.tracked_container(tx, value, source)
        if var is None:
            var = tx.output.side_effects.track_container(value, _wrap(tx, value, source))
        return var
    return _wrap(tx, value, source)


_MUTABLE = (
    list,
    dict,
    collections.OrderedDict,
    collections.defaultdict,
    collections.deque,
    set,
    itertools.count,  # (Note [Stdlib: itertools.count inputs]: one variable, one position)
    TUPLE_ITERATOR,  # (Note [Iterators: inputs]: a global read twice is one iterator)
    RANGE_ITERATOR,
)


# Note [Sets: inputs]
# A set (or a frozenset that is no literal) reached from a source whose items are literals,
# functions or plain classes is a SetVariable holding the real items, guarded by its type and
# contents (`type(s) is set and s == <copy>`: a key added, removed or changed recompiles). `x in
# s`, len(s) and the set operators are then answered while tracing, in the object's own order
# (iteration, str(), pop() read the object itself until the trace changes it); changes are
# written back to the object itself (s.difference_update(removed); s.update(added), so the items
# it kept keep their places), and the set is returned as itself. Sets of other items (tensors,
# user objects whose == may run code) stay opaque objects.
def _plain_set_item(value):
    if is_literal(value) or isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return True
    if type(value) is types.MethodWrapperType:  # `Tensor.grad.__get__`: hashed, compared by
        return isinstance(value.__self__, _C_DESCRIPTORS)  # identity (its slot and descriptor)
    return isinstance(value, type) and type(value) is type


_C_DESCRIPTORS = (
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.WrapperDescriptorType,
)


def _wrap_set(tx, value, source):
    """A set/frozenset input as a SetVariable (Note [Sets: inputs]), or None."""
    if type(value) not in (set, frozenset) or not all(map(_plain_set_item, value)):
        return None
    tx.output.guards.add(GuardKind.CONSTANT_MATCH, source, type(value)(value))
    var = SetVariable(value, frozen=type(value) is frozenset, source=source)
    var.real, var.initial = value, frozenset(value)
    return var


def _const_keyed_defaultdict(value):
    """Whether a defaultdict is traced as a dict of constant keys: its keys are literals, and an
    empty one has a Python function (GradScaler's per-optimizer states) or a builtin container or
    number type as factory; an empty `defaultdict(dict)` is an optimizer's state, keyed by
    parameters (Note [Optimizers: state keyed by parameters])."""
    if not all(is_literal(k) for k in value):
        return False
    factory = value.default_factory
    plain = any(factory is f for f in _PLAIN_FACTORIES)
    return bool(value) or isinstance(factory, types.FunctionType) or plain


_PLAIN_FACTORIES = (list, tuple, set, int, float, str)


# Note [Shapes: ints in tuple inputs]
# A tuple argument holding ints (a size, `(h, w)` for F.interpolate; an item of an argument too)
# is read item by item, as a list is: each int is an int input of its own (guarded by value, a
# size symbol once its value changed: Note [Shapes: automatic dynamic]) instead of one constant
# for the whole tuple, whose every new value recompiled until the cache limit left the frame to
# run eagerly. A tuple attribute of an object (a conv's `stride`, `padding`) stays one constant,
# one guard: settings, as module ints under dynamic=True (OutputGraph.is_dynamic_int).
def _holds_ints(value, source):
    if type(value) is not tuple or not any(type(v) is int for v in value):
        return False
    while isinstance(source, GetItemSource):
        source = source.source
    return isinstance(source, LocalSource)


def _wrap(tx, value, source):
    guards = tx.output.guards
    if type(value) is types.MappingProxyType:  # Note [Dicts: mappingproxy]
        guards.add(GuardKind.TYPE_MATCH, source, types.MappingProxyType)
        mapping = proxied_dict(value)
        if type(mapping) in _MUTABLE:
            inner = wrap_value(tx, mapping, ProxiedDictSource(source))
            made = make_mapping_proxy([inner], {})
            if made is not None:
                made.source = source
                return made
    if type(value) is torch._C.DispatchKeySet:  # compared by value: its methods fold
        guards.add(GuardKind.CONSTANT_MATCH, source, value)
        return ConstantObjectVariable(value, source=source)
    if type(value) is re.Pattern:  # a compiled regex: pinned, its methods fold on constants
        guards.add(GuardKind.ID_MATCH, source, value)
        return ConstantObjectVariable(value, source=source)
    if type(value) is weakref.ReferenceType:  # Note [Optimizers: weak references]
        guards.add(GuardKind.TYPE_MATCH, source, weakref.ReferenceType)
        return optim.WeakRefVariable(value, source=source)
    if type(value) is tuple:  # Note [Tuples: inputs guarded by the items read]
        guards.add(GuardKind.LIST_LENGTH, source, (tuple, len(value)))
        unread = TupleVariable([dict_reads.UNREAD] * len(value), source=source)
        return tuple_reads.read_lazily(tx, unread, value)
    if type(value) is list:
        guards.add(GuardKind.LIST_LENGTH, source, (list, len(value)))
        items = [wrap_value(tx, v, GetItemSource(source, i)) for i, v in enumerate(value)]
        return ListVariable(items, source=source)
    if list_subclass.is_plain_input(value):  # Note [Lists: subclass instances from outside ...]
        return list_subclass.wrap_input(tx, value, source)
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a namedtuple
        guards.add(GuardKind.LIST_LENGTH, source, (type(value), len(value)))
        item = GetItemSource if type(value).__getitem__ is tuple.__getitem__ else TupleItemSource
        items = [wrap_value(tx, v, item(source, i)) for i, v in enumerate(value)]
        var = TupleVariable(items, tuple_cls=type(value), source=source)
        if var.keeps_identity:  # (a subclass with an instance dict: Note [Namedtuples: ...])
            var.instance = value
        return var
    if type(value) is torch.Size:
        # its items are guarded one by one (ints that change become size symbols)
        guards.add(GuardKind.LIST_LENGTH, source, (torch.Size, len(value)))
        items = [wrap_value(tx, v, GetItemSource(source, i)) for i, v in enumerate(value)]
        return SizeVariable(items, source=source)
    if type(value) is dict and all(is_literal(k) for k in value):  # read key by key
        d = ConstDictVariable(dict.fromkeys(value, dict_reads.UNREAD), source=source)
        return dict_reads.read_lazily(tx, d, value)  # Note [Dicts: inputs guarded by the ...]
    if type(value) is collections.OrderedDict and all(is_literal(k) for k in value):
        guards.add(GuardKind.DICT_KEYS, source, (type(value), tuple(value)))
        items = {k: wrap_value(tx, v, GetItemSource(source, k)) for k, v in value.items()}
        d = ConstDictVariable(items, user_cls=type(value), source=source)
        d.initial_keys = tuple(value)  # Note [Side effects: dicts replayed key by key]
        d.initial_items = dict(items)
        return d
    if is_identity_keyed(value):  # Note [Dicts: identity-keyed tables]
        guards.add(GuardKind.TYPE_MATCH, source, dict)  # (its first read pins the items)
        return IdentityKeyedDictVariable(dict(value), source=source)
    if tensor_keyed(value):  # Note [Dicts: inputs keyed by tensors]
        return wrap_tensor_keyed(tx, value, source, ConstDictVariable)
    if type(value) is collections.defaultdict and _const_keyed_defaultdict(value):
        guards.add(GuardKind.DICT_KEYS, source, (type(value), tuple(value)))
        items = {k: wrap_value(tx, v, GetItemSource(source, k)) for k, v in value.items()}
        factory = wrap_value(tx, value.default_factory, _attr(source, "default_factory"))
        return ConstDictVariable(
            items, user_cls=type(value), default_factory=factory, source=source
        )
    if type(value) is collections.deque:
        return wrap_deque(tx, value, source)
    if type(value) in DICT_ITERATORS:  # Note [Dicts: iterators at a break]
        made = wrap_dict_iter(tx, value, source)
        if made is not None:
            return made
    if type(value) is itertools.count:  # Note [Stdlib: itertools.count inputs]
        return stdlib.wrap_count_input(tx, value, source)
    if type(value) in (TUPLE_ITERATOR, RANGE_ITERATOR):  # Note [Iterators: inputs]
        guards.add(GuardKind.TYPE_MATCH, source, type(value))
        rest = iter_rest(value)
        if len(rest) > config.range_items_limit:  # (a guard per item left: a long loop's range)
            unimplemented(f"an iterator input with {len(rest)} items left (too long to keep)")

        def item(k):
            """The k-th item left, wrapped and guarded when the trace takes it (None: none)."""
            guards.add(GuardKind.CONSTANT_MATCH, IterHasSource(source, k), k < len(rest))
            if k < len(rest):
                return wrap_value(tx, rest[k], GetItemSource(IterRestSource(source), k))
            return None

        finalized = type(value) is TUPLE_ITERATOR and hasattr(type(iter_tuple(value)), "__del__")
        it = InputIteratorVariable(item, type(value), finalized=finalized, source=source)
        return tx.output.side_effects.track_iterator(it)
    made = _wrap_set(tx, value, source)
    if made is not None:
        return made
    if type(value) is range:
        guards.add(GuardKind.CONSTANT_MATCH, source, value)
        return RangeVariable(value, source=source)
    if isinstance(value, torch.nn.Module):
        guards.add(GuardKind.TYPE_MATCH, source, type(value))
        if is_disabled_module(value):  # kiln.disable(module): its calls run in Python
            return DisabledFunctionVariable(value, source=source)
        if frame_shapes.is_static_module(value):  # (its type is guarded: marks go with it)
            tx.output.static_modules.add(source.name())
        return NNModuleVariable(value, source=source)
    if isinstance(value, types.ModuleType):
        if not _is_skipped_module(value):
            guards.add(GuardKind.ID_MATCH, source, value)
        return PythonModuleVariable(value, source=source)
    if type(value) is functools.partial:
        guards.add(GuardKind.TYPE_MATCH, source, functools.partial)
        fn = wrap_value(tx, value.func, _attr(source, "func"))
        args = wrap_value(tx, value.args, _attr(source, "args")).unpack_var_sequence(tx)
        kwargs = wrap_value(tx, value.keywords, _attr(source, "keywords")).items
        return PartialVariable(fn, args, kwargs, outside=value, source=source)
    if isinstance(value, types.FunctionType):
        if _is_skipped_function(value):
            guards.add(GuardKind.ID_MATCH, source, value)
            return wrap_constant_like(tx, value)
        _guard_function(guards, value, source)
        return UserFunctionVariable(value, source=source)
    if isinstance(value, types.BuiltinMethodType) and isinstance(value.__self__, torch.Tensor):
        # `x.add` reached as a value (e.g. passed to a resume function): a tensor method
        guards.add(GuardKind.TYPE_MATCH, source, type(value))
        guards.add(GuardKind.CONSTANT_MATCH, _attr(source, "__name__"), value.__name__)
        tensor = wrap_value(tx, value.__self__, _attr(source, "__self__"))
        return TensorMethodVariable(tensor, value.__name__)
    if isinstance(value, types.MethodType) and isinstance(value.__func__, types.FunctionType):
        guards.add(GuardKind.ID_MATCH, _attr(source, "__func__"), value.__func__)
        obj = wrap_value(tx, value.__self__, _attr(source, "__self__"))
        var = UserMethodVariable(value.__func__, obj, source=source)
        var.source_is_method = True  # (the bound method's own source, not its function's)
        return var
    if torch_queries.is_query(value):  # (torch._C._get_tracing_state is bound to no module)
        guards.add(GuardKind.ID_MATCH, source, value)
        return TorchVariable(value, source=source)
    if _torch_lru_cached(value):  # as the user's (Note [Stdlib: lru_cache'd functions])
        guards.add(GuardKind.ID_MATCH, source, value)
        return UserDefinedObjectVariable(value, source=source)
    if _is_builtin(value) or is_torch_callable(value):
        guards.add(GuardKind.ID_MATCH, source, value)
        return wrap_constant_like(tx, value)
    if isinstance(value, type):
        guards.add(GuardKind.ID_MATCH, source, value)
        if issubclass(value, torch.Tensor) or is_torch_callable(value):
            return TorchVariable(value, source=source)
        return UserDefinedClassVariable(value, source=source)
    if probe(value, "__objclass__", None) in (torch._C.TensorBase, torch.Tensor):
        guards.add(GuardKind.ID_MATCH, source, value)  # `torch.Tensor.add` reached from a source
        return TensorMethodDescriptorVariable(value, source=source)
    # (no hasattr(value, "__dict__"): reading it makes the dict of a partial or a method-less
    # object, which changes what Python does with it later: partial(p, ...) no longer flattens p)
    has_dict = type(value).__dictoffset__ != 0 or hasattr(value, "__dict__")
    if callable(value) and not has_dict:
        if type(value) is misc.METHOD_WRAPPER and type(value.__self__) in misc.C_DESCRIPTORS:
            # `Cls.slot.__get__`: a new method-wrapper per access, over a lasting descriptor
            guards.add(GuardKind.ID_MATCH, _attr(source, "__self__"), value.__self__)
            guards.add(GuardKind.CONSTANT_MATCH, _attr(source, "__name__"), value.__name__)
        elif _is_bound_c_method(value):
            # Python makes a new bound object per access (`out.keys`), so an identity guard would
            # fail on every call; it is reloaded from its source, so pin what it is bound to.
            guards.add(GuardKind.TYPE_MATCH, _attr(source, "__self__"), type(value.__self__))
            guards.add(GuardKind.CONSTANT_MATCH, _attr(source, "__name__"), value.__name__)
        else:
            guards.add(GuardKind.ID_MATCH, source, value)
        return OpaqueCallableVariable(value, source=source)
    made = set_subclass.wrap_input(tx, value, source)  # Note [Sets: subclass instances]
    if made is not None:
        return made
    made = weak_dicts.wrap_input(tx, value, source)  # Note [Dicts: weak-key dictionaries]
    if made is not None:
        return made
    guards.add(GuardKind.TYPE_MATCH, source, type(value))
    return UserDefinedObjectVariable(value, source=source)


def _guard_function(guards, fn, source):
    """A user function is pinned by its code, globals and literal defaults (its closure
    contents are guarded where they are read), so a closure made again per call with the
    same code and cell contents does not recompile.

    A function without defaults gets no guard on them: a call traced through it bound every
    parameter explicitly (a call that does not bind breaks the graph), and defaults given to
    it later would not change that binding. Most inlined functions have none: a decoder's guard
    skips 40 functions' two checks on every call.
    """
    guards.add(GuardKind.ID_MATCH, _attr(source, "__code__"), fn.__code__)
    guards.add(GuardKind.ID_MATCH, _attr(source, "__globals__"), fn.__globals__)
    defaults = fn.__defaults__
    if defaults is None:
        pass
    elif all(is_literal(d) for d in defaults):
        guards.add(GuardKind.CONSTANT_MATCH, _attr(source, "__defaults__"), defaults)
    else:
        guards.add(GuardKind.LIST_LENGTH, _attr(source, "__defaults__"), (tuple, len(defaults)))
        for i, d in enumerate(defaults):
            if is_literal(d):
                guards.add(
                    GuardKind.CONSTANT_MATCH, GetItemSource(_attr(source, "__defaults__"), i), d
                )
    kw = fn.__kwdefaults__
    if kw is not None:
        guards.add(GuardKind.DICT_KEYS, _attr(source, "__kwdefaults__"), (dict, tuple(kw)))
        for k, d in kw.items():
            if is_literal(d):
                guards.add(
                    GuardKind.CONSTANT_MATCH, GetItemSource(_attr(source, "__kwdefaults__"), k), d
                )


def _is_bound_c_method(value):
    """`obj.method` of a C method or slot wrapper (`d.__setitem__`) bound to an ordinary object
    (not a module, class or None)."""
    return isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)) and not isinstance(
        value.__self__, (types.NoneType, types.ModuleType, type)
    )


def _is_builtin(value):
    if isinstance(value, types.BuiltinFunctionType) and probe(value, "__module__", "") == "math":
        return True
    return id(value) in _BUILTIN_IDS  # (not `in a set`: that runs a user __hash__ / __eq__)


def _attr(source, name):
    return AttrSource(source, name)


def _builtin_fns():
    fns = {v for v in vars(builtins).values() if isinstance(v, types.BuiltinFunctionType)}
    fns |= {
        range,
        tuple,
        list,
        dict,
        int,
        float,
        bool,
        str,
        enumerate,
        zip,
        reversed,
        type,
        super,
        slice,
    }
    fns |= {v for v in vars(operator).values() if isinstance(v, types.BuiltinFunctionType)}
    fns |= {functools.reduce, functools.partial, itertools.product, itertools.chain}
    fns.add(sys.exc_info)  # Note [Torch: no active exception]
    fns.add(itertools.tee)  # Note [Stdlib: itertools.tee]
    fns.add(bytes)
    if hasattr(collections, "_count_elements"):  # Counter's C helper (stdlib.CALLS models it)
        fns.add(collections._count_elements)
    return frozenset(fns)


_BUILTIN_FNS = _builtin_fns()
_BUILTIN_IDS = frozenset(id(f) for f in _BUILTIN_FNS)
_SIGNATURE = inspect.signature


register_builder(wrap_value, wrap_constant_like)
numpy_shapes.register()
