"""Backend entry points: `compile_aten_graph(gm, example_inputs)` and the "kiln" backend.

    lower (graph.py, lowering.py) → schedule (scheduler.py) → C++ (codegen/cpp.py) or Triton
    (codegen/triton.py: CUDA graphs, or CPU ones under config.cpu_backend="triton") → wrapper (codegen/wrapper.py) → compile + load (codecache.py) → callable

A failure anywhere (no compiler, compile error, a bug) names its cause and falls back to running
the ATen graph eagerly, with one warning (or raises BackendCompilerFailed under
`config.strict`).

A symbolic graph (vals with SymInt sizes, `GraphMeta.shape_env`) compiles ONCE for
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

from kiln import config, faults, hooks, logs, modes
from kiln.autograd.aot import aot_autograd
from kiln.autograd.aten_tracer import graph_call, trace_aten
from kiln.backend import codecache, cpu_tune, cudagraphs, devices, lowering_matmul
from kiln.backend.codegen import triton, triton_matmul
from kiln.backend.codegen.cpp import generate_cpp
from kiln.backend.codegen.wrapper import WrapperCodegen, rt
from kiln.backend.cudagraphs import CUDAGraphed
from kiln.backend.decomp_low_precision import low_precision_decompositions
from kiln.backend.decompositions import DECOMPOSITIONS
from kiln.backend.graph import GraphLowering, GraphNotSupported
from kiln.backend.ir import compile_scope, size_exprs, stride_exprs, to_expr, use_shape_env
from kiln.backend.lowering import LOWERINGS
from kiln.backend.scheduler import plan_memory, schedule
from kiln.contracts import GraphMeta, OutputLayouts
from kiln.exc import BackendCompilerFailed

_function_modes_on = torch._C._len_torch_function_stack


class CompiledGraph:
    """A compiled ATen graph: calls the generated wrapper; keeps its sources for printing."""

    def __init__(
        self, call, wrapper_src, cpp_src, fallback_ops=(), output_sources=None, output_strides=None
    ):
        self.call = call
        # per output: its static strides (or None): the AOT layer gives the backward graph's saved
        # inputs these (Note [AOT: saved activations keep their layout]); and "fresh" |
        # ("input", k) | None (WrapperCodegen.output_source): the AOT runtime checks only the
        # outputs that may alias a mutated input
        self.layouts = OutputLayouts(
            strides=None if output_strides is None else tuple(output_strides),
            sources=None if output_sources is None else tuple(output_sources),
        )
        self.wrapper_src = wrapper_src
        self.cpp_src = cpp_src
        self.fallback_ops = list(fallback_ops)
        self.kernel_count = cpp_src.count('extern "C" int kernel') + cpp_src.count(
            "@triton.jit\ndef kernel"
        )
        n = self.kernel_count
        self.label = None if config.profile_kernels else f"kiln graph ({n} kernel{'s' * (n != 1)})"

    @property
    def output_strides(self):
        """Per output: its static strides, or None (OutputLayouts.strides)."""
        return self.layouts.strides

    @property
    def output_sources(self):
        """Per output: where its memory comes from (OutputLayouts.sources)."""
        return self.layouts.sources

    def __call__(self, *args):
        # Notes [Frames: under a user's torch function mode], [Wrapper: ATen calls through
        # torch's Python bindings]
        if _function_modes_on():
            with torch._C.DisableTorchFunction():
                return self._call(args)
        return self._call(args)

    def _call(self, args):
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


# Note [Backend: the graph cache key]
# A compiled graph is kept in memory and on disk under a hash of everything its code depends on:
# the graph's code, the backend's sources, the settings, each input's size expressions, and the
# facts of its shape env. Two entries of one frame can trace the same graph over the same symbols
# with opposite facts (`x[n:]` for n <= 6 and for n > 6): the lowering proves a slice's clamping
# from those facts, so the code differs (a length 6 - n, or 0), and the facts are in the key.
def _graph_key(gm, example_inputs):
    use_shape_env(GraphMeta.of(gm).shape_env)
    h = hashlib.sha256()
    h.update(_backend_source_hash().encode())
    h.update(f"{torch.__version__}|{torch.__file__}".encode())
    h.update(gm.code.encode())
    h.update(f"{config.cpp_compiler}|{config.cpp_flags}|{codecache.num_threads()}".encode())
    # Note [Backend: kernel profiling]; extern_out: the matmuls' call form
    h.update(f"{config.profile_kernels}|{config.extern_out}|{config.fallback_random}".encode())
    h.update(f"{modes.current('max_autotune')}|{lowering_matmul.chosen_names()}".encode())
    h.update(triton_matmul.key_text().encode())  # Note [Triton: the matmul template]
    h.update(f"{config.cpu_backend}|{os.environ.get('TRITON_INTERPRET', '0')}".encode())
    h.update(_device_id(example_inputs, gm).encode())  # Triton kernels: capability, Triton version
    # the layout choices depend on these (Note [Backend: channels-last convolutions])
    free = GraphMeta.of(gm).free_layout_outputs
    h.update(f"{torch.is_grad_enabled()}|{config.conv_channels_last}|{sorted(free)}".encode())
    # symbolic sizes enter as their expressions (s0), never their hints: one entry for all sizes
    # that share the facts (Note [Backend: the graph cache key])
    env = GraphMeta.of(gm).shape_env
    if env is not None:
        h.update("|".join(sorted(str(f) for f in env.guard_facts())).encode())
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    for k, x in enumerate(example_inputs):
        if k < len(vals) and isinstance(vals[k], torch.SymInt):
            x = vals[k]
        if isinstance(x, torch.Tensor):
            h.update(f"T{size_exprs(x)}{stride_exprs(x)}{x.dtype}{x.device.type}".encode())
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


def _device_id(example_inputs, gm):
    """'' on CPU; for a graph with CUDA tensors the device's capability and Triton's version."""
    try:
        if devices.graph_device(example_inputs, gm).type != "cuda":
            return ""
    except ValueError:  # (two CUDA devices: the lowering says why the graph runs eagerly)
        return "several"
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
        lib = triton.load_module(cpp_src)
    else:
        lib = codecache.load_library(codecache.compile_cpp(cpp_src))
    ns = {}
    exec(compile(wrapper_src, "<kiln wrapper>", "exec"), ns)
    return ns["make"](lib, consts, list(extras), _eager(gm))


def lower_and_generate(gm, example_inputs):
    """(GraphLowering, groups, cpp source, wrapper source, extras, output sources) of a graph."""
    faults.hit("lowering")
    with compile_scope():
        graph = GraphLowering(gm, example_inputs).run()
        groups = schedule(graph)
        stores, free_after, inplace = plan_memory(graph, groups)
        if _uses_triton(graph):
            triton.check_runnable(graph)
            logs.counters["backend"]["triton_graphs"] += 1
            cpp_src, signatures = triton.generate_triton(
                graph, groups, stores, inplace, triton_matmul.generate_group
            )
            wrapper_cls = triton.TritonWrapperCodegen
        else:
            threads = codecache.num_threads()
            cpp_src, signatures = generate_cpp(graph, groups, stores, threads, inplace)
            wrapper_cls = WrapperCodegen
        w = wrapper_cls(graph, groups, stores, free_after, signatures, inplace)
        wrapper_src = w.generate()
    return graph, groups, cpp_src, wrapper_src, w.extras, w.output_sources


TRITON_MARK = "import torch\nimport triton\n"  # how a Triton module's source begins


def _uses_triton(graph):
    """Triton kernels for CUDA graphs (a graph with any CUDA tensor: Note [Backend: graphs on two
    devices]), and for CPU graphs under config.cpu_backend="triton"."""
    return devices.triton_kernels(graph.device)


def _needs_decomposition(gm):
    return any(
        n.op == "call_function" and n.target in DECOMPOSITIONS and n.target not in LOWERINGS
        for n in gm.graph.nodes
    )


def _compile(gm, example_inputs):
    loops = cpu_tune.matmuls_as_loops(gm, compile_aten_graph, _backend_source_hash())
    template = triton_matmul.matmuls_as_template(gm, compile_aten_graph, _backend_source_hash())
    if template:  # Note [Triton: the matmul template]
        loops = (loops or frozenset()) | template
    with lowering_matmul.as_loops(loops), compile_scope():  # Note [Backend: per-compile size state]
        return _compile_in_scope(gm, example_inputs)


def _compile_in_scope(gm, example_inputs):
    key = _graph_key(gm, example_inputs)
    hit = codecache.graph_get(key)
    if hit is not None:
        call = _load(hit["wrapper"], hit["cpp"], _constants(gm), gm)
        logs.counters["backend"]["graph_cache_hits"] += 1
        if hit["cpp"].startswith(TRITON_MARK):  # (counted as lowering counts a new one)
            logs.counters["backend"]["triton_graphs"] += 1
        compiled = CompiledGraph(
            call, hit["wrapper"], hit["cpp"], (), hit.get("sources"), hit.get("strides")
        )
        return compiled
    retraced = _needs_decomposition(gm)
    if retraced:
        meta = GraphMeta.of(gm)
        gm = trace_aten(gm, list(example_inputs), decompositions=DECOMPOSITIONS)
        if meta.shape_env is not None:
            GraphMeta.update(gm, shape_env=meta.shape_env)
        # the same inputs and outputs in the same order: the facts about them still hold
        GraphMeta.update(
            gm,
            input_mutations=meta.input_mutations,
            free_layout_outputs=meta.free_layout_outputs,
        )
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
    """Compile an ATen-level FX graph (from AOT autograd) into a callable returning its outputs."""
    state = faults.GlobalState()
    try:
        compiled = _compile(gm, example_inputs)
    except Exception as e:
        state.restore()  # Note [Faults: the crash contract]
        if isinstance(e, GraphNotSupported):
            logs.log("perf_hints", "kiln: graph runs eagerly: %s", e)
        else:
            hooks.fire("backend_error", gm, example_inputs, e)  # KILN_REPRO_AFTER=aot
            if config.strict:
                raise BackendCompilerFailed("kiln", e) from e
            where = logs.compiling.current
            if not logs.compiling.warned:  # one warning per frame
                logs.compiling.warned = where is not None
                logs.warn(
                    "kiln backend failed on a graph of %s, running this graph eagerly: %s: %s",
                    where or "a graph",
                    type(e).__name__,
                    e,
                )
        logs.counters["backend"]["eager_fallbacks"] += 1
        return _eager(gm)
    return hooks.chain("backend_graph", compiled, gm, example_inputs)  # debug dir, minifier


def _eager(gm):
    call = graph_call(gm)  # (no module hooks run on the graph)

    def run(*args):
        out = call(*args)
        return out if isinstance(out, (tuple, list)) else (out,)

    run.kiln_fallback = True
    return run


def kiln_backend(gm, example_inputs, opts=None):
    """The "kiln" backend for torch-level graphs (from the frontend): AOT autograd +
    compile_aten_graph. `opts` (kiln.compile's mode/options, kiln/modes.py) hold for every graph it
    makes, the backward graph compiled later included."""
    if opts:
        fw, bw, inf = (
            functools.partial(_compile_with_options, opts, role=r)
            for r in ("forward", "backward", "inference")
        )
    else:
        fw = bw = inf = compile_aten_graph
    decompositions = {**DECOMPOSITIONS, **low_precision_decompositions()}
    backend = aot_autograd(
        fw_compiler=fw, bw_compiler=bw, inference_compiler=inf, decompositions=decompositions
    )
    return backend(gm, example_inputs)


def _compile_with_options(opts, gm, example_inputs, role="inference"):
    """compile_aten_graph under a mode's options; then what the mode adds at run time."""
    with modes.applied(opts):
        compiled = compile_aten_graph(gm, example_inputs)
    cuda = cudagraphs.recordable(example_inputs)
    if opts.get("cudagraphs") and cuda and devices.on_two_devices(example_inputs, gm):
        # a recording would keep the CPU scalars' values (Note [Backend: graphs on two devices])
        modes.say_once(
            "cudagraphs-cpu-tensors",
            "kiln: mode %r does not record graphs with CPU tensors",
            "reduce-overhead",
        )
    elif opts.get("cudagraphs") and cuda and not getattr(compiled, "kiln_fallback", False):
        compiled = CUDAGraphed(compiled, example_inputs, role=role)
    elif opts.get("cudagraphs") and not cuda:
        modes.say_once(
            "cudagraphs-cpu",
            "kiln: mode %r has nothing to do for CPU graphs (CUDA graphs need CUDA tensors)",
            "reduce-overhead",
        )
    return compiled


kiln_backend.with_options = modes.with_options(kiln_backend)
