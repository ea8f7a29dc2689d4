"""Backend entry points: `compile_aten_graph(gm, example_inputs)` and the "kiln" backend.

    lower (graph.py, lowering.py) → schedule (scheduler.py) → C++ (codegen/cpp.py)
    → wrapper (codegen/wrapper.py) → compile + load (codecache.py) → callable

A failure anywhere (no compiler, compile error, a bug) names its cause and falls back to running
the ATen graph eagerly, with one warning (or raises BackendCompilerFailed under
`config.raise_on_backend_error`).

A symbolic graph (contract 3: vals with SymInt sizes, `gm.meta["shape_env"]`) compiles ONCE for
every size: kernels take the size symbols as arguments, the wrapper reads them from the inputs, and
the cache key holds the size expressions, never their hints. An op that cannot be lowered for
symbolic sizes runs as an ATen call (a perf_hints line names it); a graph the wrapper cannot bind
(a symbol no input provides) runs in the FX interpreter, correct for every size.
"""

import functools
import hashlib
import os
import time

import torch
import torch.autograd.profiler as _profiler

from kiln import config, logs
from kiln.backend import codecache
from kiln.backend.codegen.wrapper import rt
from kiln.backend.decompositions import DECOMPOSITIONS
from kiln.backend.ir import sizes_of, strides_of, to_expr, use_shape_env
from kiln.exc import BackendCompilerFailed


def num_threads():
    """OpenMP threads for kernels."""
    return config.num_threads or torch.get_num_threads()


class CompiledGraph:
    """A compiled ATen graph: calls the generated wrapper; keeps its sources for printing."""

    def __init__(
        self, call, wrapper_src, cpp_src, fallback_ops=(), output_sources=None, output_strides=None
    ):
        self.call = call
        # per output: its static strides (or None); the AOT layer gives the backward graph's saved
        # inputs these (Note [AOT: saved activations keep their layout])
        self.output_strides = output_strides
        # per output: "fresh" | ("input", k) | None (see WrapperCodegen.output_source); the AOT
        # runtime checks only the outputs that may alias a mutated input
        self.output_sources = output_sources
        self.wrapper_src = wrapper_src
        self.cpp_src = cpp_src
        self.fallback_ops = list(fallback_ops)
        self.kernel_count = cpp_src.count('extern "C" int kernel') + cpp_src.count(
            "@triton.jit\ndef kernel"
        )
        n = self.kernel_count
        self.label = None if config.profile_kernels else f"kiln graph ({n} kernel{'s' * (n != 1)})"

    def __call__(self, *args):
        # under torch.profiler each call is one range (`config.profile_kernels` adds one per
        # kernel, and then the wrapper opens the graph's range itself)
        if _profiler._is_profiler_enabled and self.label:
            with rt.record_function(self.label):
                return self.call(*args)
        return self.call(*args)


@functools.lru_cache(None)
def _backend_source_hash():
    """The backend's and the ATen tracer's sources (the tracer decides the graph's layouts)."""
    h = hashlib.sha256()
    kiln_dir = os.path.dirname(os.path.dirname(__file__))
    roots = [os.path.join(kiln_dir, "backend"), os.path.join(kiln_dir, "autograd")]
    for dirpath, _, files in sorted(w for root in roots for w in os.walk(root)):
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def _graph_key(gm, example_inputs):
    use_shape_env(gm.meta.get("shape_env"))
    h = hashlib.sha256()
    h.update(_backend_source_hash().encode())
    h.update(f"{torch.__version__}|{torch.__file__}".encode())
    h.update(gm.code.encode())
    h.update(f"{config.cpp_compiler}|{config.cpp_flags}|{num_threads()}".encode())
    h.update(f"{config.profile_kernels}".encode())  # Note [Backend: kernel profiling]
    h.update(f"{config.cpu_backend}|{os.environ.get('TRITON_INTERPRET', '0')}".encode())
    h.update(_device_id(example_inputs).encode())  # Triton kernels: capability, Triton version
    # the layout choices depend on these (Note [Backend: channels-last convolutions])
    free = gm.meta.get("free_layout_outputs", ())
    h.update(f"{torch.is_grad_enabled()}|{config.conv_channels_last}|{sorted(free)}".encode())
    # symbolic sizes enter as their expressions (s0), never their hints: one entry for all sizes
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    for k, x in enumerate(example_inputs):
        if k < len(vals) and isinstance(vals[k], torch.SymInt):
            x = vals[k]
        if isinstance(x, torch.Tensor):
            h.update(f"T{sizes_of(x)}{strides_of(x)}{x.dtype}{x.device.type}".encode())
        elif isinstance(x, torch.SymInt) or hasattr(x, "expr"):
            h.update(f"Z{to_expr(x)}".encode())
        else:
            h.update(f"S{type(x).__name__}{x!r}".encode())
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            t = getattr(gm, node.target)
            if isinstance(t, torch.Tensor):
                h.update(_tensor_bytes(t))
    return h.hexdigest()[:40]


