"""The frontend's entry: a function, method or nn.Module made into frame caches and the wrapper
that users call (`kiln.compile` resolves the backend and calls `compile_callable`)."""

import copy
import types
import weakref

import torch

from kiln import registry
from kiln.contracts import CompileSettings
from kiln.frontend import break_policy, distributed, frame_cache
from kiln.frontend.cache_wrappers import make_wrapper, module_eager
from kiln.frontend.frame_cache import FrameCache, shallow_frame
from kiln.frontend.markers import is_disabled_module, kiln_marker, torchscript_python
from kiln.frontend.variables.functions import is_torch_disabled


def compile_callable(model, settings):
    """The compiled form of `model` (a function, method, callable object or nn.Module) under
    `settings` (kiln.contracts.CompileSettings)."""
    if isinstance(model, OptimizedModule):
        model = model._orig_mod
    if is_disabled_module(model):
        return model
    if isinstance(getattr(model, "_c", None), torch._C.ScriptModule):  # (jit script / trace)
        raise RuntimeError(
            "kiln.compile does not compile a TorchScript module (torch.jit.script, trace or "
            "freeze made it): compile the nn.Module it was made from"
        )
    if isinstance(model, torch.nn.Module):
        return OptimizedModule(model, settings)
    model = torchscript_python(model) or model  # (a TorchScript function: its Python)
    if isinstance(model, type) and issubclass(model, torch.nn.Module):
        return _compiled_class(model, settings)
    if not callable(model):
        raise TypeError(
            f"kiln.compile expects a function or an nn.Module, got {type(model).__name__}"
        )
    if kiln_marker(model, "_kiln_traced_as") == "error_on_graph_break":
        # (a function @error_on_graph_break(v) decorated: compiled, v set around each call)
        inner = compile_callable(model.__wrapped__, settings)
        return break_policy.error_on_graph_break(model._kiln_break_setting)(inner)
    shallow = kiln_marker(model, "_kiln_shallow")
    if shallow is not None:  # kiln.disable(fn, recursive=False): in Python, callees compiled
        bound = isinstance(shallow, types.MethodType)
        cache = FrameCache(shallow.__func__ if bound else shallow, settings)
        shallow_frame(cache)
        wrapper = make_wrapper(cache)
        return types.MethodType(wrapper, shallow.__self__) if bound else wrapper
    if kiln_marker(model, "_kiln_disabled"):
        return model
    if is_torch_disabled(model):  # @torch.compiler.disable / @torch._dynamo.disable: uncompiled
        return model
    if kiln_marker(model, "_kiln_orig_fn"):
        model = model._kiln_orig_fn
    if isinstance(model, types.MethodType):
        inner = compile_callable(model.__func__, settings)
        return types.MethodType(inner, model.__self__)
    if not isinstance(model, types.FunctionType):
        call = vars(type(model)).get("__call__")
        if isinstance(call, types.FunctionType):
            inner = compile_callable(call, settings)
            return types.MethodType(inner, model)
        return compile_callable(_calling(model), settings)  # `kiln.compile(torch.sin)`, a partial
    cache = FrameCache(model, settings)
    return make_wrapper(cache)


frame_cache._module_compiler[:] = [compile_callable]  # modules called from frames run in Python


def _compiled_class(cls, settings):
    """`kiln.compile(SomeModule)`: the class, its forward compiled for every instance (hooks run
    around it in Python, as Module.__call__ runs them)."""
    if is_disabled_module(cls):
        return cls
    forward = cls.forward
    if not kiln_marker(forward, "_kiln_orig_fn"):
        cls.forward = compile_callable(forward, settings)
    return cls


class _ModuleView(torch.nn.Module):
    """A wrapper with no state of its own: attribute reads, writes and deletes act on the module
    it wraps (`_orig_mod`)."""

    def __getattr__(self, name):
        return getattr(self.__dict__["_orig_mod"], name)

    def __setattr__(self, name, value):
        setattr(self.__dict__["_orig_mod"], name, value)

    def __delattr__(self, name):
        delattr(self.__dict__["_orig_mod"], name)

    def __dir__(self):
        return dir(self.__dict__["_orig_mod"])

    # (Python finds dunders on the class, not through __getattr__: an empty ModuleList is falsy)
    def __bool__(self):
        return bool(self.__dict__["_orig_mod"])

    def __len__(self):
        return len(self.__dict__["_orig_mod"])


class DisabledModule(_ModuleView):
    """`kiln.disable(module)`: calls run the module in Python (its hooks included) and compiled
    code calling it breaks the graph; everything else is `_orig_mod`'s (as OptimizedModule)."""

    _kiln_disabled_module = True  # kiln.frontend.markers.is_disabled_module

    def __init__(self, mod):
        self.__dict__["_orig_mod"] = mod

    def __call__(self, *args, **kwargs):
        return self.__dict__["_orig_mod"](*args, **kwargs)

    forward = __call__

    def __repr__(self):
        return f"DisabledModule({self.__dict__['_orig_mod']!r})"


def _calling(target):
    """A Python function whose frame calls `target` (a C function, a partial ...): what kiln
    compiles for a callable with no frame of its own, as torch.compile does."""

    def call(*args, **kwargs):
        return target(*args, **kwargs)

    call.__name__ = call.__qualname__ = getattr(target, "__name__", type(target).__name__)
    return call


