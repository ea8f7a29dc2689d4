"""nn.Module instances: attributes, submodules, parameters (lifted as graph inputs), calls."""

import inspect
import types

import torch
from torch.nn.modules import module as _module_py

from kiln.bytecode import emit
from kiln.exc import Unsupported, unimplemented
from kiln.frontend.distributed import is_fsdp
from kiln.frontend.guards import GuardKind
from kiln.frontend.markers import kiln_marker
from kiln.frontend.source import AttrSource, GetItemSource
from kiln.frontend.variables import lazy_modules
from kiln.frontend.variables.base import (
    VariableTracker,
    wrap_constant_like,
    wrap_loaded,
    wrap_value,
)
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.constant import ConstantVariable as Const
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.functions import (
    UserMethodVariable,
    inline_call,
    pin_class_attr,
)
from kiln.frontend.variables.lists import ListIteratorVariable, TupleVariable
from kiln.frontend.variables.misc import wrap_frozen
from kiln.frontend.variables.user_defined import _dunder_missing

_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


def _shallow_forward(mod):
    """Whether mod's class forward is kiln.disable(forward, recursive=False)."""
    forward = inspect.getattr_static(type(mod), "forward", None)
    return "forward" not in mod.__dict__ and kiln_marker(forward, "_kiln_shallow") is not None


def _no_global_hooks():
    g = torch.nn.modules.module
    if g._global_forward_hooks or g._global_forward_pre_hooks:
        unimplemented("global module hooks")
    if g._global_backward_hooks or getattr(g, "_global_backward_pre_hooks", None):
        unimplemented("global module hooks")


_MISSING = object()


def _class_attr(cls, name):
    """`name` from the dicts of cls's MRO (what instance lookup finds on the class), or _MISSING.

    Note [Modules: attribute order]
    `mod.name` is looked up as Python does for any object: a data descriptor on the class
    (a property), then the instance __dict__, then any other class attribute (methods, class
    variables), and only when all of these miss, nn.Module.__getattr__ with _parameters,
    _buffers and _modules. So a method named like a registered submodule is the method.
    """
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return _MISSING


def _is_data_descriptor(value):
    typ = type(value)
    return hasattr(typ, "__set__") or hasattr(typ, "__delete__")


def _kwargs(kwargs):
    """The keyword arguments of a module call as the dict a with_kwargs hook receives."""
    return ConstDictVariable(kwargs)


def _args_kwargs_pair(tx, result):
    """(args, kwargs) from a with_kwargs pre-hook's non-None result: an (args, kwargs) pair."""
    pair = result.unpack_var_sequence(tx) if isinstance(result, TupleVariable) else None
    if not pair or len(pair) != 2 or not isinstance(pair[1], ConstDictVariable):
        unimplemented(f"a forward pre-hook with kwargs returned {result}, not (args, kwargs)")
    args = pair[0].unpack_var_sequence(tx)
    if not all(isinstance(k, str) for k in pair[1].items):
        unimplemented("a forward pre-hook returned kwargs with a key that is not a string")
    return list(args), dict(pair[1].items)


_MODULE_GETATTR = torch.nn.Module.__getattr__