def _device_id(example_inputs):
    """'' on CPU; for CUDA inputs the device's capability and Triton's version."""
    if not any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs):
        return ""
    try:
        import triton

        version = triton.__version__
    except ImportError:
        version = "none"
    return f"cuda{torch.cuda.get_device_capability()}|triton{version}"


def _tensor_bytes(t):
    """The data of a constant for the cache key (its identity when it has no readable data)."""
    try:
        data = t.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
    except Exception:
        return f"id{id(t)}".encode()
    return f"{t.dtype}{tuple(t.shape)}".encode() + data


def _constants(gm):
    out = {}
    k = 0
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            out[f"const{k}"] = getattr(gm, node.target)
            k += 1
    return out


def _load(wrapper_src, cpp_src, consts, gm, extras=()):
    if cpp_src.startswith(TRITON_MARK):
        from kiln.backend.codegen.triton import load_module

        lib = load_module(cpp_src)
    else:
        lib = codecache.load_library(codecache.compile_cpp(cpp_src))
    ns = {}
    exec(compile(wrapper_src, "<kiln wrapper>", "exec"), ns)
    return ns["make"](lib, consts, list(extras), _eager(gm))


def lower_and_generate(gm, example_inputs):
    """(GraphLowering, groups, cpp source, wrapper source, extras, output sources) of a graph."""
    from kiln.backend.codegen.cpp import generate_cpp
    from kiln.backend.codegen.wrapper import WrapperCodegen
    from kiln.backend.graph import GraphLowering
    from kiln.backend.scheduler import plan_memory, schedule

    graph = GraphLowering(gm, example_inputs).run()
    groups = schedule(graph)
    stores, free_after, inplace = plan_memory(graph, groups)
    if _uses_triton(graph):
        from kiln.backend.codegen import triton

        triton.check_runnable(graph)
        logs.counters["backend"]["triton_graphs"] += 1
        cpp_src, signatures = triton.generate_triton(graph, groups, stores, inplace)
        wrapper_cls = triton.triton_wrapper_class()
    else:
        cpp_src, signatures = generate_cpp(graph, groups, stores, num_threads(), inplace)
        wrapper_cls = WrapperCodegen
    w = wrapper_cls(graph, groups, stores, free_after, signatures, inplace)
    wrapper_src = w.generate()
    return graph, groups, cpp_src, wrapper_src, w.extras, w.output_sources


TRITON_MARK = "import torch\nimport triton\n"  # how a Triton module's source begins


def _uses_triton(graph):
    """Triton kernels for CUDA graphs, and for CPU graphs under config.cpu_backend="triton"."""
    return config.cpu_backend == "triton" or graph.device.type == "cuda"


def _needs_decomposition(gm):
    from kiln.backend.lowering import LOWERINGS

    return any(
        n.op == "call_function" and n.target in DECOMPOSITIONS and n.target not in LOWERINGS
        for n in gm.graph.nodes
    )


