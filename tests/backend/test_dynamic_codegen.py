"""Symbolic-size code generation: one compile of an ATen graph serves every size (issue #8)."""

import sympy
import torch
import torch.nn.functional as F

from kiln import logs
from kiln.autograd.aten_tracer import trace_aten
from kiln.backend import ir
from kiln.backend.compile_fx import CompiledGraph, compile_aten_graph
from kiln.backend.decompositions import DECOMPOSITIONS
from kiln.backend.ir import Ix, set_range
from kiln.symbolic import shape_env
from kiln.symbolic.fake import fake_like
from kiln.symbolic.shape_env import ShapeEnv


def sym_compile(fn, inputs, dynamic):
    """Trace fn with the dims in `dynamic` ({input index: {dims}}) symbolic, compile it once."""
    env = ShapeEnv()
    fakes = []
    for k, x in enumerate(inputs):
        dims = dynamic.get(k)
        sizes = env.sizes_of(x, f"L['a{k}']", dims) if dims else None
        fakes.append(fake_like(x, sizes=sizes))
    gm = trace_aten(fn, fakes, decompositions=DECOMPOSITIONS)
    gm.meta["shape_env"] = env
    specialised = {s: v for s, v in env.replacements.items() if v.is_Integer}
    assert not specialised, f"the tracer specialised {specialised}"
    before = dict(logs.counters["backend"])
    compiled = compile_aten_graph(gm, fakes)
    assert isinstance(compiled, CompiledGraph), "graph fell back to eager"
    after = logs.counters["backend"]
    compiles = sum(after[k] - before.get(k, 0) for k in ("cpp_compiles", "cpp_disk_hits"))
    assert compiles == 1, (before, dict(after))
    return compiled, env


