"""The Triton matmul template: a tiled tl.dot kernel with the pointwise ops after it fused.

Note [Triton: the matmul template]
A matmul the graph lowers as loop IR (Note [Matmuls as loops]) on the Triton path is a Reduction
marked `matmul` (its operands' loaders). The scheduler gives it a group of its own that takes only
pointwise nodes over its outputs reading it at the same element ("outer" nodes: a bias, an
activation, a residual add, a cast, a scale): its epilogue. This module writes such a group as

    @triton.jit
    def kernel0_tl(arg0_1, arg1_1, buf1, BLOCK_M: tl.constexpr, ..., GROUP_M: tl.constexpr):
        pid = tl.program_id(0)                      # (a bmm folds the batch into it: offs_b)
        ...                                         # GROUP_M rows of tiles share b's columns (L2)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in range(0, 768, BLOCK_K):
            ak = (k0 + tl.arange(0, BLOCK_K))[None, :]
            tmp0 = tl.load(arg0_1 + (azero + (768*am + ak)), amask, other=0)
            tmp1 = tl.load(arg1_1 + (bzero + (bk + 768*bn)), bmask, other=0)
            acc = tl.dot(tmp0, tmp1, acc, input_precision="ieee")
        o0 = am
        o1 = bn
        ...                                         # the epilogue on the tile, in registers
        tl.store(buf1 + (xzero + (3072*o0 + o1)), tmp5.to(tl.float32), xmask)

The operands are read through their loaders with the tile's index variables (am/ak over a's rows
and k, bk/bn over b's), so any strides, offsets or views of a and b are the loaders' own index
expressions (static sizes: constants the compiler sees). The epilogue is the ops handler and index
rendering of codegen/triton.py with o0.. bound to the tile's rows am (offs_m[:, None]) and
columns bn (offs_n[None, :]) and the batch offs_b, or divided back from them for an epilogue over
the reshaped result (Note [Scheduler: a template's epilogue over a reshaped result]: a linear on
[B, T, C]); masked edges on M, N and K (a K tail loads zeros). The accumulator is float32; float32 operands
multiply in IEEE float32 unless `torch.backends.cuda.matmul.allow_tf32` holds at compile time
(eager's numerics decide; tf32 then); float16/bfloat16 operands use the tensor cores' products,
rounded to the output dtype before the epilogue reads them, as eager's result is. Only the
epilogue's results are stored, and the matmul's own result where the graph reads it elsewhere.
A group this module cannot write (an index check in the epilogue, a symbolic size) is written as
an ordinary reduction kernel: correct, slower.

Which matmuls become the template: `config.matmul_template` "always" (every one offered:
float32/float16/bfloat16, static sizes), "never", or "auto": under mode="max-autotune", each CUDA
matmul is timed as its ATen call and as the template (its block configurations timed first, by
triton_tune.best_mm) as one-op graphs with Triton's do_bench; the template is kept when it takes at
most MARGIN of the ATen call's time (the epilogue it would fuse is not credited). Choices are
kept in memory and on disk (`<cache_dir>/triton/matmul_choices.json`); the chosen nodes enter the
graph's cache key. Default mode never uses it.
"""

import contextlib
import hashlib
import threading
import time

import torch

from kiln import config, modes
from kiln.backend import matmul_choice
from kiln.backend.codegen.common import IndentedBuffer
from kiln.backend.codegen.triton import _SIZE_ARG, TL_DTYPE, TritonKernel, index_text
from kiln.backend.ir import Ix, set_handler, set_range
from kiln.backend.lowering_matmul import LOOP_LOWERINGS, template_offered
from kiln.backend.tuning_cache import TuningCache

MM_CONSTS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")


def is_template(group):
    """Whether a scheduled group is a matmul template with its epilogue."""
    if not getattr(group, "template", False) or not group.segments:
        return False
    kind, first = group.segments[0]
    rest = group.segments[1:]
    return (
        kind == "loop"
        and len(first) == 1
        and getattr(first[0].buf.data, "matmul", None) is not None
        and all(k == "outer" for k, _ in rest)
    )