class NNModuleVariable(VariableTracker):
    """An nn.Module reached from a source (an argument, a global, an attribute of one)."""

    def __init__(self, module, **kw):
        super().__init__(**kw)
        self.value = module

    def python_type(self):
        return type(self.value)

    def _sub_source(self, dict_name, key):
        if self.source is None:
            return None
        return GetItemSource(AttrSource(self.source, dict_name), key)

    def _child(self, tx, name):
        mod = self.value
        if tx.output.module_overrides:  # Note [Modules: functional_call]
            override = tx.output.module_overrides.get((id(mod), name))
            if override is not None:
                return override
        d = mod.__dict__
        if name in d.get("_parameters", {}):
            return wrap_value(tx, d["_parameters"][name], self._sub_source("_parameters", name))
        if name in d.get("_buffers", {}):
            return wrap_value(tx, d["_buffers"][name], self._sub_source("_buffers", name))
        if name in d.get("_modules", {}):
            return wrap_value(tx, d["_modules"][name], self._sub_source("_modules", name))
        return None

    def hasattr(self, tx, name):
        if tx.output.side_effects.load_attr(self, name) is not None:
            return ConstantVariable(True)
        if (id(self.value), name) in tx.output.module_overrides:  # Note [Modules: functional_call]
            return ConstantVariable(True)
        found = hasattr(self.value, name)
        if not found and self.source is not None:
            self._guard_attr_dicts(tx)  # (an attribute set later recompiles)
        return ConstantVariable(found)

    def truthy(self, tx):
        """bool(module): a container's length (its own __len__); True for a module whose class
        defines neither __bool__ nor __len__, as for any object."""
        cls = type(self.value)
        if isinstance(self.value, _CONTAINERS) and not hasattr(cls, "__bool__"):
            owner = next(k for k in cls.__mro__ if "__len__" in vars(k))
            if owner in _CONTAINERS:
                return self.call_method(tx, "__len__", [], {}).as_python_constant() != 0
        if not hasattr(cls, "__bool__") and not hasattr(cls, "__len__"):
            return True
        unimplemented(f"bool() of a {cls.__name__} (its own __bool__ or __len__)")

    def _guard_attr_dicts(self, tx):
        """Guard the keys of the dicts Module.__getattr__ looks in (the instance __dict__,
        _parameters, _buffers, _modules): where an attribute kiln found missing could appear."""
        mod = self.value
        for attr, d in [("__dict__", mod.__dict__)] + [
            (k, mod.__dict__.get(k)) for k in ("_parameters", "_buffers", "_modules")
        ]:
            if type(d) is not dict:
                continue
            source = AttrSource(self.source, attr)
            tx.output.guards.add(GuardKind.DICT_KEYS, source, (dict, tuple(d)))

    def missing_attr(self, tx, name):
        """`mod.name` found nowhere: Module.__getattr__ raises AttributeError (kiln raises it
        in the traced code, with guards on where it could appear), else a break."""
        cls = type(self.value)
        _dunder_missing(cls, name)
        if (
            inspect.getattr_static(cls, "__getattr__", None) is not torch.nn.Module.__getattr__
            or cls.__getattribute__ is not object.__getattribute__
        ):
            unimplemented(f"{cls.__name__} has no attribute {name!r} (a custom __getattr__)")
        self._guard_attr_dicts(tx)
        raise_observed(tx, AttributeError, f"{cls.__name__!r} object has no attribute {name!r}")

    def var_getattr(self, tx, name):
        if self.source is None:
            unimplemented("attribute of a module without a source")
        if name in _PARAMETER_LISTINGS and id(self.value) in tx.output.__dict__.get(
            "replaced_parameters", ()
        ):
            unimplemented(f"{type(self.value).__name__}.{name} after a parameter was replaced")
        if tx.output.module_overrides:  # Note [Modules: functional_call]
            override = tx.output.module_overrides.get((id(self.value), name))
            if override is not None:
                return override
            if name in _STATE_LISTINGS:
                unimplemented(f"{type(self.value).__name__}.{name} inside functional_call")
        stored = tx.output.side_effects.load_attr(self, name)
        if stored is not None:
            return stored
        if name == "__class__":  # pinned by the TYPE_MATCH guard on the module
            return wrap_constant_like(tx, type(self.value))
        # Note [Modules: attribute order]: Python's order, then Module.__getattr__'s dicts.
        mod = self.value
        static = _class_attr(type(mod), name)
        is_data_descriptor = static is not _MISSING and _is_data_descriptor(static)
        if name in mod.__dict__ and not is_data_descriptor:
            return wrap_loaded(tx, mod.__dict__[name], AttrSource(self.source, name))
        if static is not _MISSING and not is_data_descriptor:  # (set on the instance, it wins)
            tx.output.guards.add(GuardKind.NOT_IN, AttrSource(self.source, "__dict__"), name)
        hook = inspect.getattr_static(type(mod), "__getattr__", None)
        if (
            static is _MISSING
            and isinstance(hook, types.FunctionType)
            and hook is not _MODULE_GETATTR
        ):
            # a module class's own __getattr__ runs for every name the ordinary lookup misses
            # (its parameters, buffers and submodules too): inlined
            if type(mod).__getattribute__ is not object.__getattribute__:
                unimplemented(f"{type(mod).__name__} has a custom __getattribute__")
            src = self._class_attr_source("__getattr__")
            return inline_call(tx, hook, [self, Const(name)], {}, src)
        if static is _MISSING:
            child = self._child(tx, name)
            if child is not None:
                return child
            self.missing_attr(tx, name)
        if isinstance(static, staticmethod):
            pin_class_attr(tx, self._class_attr_source(name), static.__func__)
            return wrap_value(tx, static.__func__, None)
        if isinstance(static, classmethod):
            pin_class_attr(tx, self._class_attr_source(name, "__func__"), static.__func__)
            return UserMethodVariable(static.__func__, wrap_constant_like(tx, type(mod)))
        if inspect.isfunction(static):
            source = self._class_attr_source(name)
            pin_class_attr(tx, source, static)
            if static is torch.nn.Module.to:  # Note [Modules: a .to() that changes nothing]
                return ModuleToVariable(self, UserMethodVariable(static, self, source=source))
            return UserMethodVariable(static, self, source=source)
        if isinstance(static, property) and isinstance(static.fget, types.FunctionType):
            source = self._class_attr_source(name, "fget")
            pin_class_attr(tx, source, static.fget)
            return inline_call(tx, static.fget, [self], {}, source)
        # (a property implemented in C, e.g. pybind11's def_readonly: read, guarded by source)
        return wrap_value(tx, getattr(mod, name), AttrSource(self.source, name))

    def unpack_var_sequence(self, tx):
        mod = self.value
        if isinstance(mod, (torch.nn.Sequential, torch.nn.ModuleList)):
            return [self._child(tx, k) for k in mod._modules]
        if isinstance(mod, torch.nn.ModuleDict):
            return [ConstantVariable(k) for k in mod._modules]
        if isinstance(mod, (torch.nn.ParameterList,)):
            return [self._child(tx, k) for k in mod._parameters]
        unimplemented(f"iteration over {type(mod).__name__}")

    def call_function(self, tx, args, kwargs):
        call = type(self.value).__call__
        if call is torch.nn.Module.__call__:
            return self.call_module(tx, args, kwargs)
        # Note [Modules: an overriding __call__]
        # A class may wrap Module.__call__ (transformers' GradientCheckpointingLayer does, to
        # switch to checkpointing in training): its __call__ is inlined like any method, guarded
        # by its source, and the `super().__call__(...)` inside it comes back to call_module
        # (inline_call routes Module.__call__ and _call_impl on a module here).
        if not inspect.isfunction(call):
            unimplemented(f"{type(self.value).__name__}.__call__ is not a Python function")
        return inline_call(tx, call, [self, *args], kwargs, self._class_attr_source("__call__"))

    def call_module(self, tx, args, kwargs):
        """Module.__call__ itself: forward, with the module's forward hooks when it has any."""
        mod = self.value
        if self.source is None:
            unimplemented("calling a module without a source")
        if is_fsdp(mod):  # Note [Modules: hooks around a compiled forward]
            unimplemented(
                f"a fully_shard {type(mod).__name__}: FSDP's hooks (all-gather, reshard) run in "
                "Python around its forward, compiled as a frame of its own"
            )
        if lazy_modules.is_uninitialized(mod):  # Note [Modules: lazy modules initialized ...]
            lazy_modules.initialize(tx, mod, args, kwargs)
        hooked = bool(mod._forward_hooks or mod._forward_pre_hooks)
        if mod._backward_hooks or getattr(mod, "_backward_pre_hooks", None):
            unimplemented(f"backward hooks on {type(mod).__name__}")
        _no_global_hooks()
        tx.output.uses_modules = True  # (`mod(x)` runs type(mod).__call__: an instance's is unused)
        forward = self._forward(tx)
        try:
            if not hooked:
                tx.output.guards.add(GuardKind.NO_HOOKS, self.source)
                return forward(args, kwargs)
            return self._call_with_hooks(tx, forward, args, kwargs)
        except Unsupported as e:
            # a hook that breaks, or a forward disabled with recursive=False: the call runs
            # through kiln's frame entry, its hooks in Python around its forward compiled (Note
            # [Modules: hooks around a compiled forward]), or that forward's callees compiled
            if hooked or _shallow_forward(mod):
                e.module_call_broke = True
            raise

    def _forward(self, tx):
        """`mod.forward` as Module.__call__ finds it, as a call of (args, kwargs).

        Note [Modules: which forward a call runs]
        Module.__call__ runs `self.forward`: a method bound to the module and stored on the
        instance (`mod.forward = types.MethodType(f, mod)`) wins over the class's forward, and a
        staticmethod forward, or a plain function stored on the instance, takes no self. The instance dict is guarded either way: a forward
        set on the instance after compiling (or removed from it) recompiles.
        """
        mod = self.value
        own = mod.__dict__.get("forward")
        if inspect.isfunction(own):  # `mod.forward = f`: called as f(*args), with no self
            src = AttrSource(self.source, "forward")
            tx.output.guards.add(GuardKind.ID_MATCH, src, own)
            return lambda args, kwargs: inline_call(tx, own, list(args), kwargs, src)
        if own is not None:
            bound = isinstance(own, types.MethodType) and own.__self__ is mod
            if not (bound and inspect.isfunction(own.__func__)):
                unimplemented("module with an instance-level forward that is no method of it")
            src = AttrSource(self.source, "forward")
            fn_src = AttrSource(src, "__func__")
            tx.output.guards.add(GuardKind.ID_MATCH, fn_src, own.__func__)
            tx.output.guards.add(GuardKind.ALIASING, AttrSource(src, "__self__"), self.source)
            return lambda args, kwargs: inline_call(tx, own.__func__, [self, *args], kwargs, fn_src)
        tx.output.guards.add(GuardKind.NOT_IN, AttrSource(self.source, "__dict__"), "forward")
        static = inspect.getattr_static(type(mod), "forward")
        src = self._class_attr_source("forward")
        if isinstance(static, staticmethod) and inspect.isfunction(static.__func__):
            return lambda args, kwargs: inline_call(tx, static.__func__, list(args), kwargs, src)
        if not inspect.isfunction(static):
            unimplemented(f"{type(mod).__name__}.forward is not a Python function")
        return lambda args, kwargs: inline_call(tx, static, [self, *args], kwargs, src)

    def _call_with_hooks(self, tx, forward, args, kwargs):
        """Module.__call__ with forward pre-hooks and forward hooks, traced like it runs them.

        Note [Modules: forward hooks]
        `_call_impl` calls each pre-hook as hook(module, args) (a non-None result replaces args,
        a non-tuple one wrapped in a tuple), or, registered `with_kwargs=True`, as
        hook(module, args, kwargs) (a non-None result must be an (args, kwargs) pair, which
        replaces both); then forward, then each hook as hook(module, args, output), or
        hook(module, args, kwargs, output) with kwargs (a non-None result replaces the output).
        The hook dictionaries are guarded by their keys (a hook added or removed recompiles) and
        each hook by what it is; hooks always called (even when forward raises) and backward
        hooks are not traced.
        """
        mod = self.value
        if getattr(mod, "_forward_hooks_always_called", None):
            unimplemented(f"always-called forward hooks on {type(mod).__name__}")
        guards = tx.output.guards
        for name in (
            "_forward_pre_hooks",
            "_forward_hooks",
            "_backward_hooks",
            "_backward_pre_hooks",
            "_forward_hooks_with_kwargs",
            "_forward_pre_hooks_with_kwargs",
            "_forward_hooks_always_called",
        ):
            d = getattr(mod, name, None)
            if d is not None:
                guards.add(GuardKind.DICT_KEYS, AttrSource(self.source, name), (type(d), tuple(d)))

        def hooks(name):
            src = AttrSource(self.source, name)
            return [
                (k, wrap_value(tx, h, GetItemSource(src, k))) for k, h in getattr(mod, name).items()
            ]

        pre_kw = set(getattr(mod, "_forward_pre_hooks_with_kwargs", {}))
        post_kw = set(getattr(mod, "_forward_hooks_with_kwargs", {}))
        args, kwargs = list(args), dict(kwargs)
        for key, hook in hooks("_forward_pre_hooks"):
            if key in pre_kw:
                result = hook.call_function(tx, [self, TupleVariable(args), _kwargs(kwargs)], {})
                if not (isinstance(result, Const) and result.value is None):
                    args, kwargs = _args_kwargs_pair(tx, result)
                continue
            result = hook.call_function(tx, [self, TupleVariable(list(args))], {})
            if not (isinstance(result, Const) and result.value is None):
                args = (
                    result.unpack_var_sequence(tx)
                    if isinstance(result, TupleVariable)
                    else [result]
                )
        out = forward(args, kwargs)
        for key, hook in hooks("_forward_hooks"):
            hook_args = [self, TupleVariable(list(args))]
            if key in post_kw:
                hook_args.append(_kwargs(kwargs))
            result = hook.call_function(tx, [*hook_args, out], {})
            if not (isinstance(result, Const) and result.value is None):
                out = result
        return out

    def call_method(self, tx, name, args, kwargs):
        mod = self.value
        if name == "forward" and self.source is not None:
            return self._forward(tx)(args, kwargs)  # Note [Modules: which forward a call runs]
        if name == "forward":
            forward = inspect.getattr_static(type(mod), "forward")
            return inline_call(tx, forward, [self, *args], kwargs, None)
        if name == "__getitem__" and isinstance(mod, _CONTAINERS) and len(args) == 1:
            key = args[0].as_python_constant()
            if isinstance(mod, torch.nn.ModuleDict):
                return self._child(tx, key)
            keys = list(mod._modules)
            if isinstance(key, slice):
                return ModuleSliceVariable([self._child(tx, k) for k in keys[key]], type(mod))
            return self._child(tx, keys[key])
        if name == "__len__" and isinstance(mod, _CONTAINERS):
            return ConstantVariable(len(mod._modules))
        if name in ("children", "parameters", "buffers", "named_parameters", "named_children"):
            if args or kwargs:
                unimplemented(f"Module.{name} with arguments")
            return self._iterate(tx, name)
        if name in ("keys", "values", "items") and isinstance(mod, torch.nn.ModuleDict):
            keys = list(mod._modules)
            if name == "keys":
                return ListIteratorVariable([ConstantVariable(k) for k in keys])
            if name == "values":
                return ListIteratorVariable([self._child(tx, k) for k in keys])
            return ListIteratorVariable(
                [TupleVariable([ConstantVariable(k), self._child(tx, k)]) for k in keys]
            )
        return super().call_method(tx, name, args, kwargs)

    # Note [Modules: a .to() that changes nothing]
    # `self.classifier = self.classifier.to(self.dtype)` in a forward (transformers' Switch
    # Transformers router) converts nothing when every parameter and buffer already has the dtype
    # and device asked for: eager's Module.to then returns the module itself, having replaced
    # each tensor by itself. kiln answers so without tracing Module._apply: the arguments are
    # parsed as eager parses them (constants only), each parameter and buffer is read through
    # its source (its dtype and device guarded, as every tensor the trace reads), and the call
    # is the module. Storing the same module back into its attribute is a no-op
    # (translator.STORE_ATTR). A .to() that would convert something stays a graph break.
    def _to_changes_nothing(self, tx, args, kwargs):
        """Whether `module.to(*args, **kwargs)` would leave every tensor as it is."""
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            return False
        try:
            device, dtype, _, memory_format = torch._C._nn._parse_to(
                *[a.as_python_constant() for a in args],
                **{k: v.as_python_constant() for k, v in kwargs.items()},
            )
        except Exception:  # (eager raises: the traced call says so)
            return False
        if memory_format is not None or (
            dtype is not None and not (dtype.is_floating_point or dtype.is_complex)
        ):
            return False
        for tensor in self._tensors(tx):
            ex = tensor.example
            if device is not None and (
                tensor.device.type != device.type or device.index not in (None, tensor.device.index)
            ):
                return False
            if dtype is not None and (ex.is_floating_point() or ex.is_complex()):
                if ex.dtype != dtype:
                    return False
        return True

    def _tensors(self, tx):
        """The variables of every parameter and buffer of the module and its submodules."""
        d = self.value.__dict__
        for kind in ("_parameters", "_buffers"):
            for k, t in d.get(kind, {}).items():
                if t is not None:
                    yield self._child(tx, k)
        for k, m in d.get("_modules", {}).items():
            child = self._child(tx, k) if m is not None else None
            if child is not None:
                if not isinstance(child, NNModuleVariable):
                    unimplemented(f"Module.to over the submodule {k!r} ({type(m).__name__})")
                yield from child._tensors(tx)

    def _iterate(self, tx, name):
        mod = self.value
        if name == "children":
            return ListIteratorVariable([self._child(tx, k) for k in mod._modules])
        if name == "named_children":
            return ListIteratorVariable(
                [TupleVariable([ConstantVariable(k), self._child(tx, k)]) for k in mod._modules]
            )
        if mod._modules and name != "buffers":
            unimplemented(f"Module.{name}() of a module with submodules")
        if name == "buffers":
            if mod._modules:
                unimplemented("Module.buffers() of a module with submodules")
            return ListIteratorVariable([self._child(tx, k) for k in mod._buffers])
        if name == "parameters":
            return ListIteratorVariable(
                [self._child(tx, k) for k, v in mod._parameters.items() if v is not None]
            )
        return ListIteratorVariable(
            [
                TupleVariable([ConstantVariable(k), self._child(tx, k)])
                for k, v in mod._parameters.items()
                if v is not None
            ]
        )

    def reconstruct(self, cg):
        if cg.compile_callees and self.source is not None:
            # a module whose call broke the graph inside: call it through kiln's frame entry
            forward = inspect.getattr_static(type(self.value), "forward")
            cg.load_object(types.MethodType, push_null=True)
            cg.load_object(cg.callee(forward, module_root=True))
            self.source.reconstruct(cg)
            cg.extend(emit.call(2))
            return
        super().reconstruct(cg)

    def __repr__(self):
        return f"NNModuleVariable({type(self.value).__name__})"


