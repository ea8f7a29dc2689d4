"""Every kiln setting, one comment each; `KILN_<NAME>` in the environment overrides the default."""

import os
import sys

# --- frontend ---
disable = False  # kiln.compile returns what it is given, uncompiled (KILN_DISABLE=1)
cache_size_limit = 8  # compiled entries per code object before the frame runs eagerly
error_on_recompile = False  # a frame that would compile again raises RecompileError
inline_depth_limit = 32  # nested user-function inlining depth before a graph break
loop_pass_limit = 10_000  # loop passes unrolled in one trace before its frame runs eagerly
python_trace_limit = (
    300_000  # instructions traced with no tensor op yet before the frame runs eagerly
)
range_items_limit = 100_000  # a traced range() longer than this is a graph break
capture_scalar_outputs = False  # `t.item()` stays in the graph as an unbacked scalar (no break)
capture_dynamic_output_shape_ops = False  # `x.nonzero()` stays in the graph (unbacked size)
symbol_guard_limit_before_specialize = None  # n: a size symbol in > n guards is specialised
specialize_int = True  # Python ints taken as constants (guarded), not graph inputs
leaf_function_check_escaped_gradients = (
    True  # a leaf_function whose outputs need gradients of tensors it closes over raises
)
leaf_function_validate_outputs = (
    True  # a leaf_function's real outputs are checked against its fake's shapes and dtypes
)
skip_modules = (
    "torch",
    "numpy",
    "sympy",
    "networkx",
    "kiln",
)  # frames from these are never captured
traced_modules = (
    "torch.testing",
    "torch.optim",
    "torch.amp.grad_scaler",
    "torch.utils._ordered_set",  # OrderedSet: a plain Python MutableSet over a dict
    "torch.fx.experimental.symbolic_shapes",  # guard_or_false(n == 0) ...: eager's path on ints
    "torch._prims_common",  # make_contiguous_strides_for ...: size arithmetic in Python
    "torch.distributions",  # Normal(loc, scale).log_prob(x): tensor code in Python classes
    "torch.nn._reduction",  # get_enum("mean"), legacy_get_string: plain Python over str/bool
    "torch._higher_order_ops.associative_scan",  # its generic path: Python over slices and vmap
)  # Python functions from these are traced like user code although their package is skipped
strict = (
    False  # an internal error in kiln raises (True: kiln's tests) instead of one warning + eager
)
verbose = False  # errors keep kiln's internal frames in their tracebacks (KILN_VERBOSE=1)
route_calls_of_eager_frames = True  # a frame run eagerly calls its callees' compiled frames
nested_graph_breaks = True  # a break inside an inlined call resumes there: callers stay in graphs
warn_graph_breaks = True  # warn once per compiled function that breaks into several graphs
cpp_guards = True  # tensor checks of guards in C++ (kiln_tensor_match, built once per machine)
guard_program_check = (
    False  # each guard call runs its C program and Python function; disagreeing raises
)
eager_under_trace = True  # with a sys.settrace function set (pdb, coverage), frames run uncompiled

# --- dynamic shapes ---
automatic_dynamic_shapes = True  # a changed size recompiles once with that dimension symbolic
assume_static_by_default = True  # False: dynamic=None compiles sizes symbolic from the first call
dynamic_sources = ""  # comma list of source names or regexes (`x`, `self.w.*`): symbolic at once

# --- autograd ---
fallback_random = False  # random ops as ATen calls, eager's numbers (else Triton kernels draw them)
partitioner = "min_cut"  # "min_cut" (recompute cheap ops in backward) or "default"
compiled_autograd = False  # route .backward() inside compiled code to compiled autograd
trace_autograd_ops = False  # `loss.backward()` in the frame traced as autograd.grad (no break)
ddp_split_graphs = True  # under DDP, one graph per gradient bucket (backward overlaps all-reduce)

# --- backend ---
cpp_compiler = "g++"  # compiler for CPU kernels
cpp_flags = "-O3 -march=native -fopenmp -fPIC -shared -std=c++17"  # never -ffast-math
num_threads = 0  # OpenMP threads for kernels; 0 = torch.get_num_threads()
fast_kernel_calls = True  # call C++ kernels through kiln_fastcall (built once), not ctypes
conv_channels_last = True  # inference graphs with 2D convolutions run them NHWC (channels-last)
cpu_low_precision_matmul = (
    "auto"  # bf16/fp16 CPU mm/conv in float32: "auto" (no native), "float32", "native"
)
cpu_backend = (
    "cpp"  # CPU graphs' kernels: "cpp" (C++/OpenMP) or "triton" (needs TRITON_INTERPRET=1)
)
matmul_template = (
    "auto"  # Triton tl.dot matmuls: "auto" (timed under max-autotune), "always", "never"
)
autotune_max_candidates = 8  # max-autotune: configurations timed per Triton kernel and size
extern_out = True  # matmul externs write into kiln's buffers (.out); False: functional calls
triton_fast_launch = True  # CUDA: relaunch Triton's compiled kernel per specialization directly
profile_kernels = False  # kernel/extern calls in torch.profiler ranges (kiln:<graph> kernelN ...)

# --- files ---
cache_dir = os.path.expanduser("~/.cache/kiln")  # on-disk code and graph cache
debug_dir = ""  # when set, every compiled frame's artefacts are dumped below it

# --- minifier (kiln/tools/minifier.py) ---
repro_after = ""  # "aot" | "backend": write repro.py when the code generator / backend fails
repro_level = ""  # "accuracy": also when compiled outputs differ from eager
repro_dir = ""  # where repro.py goes (default: the current directory)


def _coerce(default, text):
    """Parse an environment string to the type of the default."""
    if isinstance(default, bool):
        return text.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(text)
    if isinstance(default, tuple):
        return tuple(p for p in text.split(",") if p)
    return text


def _apply_env_overrides():
    module = sys.modules[__name__]
    for name, value in list(vars(module).items()):
        if name.startswith("_") or callable(value) or isinstance(value, type(os)):
            continue
        env = os.environ.get(f"KILN_{name.upper()}")
        if env is not None:
            setattr(module, name, _coerce(value, env))


_apply_env_overrides()