class TritonMatmulKernel(TritonKernel):
    """Writes a template group: the tiled tl.dot loop, then the epilogue on the accumulator."""

    def __init__(self, group, graph, stores, inplace=None):
        super().__init__(group, graph, stores, inplace)
        self.operand = False  # loads of the operands: their own dtype, for tl.dot
        self.operand_index = []  # their index texts (Note [Triton: matmul template configurations])

    def load(self, name, index):
        if not self.operand:
            return super().load(name, index)
        dt = self.graph.buffers[name].layout.dtype
        p = self.param_name(name)
        self.operand_index.append(index_text(index))
        ptr = f"{p} + ({self.zero} + ({index_text(index)}))"
        return self.cse(f"tl.load({ptr}, {self.mask}, other=0)", dt)

    def _index_type(self):
        """int64 indices only where some buffer has 2**31 elements or more."""
        big = any(_numel(b.layout.size) >= 2**31 for b in self.graph.buffers.values() if _static(b))
        return "tl.int64" if big else "tl.int32"

    def generate(self):
        """(source, params), or None where this group is not writable as the template."""
        g, w = self.g, self.code.writeline
        node = g.segments[0][1][0]
        load_a, load_b = node.buf.data.matmul
        *batch, m, n = node.full_ranges
        (k,) = node.rranges
        dtype = node.buf.layout.dtype
        it = self._index_type()
        w("pid = tl.program_id(0)")
        w(f"grid_m = tl.cdiv({m}, BLOCK_M)")
        w(f"grid_n = tl.cdiv({n}, BLOCK_N)")
        bidx = []
        if batch:
            w("tiles = grid_m * grid_n")
            w(f"offs_b = (pid // tiles).to({it})")
            w("pid = pid % tiles")
            set_range("offs_b", 0, batch[0] - 1)
            bidx = [Ix.var("offs_b")]
        w("width = GROUP_M * grid_n")
        w("first_m = (pid // width) * GROUP_M")
        w("group_m = tl.minimum(grid_m - first_m, GROUP_M)")
        w("pid_m = first_m + (pid % width) % group_m")
        w("pid_n = (pid % width) // group_m")
        w(f"am = (pid_m.to({it}) * BLOCK_M + tl.arange(0, BLOCK_M).to({it}))[:, None]")
        w(f"bn = (pid_n.to({it}) * BLOCK_N + tl.arange(0, BLOCK_N).to({it}))[None, :]")
        w(f"azero = tl.zeros([BLOCK_M, BLOCK_K], {it})")
        w(f"bzero = tl.zeros([BLOCK_K, BLOCK_N], {it})")
        w("acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)")
        for v, size in (("am", m), ("bn", n), ("ak", k), ("bk", k)):
            set_range(v, 0, max(size - 1, 0))
        w(f"for k0 in range(0, {k}, BLOCK_K):")
        self.code.level += 1
        w(f"ak = (k0 + tl.arange(0, BLOCK_K).to({it}))[None, :]")
        w(f"bk = (k0 + tl.arange(0, BLOCK_K).to({it}))[:, None]")
        w(f"amask = (am < {m}) & (ak < {k})")
        w(f"bmask = (bk < {k}) & (bn < {n})")
        self.scopes.append({})
        self.operand = True
        with set_handler(self.handler):
            self.zero, self.mask, self.shape = "azero", "amask", "[BLOCK_M, BLOCK_K]"
            a = load_a([*bidx, Ix.var("am"), Ix.var("ak")])
            self.zero, self.mask, self.shape = "bzero", "bmask", "[BLOCK_K, BLOCK_N]"
            b = load_b([*bidx, Ix.var("bk"), Ix.var("bn")])
        self.operand = False
        self.scopes.pop()
        w(f"acc = {_dot(a, b, dtype)}")
        self.code.level -= 1
        self.zero, self.mask, self.shape = "xzero", "xmask", "[BLOCK_M, BLOCK_N]"
        w(f"xzero = tl.zeros([BLOCK_M, BLOCK_N], {it})")
        w(f"xmask = (am < {m}) & (bn < {n})")
        dims = [("offs_b", s) for s in batch] + [("am", m), ("bn", n)]
        for i, (expr, _) in enumerate(d for d in dims if d[1] != 1):
            w(f"o{i} = {expr}")
        value = self.cse("acc", torch.float32)
        if dtype != torch.float32:  # eager's result is rounded to its dtype before any epilogue
            value = self.handler.to_dtype(value, dtype)
        self.store(node, "red", value)
        for _, nodes in g.segments[1:]:
            for n_ in nodes:
                self.store(n_, "outer", self.run_node(n_, "outer"))
        text = "\n".join(self.code.lines)
        if self.err or _SIZE_ARG.search(text):
            return None  # an index check or a symbolic size: the ordinary reduction kernel
        return self._mm_function(m, n, batch[0] if batch else 1, k, dtype)

    def _mm_function(self, m, n, b, k, dtype):
        g = self.g
        params = list(self.params)
        out = IndentedBuffer()
        out.writeline("@triton.jit")
        consts = ", ".join(f"{c}: tl.constexpr" for c in MM_CONSTS)
        out.writeline(f"def {g.name}_tl({', '.join(params)}, {consts}):")
        dtypes = (f"{p} {str(self.graph.buffers[p].layout.dtype)[6:]}" for p in params)
        out.writeline(f"    # {', '.join(dtypes)}")  # Note [Triton: launches on CUDA]
        out.lines += self.code.lines
        out.writeline("")
        out.writeline("")
        out.writeline(f"def {g.name}({', '.join(params)}):")
        tune = ""
        if modes.current("max_autotune") or getattr(_state, "tuning", False):
            # the epilogue left out: the one-op graph timed for the choice tunes it once
            key = f"{m}x{n}x{b}x{k}|{dtype}|{'|'.join(self.operand_index)}"
            tune = f", tune={key!r}"
        out.writeline(
            f"    return launch_mm({g.name}_tl, ({''.join(a + ', ' for a in params)}), "
            f"{m}, {n}, {b}, {k}{tune})"
        )
        return out.getvalue(), params