class ModuleToVariable(VariableTracker):
    """`module.to` before it is called: the module itself when the call converts nothing."""

    def __init__(self, module, method, **kw):
        super().__init__(**kw)
        self.module, self.method = module, method

    def call_function(self, tx, args, kwargs):
        if self.module._to_changes_nothing(tx, args, kwargs):
            return self.module
        return self.method.call_function(tx, args, kwargs)

    def var_getattr(self, tx, name):
        return self.method.var_getattr(tx, name)

    def reconstruct(self, cg):
        self.method.reconstruct(cg)


class ModuleSliceVariable(VariableTracker):
    """`layers[a:b]` of a ModuleList/Sequential: its submodules, to iterate over, index or len().
    (Python builds a new container module; kiln does not rebuild one.)"""

    def __init__(self, items, cls, **kw):
        super().__init__(**kw)
        self.items = items
        self.cls = cls

    def python_type(self):
        return self.cls

    def unpack_var_sequence(self, tx):
        return list(self.items)

    def call_method(self, tx, name, args, kwargs):
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "__getitem__" and len(args) == 1:
            key = args[0].as_python_constant()
            if isinstance(key, slice):
                return ModuleSliceVariable(self.items[key], self.cls)
            return self.items[key]
        unimplemented(f"{self.cls.__name__} slice .{name}")

    def call_function(self, tx, args, kwargs):
        if self.cls is not torch.nn.Sequential:
            unimplemented(f"calling a {self.cls.__name__}")
        out = args[0]
        for m in self.items:
            out = m.call_function(tx, [out], {})
        return out


