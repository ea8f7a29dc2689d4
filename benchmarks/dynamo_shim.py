"""Maps the entry points that PyTorch's frontend tests use (torch._dynamo.*, torch.compile) onto kiln.

Installed only inside a conformance worker process (`benchmarks/dynamo_conformance.py`), never by
kiln itself: `install()` replaces, in every loaded `torch._dynamo` module and in `torch`, the
entry points below, so that a test written for TorchDynamo compiles its functions with kiln.

| torch entry point                              | under the shim                                       |
| ---------------------------------------------- | ---------------------------------------------------- |
| torch._dynamo.optimize(backend, nopython=)     | kiln.compile(fn, backend=..., fullgraph=nopython)    |
| optimize(guard_fail_fn=f)                      | f(GuardFail) on kiln's guard_failure event of that function |
| torch._dynamo.optimize_assert(backend)         | kiln.compile(fn, backend=..., fullgraph=True)        |
| torch.compile(fn, backend=, fullgraph=, ...)   | kiln.compile(fn, ...) (in compiled code: traced as kiln.compile's call); torch's incompatible-config check, and torch.distributions' argument validation off, as torch.compile does |
| torch.compile(kiln.disable(f)) (and optimize's) | kiln.compile(f), as torch.compile compiles its innermost_fn |
| eval_frame.innermost_fn / is_dynamo_disable_recursive | see through kiln.disable's wrappers (recursive: no `_kiln_shallow`) |
| torch.compile(disable=True), TORCHDYNAMO_DISABLE=1 | kiln.compile(fn, disable=True) (fn uncompiled)   |
| torch._dynamo.reset()                          | kiln.reset() (and torch's own reset)                 |
| torch._dynamo.disable(fn, recursive=) / graph_break / mark_dynamic | kiln.disable / kiln.graph_break / kiln.mark_dynamic |
| torch._dynamo.allow_in_graph / disallow_in_graph | kiln.allow_in_graph / kiln.disallow_in_graph        |
| torch._dynamo.on_compile_start / on_compile_end | kiln.on_compile_start / on_compile_end (the callback gets kiln's CompileEvent) |
| torch._dynamo.nonstrict_trace                   | kiln.nonstrict_trace                                |
| torch._dynamo.decorators.leaf_function          | kiln.leaf_function                                  |
| torch._dynamo.skip_frame / step_unsupported     | kiln.skip_frame / kiln.step_unsupported             |
| torch._dynamo.mark_static(t or module, index)  | kiln.mark_static(t or module, dim)                   |
| torch._dynamo.utils.counters                   | kiln.counters (same key names: frames/ok, stats/unique_graphs) |
| torch._inductor.metrics.generated_kernel_count | grows by the kernels of each graph kiln's backend compiles |
| torch._dynamo.eval_frame.dynamo_tls.traced_frame_infos | one line per frame kiln starts tracing (not its resume functions) |
| torch._dynamo.compiled_autograd._enable(fn)    | kiln.compiled_autograd.enable(fn)                    |
| torch._dynamo.error_on_graph_break(flag)       | kiln.error_on_graph_break(flag)                      |
| torch._dynamo.set_stance (torch.compiler's)    | kiln.set_stance (force_backend through the backend map) |
| torch._dynamo.run(fn) / run()(fn)              | fn under kiln.set_stance("eager_on_recompile"): entries run, a miss runs eagerly |
| torch._dynamo.substitute_in_graph(fn, ...)     | kiln.substitute_in_graph(fn, skip_signature_check=)  |
| torch._dynamo.export(f)(*args)                 | kiln.export(f, args): its graph on the call's arguments (one the graph does not read is not checked, as torch's), its input specs and shape facts as the guards; graph breaks raise Unsupported (as torch's nopython trace) |
| testing.CompileCounterWithBackend(name)        | counts, then runs kiln's backend of that name        |
| testing.unsupported(a, b) (a C function)       | the same in Python under kiln.disable (a graph break) |
| torch._dynamo.exc.Unsupported                  | kiln.exc.Unsupported (what kiln raises under fullgraph) |
| torch._dynamo.exc.RecompileError               | kiln.exc.RecompileError (config.error_on_recompile) |
| symbolic_shapes.ConstraintViolationError       | kiln.exc.ConstraintViolation (a marked dim specialised, or out of its range) |
| torch._dynamo.exc.UserError                    | (kiln.exc.DataDependentError, kiln.exc.UserError): a branch on a value read from tensor data under fullgraph, and the user's mistakes kiln reports |
| torch._dynamo.OptimizedModule                  | kiln.OptimizedModule (the class compile(module) returns) |
| torch._dynamo.config.capture_scalar_outputs    | kiln.config.capture_scalar_outputs (read through)    |
| torch.fx.experimental._config.symbol_guard_limit_before_specialize | kiln.config's (read through) |
| torch._dynamo.config.recompile_limit           | kiln.config.cache_size_limit (read through)          |
| torch._dynamo.config.error_on_recompile        | kiln.config.error_on_recompile (read through)        |
| torch._dynamo.config.leaf_function_check_escaped_gradients | kiln.config's (read through; kiln's default is on) |
| torch._dynamo.config.leaf_function_validate_outputs | kiln.config's (read through; kiln's default is on) |
| torch.compiler.config.dynamic_sources          | kiln.config.dynamic_sources (read through; `L['x']` is kiln's `x`) |
| backend strings "eager", "aot_eager", "inductor" | kiln's "eager", "aot_eager", "kiln"               |
| backend "cudagraphs"                           | kiln's "kiln" with mode="reduce-overhead"            |
| other torch backends (tvm, openxla)            | torch's compiler of that name on kiln's graphs       |

`testing.CompileCounter` needs no mapping: it is a plain backend callable (gm, example_inputs).
What the shim cannot map raises `ShimLimitation`, so the runner can tell those failures apart:
`optimize(...)` used as a context manager (kiln has no frame-evaluation hook that would compile
every frame run inside a block) and backends kiln does not have.
"""