def _dot(a, b, dtype):
    """The accumulating tl.dot of two operand tiles (Note [Triton: the matmul template])."""
    if dtype == torch.float16:
        return f"tl.dot({a}.to(tl.float16), {b}.to(tl.float16), acc)"
    if dtype == torch.bfloat16:
        return f"dot_bf16({a}, {b}, acc)"  # (the interpreter's bfloat16 tl.dot is wrong)
    precision = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    return f'tl.dot({a}.to(tl.float32), {b}.to(tl.float32), acc, input_precision="{precision}")'


def _numel(size):
    out = 1
    for s in size:
        out *= s
    return out


def _static(buf):
    layout = getattr(buf, "layout", None)
    return layout is not None and all(type(s) is int for s in layout.size)


def generate_group(group, graph, stores, inplace):
    """(source, params) of a template group, or None (then it is an ordinary kernel)."""
    if not is_template(group) or node_dtype(group) not in TL_DTYPE:
        return None
    return TritonMatmulKernel(group, graph, stores, inplace).generate()


def node_dtype(group):
    return group.segments[0][1][0].buf.layout.dtype


# --- the choice: ATen or the template ----------------------------------------------------------

MARGIN = 0.9  # the template is chosen when it takes at most this fraction of the ATen call's time
_state = threading.local()
_disk = TuningCache("triton", "matmul_choices.json")
_tuned = {}  # disk key -> "template" | "aten"


def key_text():
    """What the generated code depends on beyond the chosen names (enters the graph cache key)."""
    return (
        f"{config.matmul_template}|{torch.backends.cuda.matmul.allow_tf32}|"
        f"{getattr(_state, 'tuning', False)}"
    )


def _timed(val):
    """Whether a matmul's choice is timed under max-autotune ("auto"): CUDA ones."""
    return val.device.type == "cuda"


def matmuls_as_template(gm, compile_graph, salt):
    """The names of gm's matmul nodes written as the Triton template (None: no template)."""
    setting = config.matmul_template
    if getattr(_state, "tuning", False) or setting == "never":
        return None
    if setting != "always" and not modes.current("max_autotune"):
        return None
    names = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in LOOP_LOWERINGS:
            continue
        val = node.meta.get("val")
        args = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in node.args]
        if node.kwargs.get("out") or not template_offered(node.target, val, args):
            continue
        if setting == "always":
            names.add(node.name)
        elif _timed(val):
            if _choice(node.target, args, dict(node.kwargs), compile_graph, salt) == "template":
                names.add(node.name)
    return frozenset(names) if names else None


def _key(target, args, kwargs, salt):
    parts = [str(target), repr(sorted(kwargs.items())), key_text(), salt]
    for a in args:
        if isinstance(a, torch.Tensor):
            parts.append(f"{tuple(a.shape)}{a.stride()}{a.dtype}{a.device.type}")
            if a.device.type == "cuda":  # pragma: no cover (needs a GPU)
                parts.append(torch.cuda.get_device_name(a.device))
        else:
            parts.append(repr(a))
    try:
        import triton

        parts.append(triton.__version__)
    except ImportError:
        pass
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


@contextlib.contextmanager
def _tuning():
    saved = getattr(_state, "tuning", False)
    _state.tuning = True
    try:
        yield
    finally:
        _state.tuning = saved


def _choice(target, args, kwargs, compile_graph, salt):
    key = _key(target, args, kwargs, salt)
    first = next(a for a in args if isinstance(a, torch.Tensor))
    low = first.dtype != torch.float32 or torch.backends.cuda.matmul.allow_tf32
    cuda = first.is_cuda

    def time_both(aten, template):
        return _time(aten, cuda), _time(template, cuda)

    return matmul_choice.choose(
        key,
        _tuned,
        _disk,
        target,
        args,
        kwargs,
        compile_graph,
        "template",
        time_both,
        tol=2e-2 if low else 1e-3,
        margin=MARGIN,
        scope=_tuning,
    )


def _time(fn, cuda):
    """Seconds per call: Triton's do_bench on a GPU, the best of a few wall-clock runs on CPU."""
    fn()
    if cuda:  # pragma: no cover (needs a GPU)
        import triton.testing

        return triton.testing.do_bench(fn, warmup=5, rep=25, return_mode="median") * 1e-3
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