def _compile(gm, example_inputs):
    key = _graph_key(gm, example_inputs)
    hit = codecache.graph_get(key)
    if hit is not None:
        call = _load(hit["wrapper"], hit["cpp"], _constants(gm), gm)
        logs.counters["backend"]["graph_cache_hits"] += 1
        return CompiledGraph(
            call, hit["wrapper"], hit["cpp"], (), hit.get("sources"), hit.get("strides")
        )
    retraced = _needs_decomposition(gm)
    if retraced:
        from kiln.autograd.tracer import trace_aten

        env = gm.meta.get("shape_env")
        gm = trace_aten(gm, list(example_inputs), decompositions=DECOMPOSITIONS)
        if env is not None:
            gm.meta["shape_env"] = env
    t0 = time.perf_counter()
    graph, groups, cpp_src, wrapper_src, extras, sources = lower_and_generate(gm, example_inputs)
    if logs.enabled("output_code"):
        logs.log("output_code", "kernels:\n%s\nwrapper:\n%s", cpp_src, wrapper_src)
    call = _load(wrapper_src, cpp_src, graph.constants, gm, extras)
    strides = graph.output_strides()
    logs.counters["backend"]["graphs_compiled"] += 1
    logs.log("output_code", "graph compiled in %.2fs", time.perf_counter() - t0)
    if not (retraced and graph.constants):
        entry = {"wrapper": wrapper_src, "cpp": cpp_src, "sources": sources, "strides": strides}
        codecache.graph_put(key, entry, disk=not extras)
    return CompiledGraph(call, wrapper_src, cpp_src, graph.fallback_ops, sources, strides)


def compile_aten_graph(gm, example_inputs):
    """Compile an ATen-level FX graph (contract 2) into a callable returning its outputs."""
    try:
        return _compile(gm, example_inputs)
    except Exception as e:
        from kiln.backend.graph import GraphNotSupported

        if isinstance(e, GraphNotSupported):
            logs.log("perf_hints", "kiln: graph runs eagerly: %s", e)
        else:
            if config.raise_on_backend_error:
                raise BackendCompilerFailed("kiln", e) from e
            logs.warn(
                "kiln backend failed, running this graph eagerly: %s: %s", type(e).__name__, e
            )
        logs.counters["backend"]["eager_fallbacks"] += 1
        return _eager(gm)


def _eager(gm):
    def run(*args):
        out = gm(*args)
        return out if isinstance(out, (tuple, list)) else (out,)

    run.kiln_fallback = True
    return run


def kiln_backend(gm, example_inputs, opts=None):
    """The "kiln" backend for torch-level graphs (contract 1): AOT autograd + compile_aten_graph.

    `opts` (from kiln.compile's mode/options, see kiln/modes.py) hold for every graph it makes,
    the backward graph compiled later included."""
    try:
        from kiln.autograd.aot import aot_autograd
    except ImportError:
        aot_autograd = None
    compiler = functools.partial(_compile_with_options, opts) if opts else compile_aten_graph

    def role(name):
        return functools.partial(_compile_with_options, opts, role=name) if opts else compiler

    if aot_autograd is not None:
        backend = aot_autograd(
            fw_compiler=role("forward"),
            bw_compiler=role("backward"),
            inference_compiler=role("inference"),
            decompositions=DECOMPOSITIONS,
        )
        return backend(gm, example_inputs)
    # Without AOT autograd (not built yet): inference graphs only; anything needing grad runs eagerly.
    if torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
    ):
        return gm.forward
    from kiln.autograd.tracer import trace_aten

    aten_gm = trace_aten(gm, list(example_inputs), decompositions=DECOMPOSITIONS)
    compiled = compiler(aten_gm, example_inputs)
    return compiled


def _compile_with_options(opts, gm, example_inputs, role="inference"):
    """compile_aten_graph under a mode's options; then what the mode adds at run time."""
    from kiln import modes

    with modes.applied(opts):
        compiled = compile_aten_graph(gm, example_inputs)
    cuda = any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)
    if opts.get("cudagraphs") and cuda and not getattr(compiled, "kiln_fallback", False):
        from kiln.backend.cudagraphs import CUDAGraphed

        compiled = CUDAGraphed(compiled, example_inputs, role=role)
    elif opts.get("cudagraphs") and not cuda:
        modes.say_once(
            "cudagraphs-cpu",
            "kiln: mode %r has nothing to do for CPU graphs (CUDA graphs need CUDA tensors)",
            "reduce-overhead",
        )
    if opts.get("max_autotune"):
        modes.say_once(
            "autotune", "kiln: mode 'max-autotune' has no kernel choices to time yet (default code)"
        )
    return compiled


def _with_options(mode=None, options=None):
    from kiln import modes

    return modes.with_options(kiln_backend)(mode, options)


kiln_backend.with_options = _with_options