# Note [Modules: built while tracing]
# `loss_fct = CrossEntropyLoss()` inside a forward (Hugging Face heads do it) makes a module per
# call. For torch's parameter-free modules (losses, activations, dropout, pooling, padding,
# Flatten, Identity ...) built from constant arguments, kiln builds the module itself while
# tracing (their __init__ only stores the arguments: no RNG draw, no tensor, no global state)
# and traces its forward like any module's. If the module escapes the frame (returned, stored)
# the transformed code builds it again with the same arguments, which gives an equal module.
# Modules with parameters or buffers (their __init__ draws random weights) are never built:
# the construction breaks the graph and runs in Python.
_BUILDABLE_FILES = (
    "activation",
    "distance",
    "dropout",
    "flatten",
    "fold",
    "loss",
    "padding",
    "pixelshuffle",
    "pooling",
    "channelshuffle",
    "upsampling",
)


# what lists a module's parameters: stale after one was replaced in the frame (the replay sets it)
_PARAMETER_LISTINGS = frozenset(
    {"_parameters", "parameters", "named_parameters", "state_dict", "_named_members", "__dict__"}
)
# (and of buffers: what a module's state reads list, which functional_call's tensors stand in for)
_STATE_LISTINGS = _PARAMETER_LISTINGS | {"_buffers", "buffers", "named_buffers"}