import os
import sys

BACKENDS = {None: "kiln", "inductor": "kiln", "eager": "eager", "aot_eager": "aot_eager"}


class ShimLimitation(RuntimeError):
    """A torch._dynamo feature this shim does not map onto kiln."""


# torch backends that are a mode of kiln's: name -> (kiln backend, mode)
MODE_BACKENDS = {"cudagraphs": ("kiln", "reduce-overhead")}


def _backend(backend):
    import torch._dynamo

    import kiln

    if callable(backend):
        return backend
    if backend in BACKENDS:
        return BACKENDS[backend]
    if backend in kiln.list_backends():
        return backend
    if backend in MODE_BACKENDS:
        name, mode = MODE_BACKENDS[backend]
        return kiln.lookup_backend(name).with_options(mode=mode)
    if backend in torch._dynamo.list_backends(exclude_tags=()):
        # a compiler kiln does not have (tvm, openxla): torch's own, on kiln's graphs
        return torch._dynamo.lookup_backend(backend)
    raise ShimLimitation(f"backend {backend!r} has no kiln equivalent")


def _settings(backend):
    """kiln.compile's (backend, mode) for torch's backend name."""
    if isinstance(backend, str) and backend in MODE_BACKENDS:
        return MODE_BACKENDS[backend]
    return _backend(backend), None


# the guard_fail_fn given to optimize(), by the code of the function it compiled
_GUARD_FAIL_FNS = {}


def _guard_failure(root_fn, reason):
    """kiln's guard_failure event: torch's guard_fail_fn of that compile gets GuardFail."""
    import torch._dynamo.types

    code = getattr(root_fn, "__code__", None)
    callback = _GUARD_FAIL_FNS.get(code)
    if callback is not None:
        callback(torch._dynamo.types.GuardFail(reason, code))


class _Optimize:
    """What optimize() returns: a decorator (the context-manager form is a shim limitation)."""

    def __init__(self, backend, fullgraph, dynamic, guard_fail_fn=None):
        self.backend, self.mode = _settings(backend)
        self.fullgraph, self.dynamic = fullgraph, dynamic
        self.guard_fail_fn = guard_fail_fn

    def __call__(self, fn):
        import kiln

        _torch_compile_effects()
        if self.guard_fail_fn is not None and hasattr(fn, "__code__"):
            _GUARD_FAIL_FNS[fn.__code__] = self.guard_fail_fn
        return kiln.compile(
            _innermost(fn),
            backend=self.backend,
            fullgraph=self.fullgraph,
            dynamic=self.dynamic,
            mode=self.mode,
        )

    def __enter__(self):
        raise ShimLimitation("torch._dynamo.optimize(...) as a context manager")

    def __exit__(self, *exc):
        return False