def run_sizes(fn, compiled, make_inputs, sizes, *, atol=1e-5, rtol=1e-5):
    """Run the ONE compiled graph at every size and compare with eager; nothing recompiles."""
    before = dict(logs.counters["backend"])
    for n in sizes:
        inputs = make_inputs(n)
        got = compiled(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        want = fn(*inputs)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape, (n, k, g.shape, w.shape)
            torch.testing.assert_close(
                g, w, atol=atol, rtol=rtol, msg=lambda m, n=n: f"size {n}: {m}"
            )
    assert dict(logs.counters["backend"]) == before


def assert_symbolic(compiled, *names):
    """The kernels take the size arguments and the wrapper computes them from the inputs."""
    for s in names:
        assert f"int64_t k{s}" in compiled.cpp_src, compiled.cpp_src
        assert f"{s} = arg" in compiled.wrapper_src, compiled.wrapper_src
    assert not compiled.fallback_ops, compiled.fallback_ops


# --- index expressions ---------------------------------------------------------------------------


def test_symbolic_index_simplification():
    env = ShapeEnv()
    s0, s1 = env.create_symbol(5, "a"), env.create_symbol(7, "b")
    set_range("i0", 0, s0 - 1)
    set_range("i1", 0, s1 - 1)
    flat = Ix.var("i0") * s1 + Ix.var("i1")
    assert flat.render() == "ks1*i0 + i1"
    assert flat // s1 == Ix.var("i0")
    assert flat % s1 == Ix.var("i1")
    assert (flat * 4 + 3) // 4 == flat  # static divisor, symbolic coefficients
    assert (flat // s1) % s0 == Ix.var("i0")  # bounds of a quotient are proved too
    atom = Ix.var("i0") // 2  # not simplifiable: a C++ division with a symbolic bound
    assert atom.render() == "((i0) / 2)"
    assert ir.known_lt(s1 - 1, s1) and not ir.known_lt(s0, s1)
    assert ir.cexpr(sympy.floor(s0 / 2) * s1) == "ks1*(ks0 / 2)"
    assert ir.pexpr(s0 * s1 + 3) == "(s0*s1 + 3)"


# --- whole graphs --------------------------------------------------------------------------------

SIZES = [5, 8, 17, 33, 2]  # non-multiples of the vector width, and the smallest symbol value


def test_pointwise_broadcast_and_reductions():
    def fn(x, b):
        y = torch.exp(x * 0.5) + b
        return y, y.sum(1), y.mean(0), x.sum()

    x, b = torch.randn(5, 7), torch.randn(7)
    compiled, _ = sym_compile(fn, [x, b], {0: {0, 1}, 1: {0}})
    assert_symbolic(compiled, "s0", "s1")
    run_sizes(fn, compiled, lambda n: [torch.randn(n + 1, n), torch.randn(n)], SIZES)


def test_softmax_and_layer_norm_over_symbolic_rows():
    def fn(x, w, b):
        return torch.softmax(x, -1), F.layer_norm(x, (x.shape[-1],), w, b)

    args = [torch.randn(3, 6), torch.randn(6), torch.randn(6)]
    compiled, _ = sym_compile(fn, args, {0: {0, 1}, 1: {0}, 2: {0}})
    assert_symbolic(compiled, "s0", "s1")
    assert compiled.kernel_count == 1, compiled.cpp_src  # both row patterns in one pass per row
    run_sizes(
        fn,
        compiled,
        lambda n: [torch.randn(n, n + 3), torch.randn(n + 3), torch.randn(n + 3)],
        SIZES,
    )


def test_extern_indexing_and_reduction_ops():
    w = torch.randn(4, 3, 3, 3)

    def fn(x, i, img):
        return (
            torch.gather(x, 1, i) * 2,
            x.index_select(0, i[:, 0]),
            x[:, 1:] - x[:, :-1],
            x[..., ::2] + x[-2:].sum(0)[::2],
            F.pad(x, (1, 2)) * 3,
            x.flip(0).argmax(1),
            x.var(0),
            torch.where(torch.arange(x.shape[1]) < 3, x, 0.0),
            F.relu(F.conv2d(img, w, padding=1)),
        )

    def make(n):
        return [
            torch.randn(n + 2, n + 3),
            torch.randint(0, n + 2, (n + 2, 3)),
            torch.randn(n, 3, n + 1, 5),
        ]

    compiled, _ = sym_compile(fn, make(3), {0: {0, 1}, 1: {0}, 2: {0, 2}})
    assert_symbolic(compiled, "s0", "s1", "s2")
    run_sizes(fn, compiled, make, [2, 3, 6, 11], atol=1e-4)


def test_view_permute_reshape_chain():
    def fn(x):
        b = x.shape[0]
        y = x.view(b, -1).t().reshape(-1, 2) * 2
        return y, x.permute(2, 0, 1).contiguous() + 1

    compiled, _ = sym_compile(fn, [torch.randn(6, 4, 3)], {0: {0}})
    assert_symbolic(compiled, "s0")
    run_sizes(fn, compiled, lambda n: [torch.randn(n, 4, 3)], SIZES)


def test_cat_and_slices():
    def fn(x, y):
        c = torch.cat([x, y], 0) + 1
        return c, c[1:] * 2, c[:, 2:5]

    compiled, _ = sym_compile(fn, [torch.randn(5, 8), torch.randn(3, 8)], {0: {0}, 1: {0}})
    assert_symbolic(compiled, "s0", "s1")
    run_sizes(fn, compiled, lambda n: [torch.randn(n, 8), torch.randn(n + 3, 8)], SIZES)


def test_embedding_and_output_code_log(capsys):
    def fn(w, i):
        return (F.embedding(i, w) * 2,)

    w = torch.randn(10, 8)
    logs.set_logs("output_code")
    try:
        compiled, _ = sym_compile(fn, [w, torch.randint(0, 10, (3, 5))], {1: {0, 1}})
    finally:
        logs.set_logs("")
    assert_symbolic(compiled, "s0", "s1")
    err = capsys.readouterr().err
    assert "int64_t ks0, int64_t ks1)" in err and "s0 = arg1.size(0)" in err, err
    run_sizes(fn, compiled, lambda n: [w, torch.randint(0, 10, (n, n + 2))], SIZES)


def test_matmul_mlp():
    w1, b1, w2 = torch.randn(16, 32), torch.randn(32), torch.randn(32, 8)

    def fn(x, w1, b1, w2):
        return (torch.relu(x @ w1 + b1) @ w2,)

    compiled, _ = sym_compile(fn, [torch.randn(5, 16), w1, b1, w2], {0: {0}})
    assert_symbolic(compiled, "s0")
    assert "empty_strided((s0, 32)" in compiled.wrapper_src
    run_sizes(fn, compiled, lambda n: [torch.randn(n, 16), w1, b1, w2], SIZES, atol=1e-4)


def test_size_inputs_and_outputs():
    """A size input (an int at run time, val SymInt) binds its symbol; a size output is computed
    by the wrapper; a tensor op with a size operand reads it as an index expression."""
    env = ShapeEnv()
    x = torch.randn(4, 6)
    fx = fake_like(x, sizes=env.sizes_of(x, "x", {0}))
    n = shape_env.to_torch(env.create_size(3, "n"))

    def fn(x, n):
        return x.view(-1, 2) * n, x.shape[0] * 2, torch.zeros(n, 2) + x.shape[0]

    gm = trace_aten(fn, [fx, n], decompositions=DECOMPOSITIONS)
    gm.meta["shape_env"] = env
    compiled = compile_aten_graph(gm, [fx, n])
    assert_symbolic(compiled, "s0", "s1")
    assert "s1 = arg1" in compiled.wrapper_src and "2*s0," in compiled.wrapper_src
    for k in (2, 5, 7):
        xx = torch.randn(k, 6)
        got, want = compiled(xx, k + 1), fn(xx, k + 1)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and type(got[1]) is int
        torch.testing.assert_close(got[2], want[2])


def test_unbindable_symbol_runs_the_graph_eagerly(capsys):
    """A symbol no input provides as a whole size: the graph runs in the FX interpreter (correct
    for every size), with a perf hint; never code specialised to the hint."""
    env = ShapeEnv()
    n = env.create_size(3, "n") * env.create_size(4, "m")
    g = torch.fx.Graph()
    a = g.placeholder("arg0_1")
    a.meta["val"] = shape_env.to_torch(n)
    z = g.call_function(torch.ops.aten.zeros.default, ([a, 2],))
    z.meta["val"] = fake_like(torch.zeros(12, 2), sizes=(n, 2))
    g.output((z,))
    gm = torch.fx.GraphModule({}, g)
    gm.meta["shape_env"] = env
    logs.set_logs("perf_hints")
    try:
        compiled = compile_aten_graph(gm, [a.meta["val"]])
    finally:
        logs.set_logs("")
    assert getattr(compiled, "kiln_fallback", False)
    assert "cannot be computed from the graph's inputs" in capsys.readouterr().err
    assert compiled(6)[0].shape == (6, 2)


def test_symbol_bound_from_a_linear_size():
    env = ShapeEnv()
    s0 = env.create_size(3, "n")
    x = fake_like(torch.zeros(7), sizes=(2 * s0 + 1,))
    g = torch.fx.Graph()
    a = g.placeholder("arg0_1")
    a.meta["val"] = x
    z = g.call_function(torch.ops.aten.zeros.default, ([s0, 2],))  # needs s0 itself
    z.meta["val"] = fake_like(torch.zeros(3, 2), sizes=(s0, 2))
    y = g.call_function(torch.ops.aten.mul.Tensor, (a, 2.0))
    y.meta["val"] = x
    g.output((z, y))
    gm = torch.fx.GraphModule({}, g)
    gm.meta["shape_env"] = env
    compiled = compile_aten_graph(gm, [x])
    assert "s0 = (arg0.size(0) - 1) // 2" in compiled.wrapper_src, compiled.wrapper_src
    for k in (2, 5):
        z, y = compiled(torch.ones(2 * k + 1))
        assert z.shape == (k, 2) and torch.equal(y, torch.full((2 * k + 1,), 2.0))


# --- through kiln.compile + AOT autograd: symbolic batch and sequence, inference and training ----

C, NH = 16, 2


class Block(torch.nn.Module):
    """A pre-norm transformer block with causal attention written out."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.qkv, self.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.fc, self.fc2 = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, NH, C // NH).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (C // NH) ** -0.5
        att = att.masked_fill(torch.ones(t, t).tril() == 0, float("-inf"))
        y = (torch.softmax(att, -1) @ v).transpose(1, 2).reshape(b, t, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(C, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))


SEQ_SIZES = [(2, 7), (3, 5), (2, 33), (5, 2), (4, 9)]


def _run_dynamic(make, grad):
    """kiln.compile(dynamic=True, backend="kiln") over batch/seq sizes: equal to eager (outputs
    and gradients), at most 2 frame compiles, no eager fallback, one backend compile per graph."""
    import copy

    import kiln

    kiln.reset()
    model = make()
    ref = copy.deepcopy(model)
    compiled = kiln.compile(model, backend="kiln", dynamic=True)
    for b, t in SEQ_SIZES:
        x = torch.randn(b, t, C)
        with torch.set_grad_enabled(grad):
            got, want = compiled(x), ref(x)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        if grad:
            g = torch.randn_like(want)
            got.backward(g)
            want.backward(g)
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)
                p.grad = q.grad = None
    stats, backend = logs.counters["stats"], logs.counters["backend"]
    assert stats["unique_graphs"] <= 2, dict(stats)
    assert not backend["eager_fallbacks"], dict(backend)
    per_frame = 2 if grad else 1  # forward (+ backward) graph per frame compile
    assert backend["graphs_compiled"] == per_frame * stats["unique_graphs"], dict(backend)


def test_kiln_compile_dynamic_inference():
    _run_dynamic(_mlp, False)
    _run_dynamic(Block, False)


def test_kiln_compile_dynamic_training():
    _run_dynamic(Block, True)


def test_transposed_input_and_view_outputs():
    """Symbolic strides of an input (1, s0), views of it as outputs, a slice whose clamping only
    the tracer's guard knows (x[:, :3] of a dim s1 >= 2)."""

    def fn(x):
        return x * 2, x[1:, :3], x.sum(1), x.t()

    compiled, _ = sym_compile(fn, [torch.randn(6, 5).t()], {0: {0, 1}})
    assert_symbolic(compiled, "s0", "s1")
    assert "rt.view(arg0, ((s0 - 1), 3), (1, s0), 1)" in compiled.wrapper_src
    run_sizes(fn, compiled, lambda n: [torch.randn(n + 3, n + 1).t()], SIZES)
    run_sizes(fn, compiled, lambda n: [torch.randn(n + 1, n + 3)], SIZES)  # copied to its layout


def test_cumsum_keeps_its_symbolic_size():
    # (torch._decomp's cumsum is a triangular mask and a sum through prims: it pinned every size
    # and is quadratic; kiln keeps cumsum as one ATen call)
    def fn(m):
        return ((m.cumsum(-1) - 1) * m,)

    m = torch.ones(3, 9, dtype=torch.long)
    compiled, _ = sym_compile(fn, [m], {0: {0, 1}})
    run_sizes(fn, compiled, lambda n: [torch.randint(0, 2, (n, n + 3))], SIZES)