def replaces_parameter(tx, module, value):
    """Whether `module.name = value` (name a parameter of it) is traced: value is a Parameter
    (Note [Modules: parameters made in the frame]), the module an input's, no registration hooks.
    Its parameter listings are a break afterwards in the frame."""
    if type(module) is not NNModuleVariable or module.source is None:
        return False
    if not hasattr(value, "proxy") or value.python_type() is not torch.nn.Parameter:
        return False
    if _module_py._global_parameter_registration_hooks:
        return False
    tx.output.__dict__.setdefault("replaced_parameters", set()).add(id(module.value))
    return True


def is_torch_function(value):
    """A function of torch's (F.gelu, torch.relu): as constant as the torch module holding it."""
    if not isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
        return False
    return (getattr(value, "__module__", None) or "").split(".")[0] == "torch"


def buildable_module(cls):
    """Whether kiln may build a `cls(...)` (of constant arguments) while tracing."""
    mod = cls.__module__ or ""
    if cls in (torch.nn.PReLU, torch.nn.MultiheadAttention):
        return False  # parameters
    if cls is torch.nn.Identity:
        return True
    prefix = "torch.nn.modules."
    return mod.startswith(prefix) and mod[len(prefix) :] in _BUILDABLE_FILES


def build_module(tx, cls, args, kwargs):
    """`cls(*args, **kwargs)` made while tracing (Note [Modules: built while tracing])."""

    def const(v):
        if not v.is_python_constant() or not _literal_tree(v.as_python_constant(), is_literal):
            unimplemented(f"creating a {cls.__name__} module from a non-constant argument")
        return v.as_python_constant()

    cargs = [const(a) for a in args]
    ckwargs = {k: const(v) for k, v in kwargs.items()}
    try:
        mod = cls(*cargs, **ckwargs)
    except Exception as e:
        unimplemented(f"{cls.__name__}(...) raised {type(e).__name__}: {e}")
    state = [*mod._parameters.values(), *mod._buffers.values()]
    if mod._modules or any(v is not None for v in state):
        unimplemented(f"creating a {cls.__name__} module with state inside the compiled frame")
    return NewModuleVariable(mod, args, kwargs)