def _torch_compile_effects():
    """What torch.compile does first that tests see: it refuses torch configs that exclude each
    other (check_for_incompatible_configs), and its first call (TorchPatcher.patch) turns
    torch.distributions' argument validation off (its checks read tensor data)."""
    import torch
    import torch._dynamo.eval_frame

    torch._dynamo.eval_frame.check_for_incompatible_configs()
    torch.distributions.Distribution.set_default_validate_args(False)


def optimize(
    backend="inductor",
    *,
    nopython=False,
    guard_fail_fn=None,
    dynamic=None,
    disable=False,
    **ignored,
):
    """torch._dynamo.optimize onto kiln.compile."""
    if disable or os.environ.get("TORCHDYNAMO_DISABLE", "") == "1":
        import kiln

        return lambda fn: kiln.compile(fn, disable=True)
    return _Optimize(backend, nopython, dynamic, guard_fail_fn)


def optimize_assert(backend="inductor", *, dynamic=None, **ignored):
    """torch._dynamo.optimize_assert: every graph break is an error."""
    return _Optimize(backend, True, dynamic)


def compile(
    model=None,
    *,
    fullgraph=False,
    dynamic=None,
    backend="inductor",
    mode=None,
    options=None,
    disable=False,
):  # noqa: A001
    """torch.compile onto kiln.compile."""
    import kiln

    # torch.compile reads TORCHDYNAMO_DISABLE when it is called: kiln.compile's disable=
    disable = disable or os.environ.get("TORCHDYNAMO_DISABLE", "") == "1"
    if disable:
        return kiln.compile(model, disable=True)
    _torch_compile_effects()
    # (torch's mode= and options= name Inductor's settings: kiln's own modes come only from a
    # backend name that is one, MODE_BACKENDS)
    backend, kiln_mode = _settings(backend)
    settings = dict(backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=kiln_mode)
    if options and "guard_filter_fn" in options:  # (the one option torch's frontend takes)
        settings["options"] = {"guard_filter_fn": options["guard_filter_fn"]}
    if model is None:
        return lambda m: kiln.compile(_innermost(m), **settings)
    return kiln.compile(_innermost(model), **settings)


def _disable_recursive(stock):
    def is_dynamo_disable_recursive(method):
        """torch's query on what kiln.disable made: True (recursive), False (recursive=False),
        None (not disabled)."""
        from kiln.frontend.markers import is_disabled_module, kiln_marker

        if kiln_marker(method, "_kiln_disabled") and not kiln_marker(method, "_kiln_break_reason"):
            return kiln_marker(method, "_kiln_shallow") is None
        if is_disabled_module(getattr(method, "__self__", None)):  # (a DisabledModule's forward)
            return True
        return stock(method)

    return is_dynamo_disable_recursive


def _innermost_fn(stock):
    def innermost_fn(fn, *args, **kwargs):
        """torch's innermost_fn, through kiln.disable's wrappers first."""
        return stock(_innermost(fn), *args, **kwargs)

    return innermost_fn


def _innermost(fn):
    """What torch.compile compiles for `fn` (its innermost_fn): a function kiln.disable wrapped
    is compiled itself, as torch.compile(torch.compiler.disable(f)) compiles f."""
    from kiln.frontend.markers import kiln_marker

    while kiln_marker(fn, "_kiln_disabled") and not kiln_marker(fn, "_kiln_break_reason"):
        if kiln_marker(fn, "__wrapped__") is None:
            break
        fn = fn.__wrapped__
    return fn


# kiln traces a call of it in compiled code as it does kiln.compile's (torch inlines its own)
compile._kiln_traced_as = "compile"