# Note [Cache: one per forward and settings]
# `kiln.compile(m)` twice, or on two modules of one class, with the same settings gives wrappers
# over one frame cache of the class's forward (Dynamo's cache lives on the code object, too):
# an entry's guards check everything it read from `self` (they hold for any module they pass on),
# so a second wrapper finds the entries the first one compiled instead of compiling again.
# The table holds the caches by weak reference: a cache lives as long as a wrapper using it.
_FORWARD_CACHES = weakref.WeakKeyDictionary()  # forward function -> [(settings, weakref to cache)]


def _forward_cache(func, settings):
    """The frame cache of the forward function `func` under `settings`, shared by every
    OptimizedModule with that forward."""
    caches = _FORWARD_CACHES.setdefault(func, [])
    caches[:] = [(s, ref) for s, ref in caches if ref() is not None]
    for s, ref in caches:
        if s == settings:
            return ref()
    cache = FrameCache(func, settings, eager=module_eager, module_root=True)
    caches.append((settings, weakref.ref(cache)))
    return cache


class OptimizedModule(_ModuleView):
    """A compiled nn.Module: calls run the compiled forward; everything else is `_orig_mod`'s.

    It holds no state of its own: attribute reads, writes and deletes, state_dict(),
    parameters(), train()/eval() ... act on the original module, so `torch.save(m._orig_mod)`
    and optimizers built from `m.parameters()` see the same objects.
    """

    _kiln_optimized_module = True  # kiln.frontend.markers.is_optimized_module

    def __init__(self, mod, settings):
        d = self.__dict__
        d["_orig_mod"] = mod
        d["_kiln_settings"] = settings
        d["_kiln_own_forward"] = vars(mod).get("forward")  # Note [Entry: a forward set later]
        forward = mod.forward
        if distributed.is_ddp(mod):  # Note [DDP: DDP's forward stays Python]
            d["_kiln_call"] = distributed.DDPCall(mod, lambda m: OptimizedModule(m, settings))
            d["_kiln_cache"] = None
            return
        if distributed.is_fsdp(mod):  # Note [FSDP: hooks stay Python]
            blocks = [
                (b, compile_callable(b.forward, settings)) for b in distributed.fsdp_blocks(mod)
            ]
            d["_kiln_call"] = distributed.HookedModuleCall(
                mod, compile_callable(forward, settings), blocks
            )
            d["_kiln_cache"] = None
            return
        if isinstance(forward, types.MethodType) and forward.__self__ is mod:
            cache = _forward_cache(forward.__func__, settings)
            d["_kiln_call"] = types.MethodType(make_wrapper(cache), mod)
        else:
            d["_kiln_call"] = compile_callable(forward, settings)
            cache = d["_kiln_call"]._kiln_cache if hasattr(d["_kiln_call"], "_kiln_cache") else None
        d["_kiln_cache"] = cache

    # Note [Entry: a forward set later]
    # `mod(x)` runs whatever `mod.forward` is at the call: a forward stored on the instance after
    # the compile (or one removed from it) replaces the function compiled. The call is chosen
    # when the module is wrapped, so each call checks the instance's own `forward` (one dict
    # read) and, when it changed, wraps the module again around the new one (traced afresh).
    def _kiln_current_call(self):
        d = self.__dict__
        if vars(d["_orig_mod"]).get("forward") is not d["_kiln_own_forward"]:
            OptimizedModule.__init__(self, d["_orig_mod"], d["_kiln_settings"])
        return d["_kiln_call"]

    def __call__(self, *args, **kwargs):
        return self._kiln_current_call()(*args, **kwargs)

    def forward(self, *args, **kwargs):
        return self._kiln_current_call()(*args, **kwargs)

    def __repr__(self):
        return f"OptimizedModule({self.__dict__['_orig_mod']!r})"

    def __reduce__(self):
        """Pickles as the original module and the compile arguments; unpickling compiles the
        unpickled original again (Note [Entry: a compiled module pickled])."""
        d = self.__dict__
        s = d["_kiln_settings"]
        backend = _backend_by_name(s) or s.backend
        args = (d["_orig_mod"], backend, s.fullgraph, s.dynamic, s.mode, s.options)
        return (_compiled_again, args)

    def __deepcopy__(self, memo):
        """A compiled copy of a deep copy of the original (same compile settings)."""
        d = self.__dict__
        return OptimizedModule(copy.deepcopy(d["_orig_mod"], memo), d["_kiln_settings"])


# Note [Entry: a compiled module pickled]
# torch.save(kiln.compile(m)) stores what the compile was made of, not what it made: the original
# module and the compile arguments. Loading compiles the loaded module again with them (its
# frames are traced on their first call, as any new compile's). A backend given by a registry
# name is stored as the name (its callable, wrapped for mode/options, is rebuilt on load); a
# callable backend is pickled as it is (one that cannot be pickled makes pickling fail).
def _backend_by_name(settings):
    """The registry name `settings`' backend was resolved from, or None for a user callable."""
    name = settings.backend_name
    if name not in registry.list_backends():
        return None
    named = registry.lookup_backend(name)
    if named is settings.backend:
        return name
    # under mode/options the backend is `named.with_options(...)`'s function (kiln/modes.py)
    optioned = hasattr(named, "with_options") and hasattr(settings.backend, "kiln_options")
    return name if optioned else None


def _compiled_again(mod, backend, fullgraph, dynamic, mode, options):
    """An unpickled OptimizedModule: `mod` compiled with the pickled arguments."""
    fn, name = registry.resolve_with_options(backend, mode, options)
    return OptimizedModule(mod, CompileSettings(fn, name, fullgraph, dynamic, mode, options))