def _literal_tree(value, is_literal):
    if isinstance(value, (tuple, list)):
        return all(_literal_tree(v, is_literal) for v in value)
    return is_literal(value)


class NewModuleVariable(NNModuleVariable):
    """A parameter-free torch module built while tracing: attributes are its own constants."""

    def __init__(self, module, ctor_args, ctor_kwargs, **kw):
        super().__init__(module, **kw)
        self.ctor_args = list(ctor_args)
        self.ctor_kwargs = dict(ctor_kwargs)

    def var_getattr(self, tx, name):
        mod = self.value
        if name in mod._parameters or name in mod._buffers:
            return ConstantVariable(None)  # (an optional weight left out: None)
        if name in mod.__dict__:
            value = mod.__dict__[name]
            if is_torch_function(value):  # (`self.act = F.gelu` in its __init__)
                return wrap_constant_like(tx, value)
            return wrap_frozen(value, f"attribute {name!r} of {type(mod).__name__}")
        if name == "__class__":
            return wrap_constant_like(tx, type(mod))
        try:
            static = inspect.getattr_static(type(mod), name)
        except AttributeError:
            unimplemented(f"{type(mod).__name__} has no attribute {name!r}")
        if inspect.isfunction(static):
            return UserMethodVariable(static, self)
        if isinstance(static, property) and static.fget is not None:
            return inline_call(tx, static.fget, [self], {}, None)
        return wrap_frozen(getattr(mod, name), f"attribute {name!r} of {type(mod).__name__}")

    def call_function(self, tx, args, kwargs):
        _no_global_hooks()
        forward = inspect.getattr_static(type(self.value), "forward")
        if not inspect.isfunction(forward):
            unimplemented(f"{type(self.value).__name__}.forward is not a Python function")
        return inline_call(tx, forward, [self, *args], kwargs, None)

    def call_method(self, tx, name, args, kwargs):
        if name == "forward":
            return self.call_function(tx, args, kwargs)
        return VariableTracker.call_method(self, tx, name, args, kwargs)

    def reconstruct(self, cg):
        """`cls(*args, **kwargs)` again: an equal module (the trace never changed it)."""
        temps = getattr(cg, "_temps", {})  # one module however often it is rebuilt
        if id(self) in temps:
            cg.extend(emit.load_fast(temps[id(self)]))
            return
        cg.load_object(type(self.value), push_null=True)
        for a in [*self.ctor_args, *self.ctor_kwargs.values()]:
            cg.reconstruct(a)
        n = len(self.ctor_args) + len(self.ctor_kwargs)
        if self.ctor_kwargs:
            cg.extend(emit.call_kw(n, tuple(self.ctor_kwargs)))
        else:
            cg.extend(emit.call(n))
        name = temps[id(self)] = cg.new_temp()
        cg.extend(emit.copy(1) + emit.store_fast(name))

    def __repr__(self):
        return f"NewModuleVariable({type(self.value).__name__})"