def _make_counter_with_backend(base):
    class CompileCounterWithBackend(base):
        """Counts frames and ops, then runs kiln's backend of that name."""

        def __call__(self, gm, example_inputs):
            import kiln

            self.frame_count += 1
            for node in gm.graph.nodes:
                if "call" in node.op:
                    self.op_count += 1
            self.graphs.append(gm)
            return kiln.lookup_backend(_backend(self.backend))(gm, example_inputs)

    return CompileCounterWithBackend


def set_stance(stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
    """torch.compiler.set_stance onto kiln.set_stance (kiln always checks every guard)."""
    import kiln

    if force_backend is not None:
        force_backend = _backend(force_backend)
    return kiln.set_stance(stance, force_backend=force_backend)


def run(fn=None):
    """torch._dynamo.run: compiled entries run, nothing new compiles (a miss runs eagerly)."""
    import kiln

    only_entries = kiln.set_stance("eager_on_recompile")
    return only_entries if fn is None else only_entries(fn)


def substitute_in_graph(
    original_fn, *, can_constant_fold_through=False, skip_signature_check=False
):
    """torch._dynamo.substitute_in_graph onto kiln's (kiln folds constants wherever it can)."""
    import kiln

    return kiln.substitute_in_graph(original_fn, skip_signature_check=skip_signature_check)


class _ExportedGraph:
    """What torch._dynamo.export returns as its graph module: the one captured graph, called with
    the call's arguments. Like torch's, it ignores an argument the graph does not read; the ones
    it reads are checked against kiln's specs (kiln exports static sizes where torch's default is
    symbolic: another size raises instead of running a graph made for other sizes)."""

    def __init__(self, program):
        self.program = program
        self.read = {leaf for role, leaf in program.placeholders if role == "input"}

    @property
    def graph(self):
        """The captured FX graph (torch's is a GraphModule: tests look for nodes in it)."""
        return self.program.graph_module.graph

    def __call__(self, *args, **kwargs):
        from torch.utils import _pytree as pytree

        p = self.program
        flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
        if spec != p.in_spec:
            raise TypeError(f"arguments of another structure than the exported call's: {spec}")
        unread = [
            i for i, m in enumerate(p.in_meta) if i not in self.read and not isinstance(m, list)
        ]
        p.check_inputs(
            [p.in_meta[i].example_tensor() if i in unread else x for i, x in enumerate(flat)]
        )
        return p.finish(flat, p.graph_module(*p.graph_args(flat)))


_EXPORT_OPTIONS = ("aten_graph", "pre_dispatch", "decomposition_table", "dynamic_shapes")


def _export(stock_export):
    def export(f, *extra_args, **options):
        """torch._dynamo.export(f)(*args) onto kiln.export: (graph module, guards)."""
        if "_log_export_usage" in options:  # torch's own use (torch.export's strict path)
            return stock_export(f, *extra_args, **options)
        used = [k for k in _EXPORT_OPTIONS if options.get(k)]
        if extra_args or used:
            raise ShimLimitation(f"torch._dynamo.export with {used or 'extra arguments'}")

        def capture(*args, **kwargs):
            import torch._dynamo.eval_frame

            import kiln

            try:
                program = kiln.export(f, args, kwargs)
            except kiln.export.ExportError as e:
                if e.breaks:  # torch's export traces with nopython: a graph break is Unsupported
                    raise kiln.exc.Unsupported(str(e)) from e
                raise
            specs = [f"input leaf {i}: {m}" for i, m in enumerate(program.in_meta)]
            result = torch._dynamo.eval_frame.ExportResult
            return result(_ExportedGraph(program), specs + list(program.guards))

        return capture

    return export


def _unsupported(a, b):
    """torch._dynamo.testing.unsupported: returns b, and no compiler traces it."""
    return b


# torch config switches kiln has (kiln's name: torch's config module and, where it differs,
# torch's name): under the shim kiln reads (and writes) torch's, so
# `@torch._dynamo.config.patch(capture_scalar_outputs=True)` reaches kiln
_CONFIG = {
    "capture_scalar_outputs": "torch._dynamo.config",
    "capture_dynamic_output_shape_ops": "torch._dynamo.config",
    "symbol_guard_limit_before_specialize": "torch.fx.experimental._config",
    "cache_size_limit": ("torch._dynamo.config", "recompile_limit"),  # (both 8 by default)
    "automatic_dynamic_shapes": "torch._dynamo.config",
    "error_on_recompile": "torch._dynamo.config",
    "assume_static_by_default": "torch._dynamo.config",
    "trace_autograd_ops": "torch._dynamo.config",
    "leaf_function_check_escaped_gradients": "torch._dynamo.config",  # (torch's default: off)
    "leaf_function_validate_outputs": "torch._dynamo.config",  # (torch's default: off)
}


def _kiln_source_names(torch_names):
    """torch's list of source names (or regexes) as kiln spells them: a frame local `L['x']`
    (`L\\['x.*'\\]` in a regex) is kiln's `x`, a global `G['x']` kiln's `___G['x']`; the rest
    (`._modules['m']._parameters['w']`, `.attr`) is spelled alike."""
    import re

    items = []
    for item in torch_names.split(","):
        item = re.sub(r"^\s*L\\?\['(.*?)'\\?\]", r"\1", item)
        items.append(re.sub(r"^\s*G(\\?\[)", r"___G\1", item).strip())
    return ",".join(items)


# torch config settings read through a translation: kiln's name -> (module, name, translate)
_TRANSLATED_CONFIG = {
    "dynamic_sources": ("torch.compiler.config", "dynamic_sources", _kiln_source_names),
}


def _mirror_config(kiln_config):
    """kiln.config's switches in _CONFIG read through to torch's config modules."""
    import importlib

    def switch(where):
        module, name = where
        torch_config = importlib.import_module(module)
        return property(
            lambda self: getattr(torch_config, name),
            lambda self, value: setattr(torch_config, name, value),
        )

    places = {k: v if isinstance(v, tuple) else (v, k) for k, v in _CONFIG.items()}
    props = {name: switch(where) for name, where in places.items()}
    for name, (module, torch_name, translate) in _TRANSLATED_CONFIG.items():
        torch_config = importlib.import_module(module)
        props[name] = property(
            lambda self, c=torch_config, n=torch_name, t=translate: t(getattr(c, n))
        )
    kiln_config.__class__ = type("MirroredConfig", (type(kiln_config),), props)


def _traced_frame(fn):
    """kiln starts tracing a frame: torch's record of the frames it traced
    (`eval_frame.dynamo_tls.traced_frame_infos`), its own resume functions left out as torch
    leaves out its own."""
    import torch._dynamo.eval_frame

    code = getattr(fn, "__code__", None)
    if code is None or code.co_name.startswith("__resume_at_"):
        return
    info = f"{code.co_name} {code.co_filename}:{code.co_firstlineno}"
    torch._dynamo.eval_frame.dynamo_tls.traced_frame_infos.append(info)


def _count_kernels(compiled, gm, example_inputs):
    """kiln's backend compiled a graph: its C++/Triton kernels count as torch's generated ones."""
    import torch._inductor.metrics

    torch._inductor.metrics.generated_kernel_count += getattr(compiled, "kernel_count", 0)
    return compiled


def install():
    """Replace torch._dynamo's entry points with kiln's, in every loaded torch._dynamo module."""
    import torch
    import torch._dynamo
    import torch._dynamo.compiled_autograd
    import torch._dynamo.exc
    import torch._dynamo.testing
    import torch._dynamo.utils
    import torch.fx.experimental.symbolic_shapes

    import kiln

    stock_reset = torch._dynamo.reset
    stock_disable = torch._dynamo.disable

    def disable(fn=None, recursive=True, **torch_internal):
        if torch_internal:  # torch's own use (torch/_compile.py), not a test's
            return stock_disable(fn, recursive, **torch_internal)
        return kiln.disable(fn, recursive=recursive)

    def reset():
        kiln.reset()
        stock_reset()

    import kiln.compiled_autograd

    originals = {
        "_enable": (torch._dynamo.compiled_autograd._enable, kiln.compiled_autograd.enable),
        "optimize": (torch._dynamo.optimize, optimize),
        "optimize_assert": (torch._dynamo.optimize_assert, optimize_assert),
        "reset": (stock_reset, reset),
        "disable": (stock_disable, disable),
        "graph_break": (torch._dynamo.graph_break, kiln.graph_break),
        "skip_frame": (torch._dynamo.skip_frame, kiln.skip_frame),
        "step_unsupported": (torch._dynamo.step_unsupported, kiln.step_unsupported),
        "set_stance": (torch._dynamo.set_stance, set_stance),
        "is_dynamo_disable_recursive": (
            torch._dynamo.is_dynamo_disable_recursive,
            _disable_recursive(torch._dynamo.is_dynamo_disable_recursive),
        ),
        "innermost_fn": (
            torch._dynamo.eval_frame.innermost_fn,
            _innermost_fn(torch._dynamo.eval_frame.innermost_fn),
        ),
        "error_on_graph_break": (torch._dynamo.error_on_graph_break, kiln.error_on_graph_break),
        "run": (torch._dynamo.run, run),
        "substitute_in_graph": (torch._dynamo.substitute_in_graph, substitute_in_graph),
        "export": (torch._dynamo.export, _export(torch._dynamo.export)),
        "allow_in_graph": (torch._dynamo.allow_in_graph, kiln.allow_in_graph),
        "disallow_in_graph": (torch._dynamo.disallow_in_graph, kiln.disallow_in_graph),
        "nonstrict_trace": (torch._dynamo.nonstrict_trace, kiln.nonstrict_trace),
        "leaf_function": (torch._dynamo.decorators.leaf_function, kiln.leaf_function),
        "mark_dynamic": (torch._dynamo.mark_dynamic, kiln.mark_dynamic),
        "on_compile_start": (torch._dynamo.on_compile_start, kiln.on_compile_start),
        "on_compile_end": (torch._dynamo.on_compile_end, kiln.on_compile_end),
        "mark_static": (torch._dynamo.mark_static, kiln.mark_static),
        "counters": (torch._dynamo.utils.counters, kiln.counters),
        "CompileCounterWithBackend": (
            torch._dynamo.testing.CompileCounterWithBackend,
            _make_counter_with_backend(torch._dynamo.testing.CompileCounterWithBackend),
        ),
        # a C function Dynamo cannot trace (it returns its second argument): tests count on the
        # graph break it makes; kiln would put a torch C function in the graph, so it is disabled
        "unsupported": (torch._dynamo.testing.unsupported, kiln.disable(_unsupported)),
        # `with self.assertRaises(Unsupported)`: a compile error under fullgraph (kiln's class)
        "Unsupported": (torch._dynamo.exc.Unsupported, kiln.exc.Unsupported),
        # `with self.assertRaises(RecompileError)` under config.error_on_recompile (kiln's class)
        "RecompileError": (torch._dynamo.exc.RecompileError, kiln.exc.RecompileError),
        # `assertRaises(UserError)`: kiln's classes (a data-dependent branch under fullgraph;
        # the user's mistakes kiln reports, such as a leaf_function's bad mutates_args)
        "UserError": (
            torch._dynamo.exc.UserError,
            (kiln.exc.DataDependentError, kiln.exc.UserError),
        ),
        # `assertIsInstance(torch.compile(mod), torch._dynamo.OptimizedModule)`: kiln's class
        "OptimizedModule": (torch._dynamo.OptimizedModule, kiln.OptimizedModule),
    }
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "torch._dynamo" or name.startswith("torch._dynamo.")):
            continue
        for attr, (old, new) in originals.items():
            if (
                attr in ("Unsupported", "RecompileError", "UserError")
                and name != "torch._dynamo.exc"
            ):
                continue  # what tests import; torch's own modules keep catching their class
            if attr == "OptimizedModule" and name != "torch._dynamo":
                continue  # (the name tests read; torch's own modules keep their class)
            if getattr(module, attr, None) is old:
                setattr(module, attr, new)
    torch.compile = compile
    # `assertRaises(ConstraintViolationError)` after mark_dynamic: kiln's class (the name tests
    # import from torch.fx.experimental.symbolic_shapes)
    torch.fx.experimental.symbolic_shapes.ConstraintViolationError = kiln.exc.ConstraintViolation
    kiln.hooks.register("backend_graph", _count_kernels)
    kiln.hooks.register("guard_failure", _guard_failure)
    kiln.hooks.register("frame_start", _traced_frame)
    _mirror_config(kiln.config)
