"""AOT autograd with symbolic sizes: one trace serves many (B, T); outputs and grads equal eager."""

import math

import torch
import torch.fx
import torch.nn.functional as F

import kiln
from kiln.autograd.aot import aot_autograd, aot_function, nop
from kiln.autograd.aten_tracer import format_graph
from kiln.symbolic.fake import fake_like, is_symbolic
from kiln.symbolic.shape_env import ShapeEnv

aten = torch.ops.aten


class Recorder:
    """A compiler that runs the graph as it is and keeps every graph it is given."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        if any(is_symbolic(v) or isinstance(v, torch.SymInt) for v in example_inputs):
            assert isinstance(gm.meta["shape_env"], ShapeEnv)
        return gm.forward


def _params(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*s, generator=g) / math.sqrt(s[-1])).requires_grad_() for s in shapes]


def mlp(x, y, w1, b1, w2, b2):
    h = F.gelu(F.linear(x, w1, b1))
    logits = F.linear(h, w2, b2)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)), logits


def block(x, y, mask, ln_w, ln_b, w_qkv, w_o, w_head, nh=4):
    """A transformer block: layer norm, causal attention (buffer mask sliced [:T, :T]), head, loss."""
    B, T, C = x.shape
    hd = C // nh
    h = F.layer_norm(x, (C,), ln_w, ln_b)
    q, k, v = F.linear(h, w_qkv).split(C, dim=2)
    q = q.view(B, T, nh, hd).transpose(1, 2)
    k = k.view(B, T, nh, hd).transpose(1, 2)
    v = v.view(B, T, nh, hd).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
    att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(-1)
    a = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
    x = x + F.linear(a, w_o)
    x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
    logits = F.linear(F.gelu(x), w_head)
    return F.cross_entropy(logits.view(B * T, -1), y.view(B * T)), x


def _check(fn, compiled, make_inputs, sizes, params):
    for B, T in sizes:
        inputs = make_inputs(B, T)
        got = compiled(*inputs, *params)
        got_grads = torch.autograd.grad(got[0] + got[1].sum(), params)
        exp = fn(*inputs, *params)
        exp_grads = torch.autograd.grad(exp[0] + exp[1].sum(), params)
        for g, e in zip(got, exp):
            assert g.shape == e.shape
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
        for g, e in zip(got_grads, exp_grads):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


SIZES = [(3, 5), (2, 9), (5, 2), (3, 5), (7, 7)]


def test_mlp_one_symbolic_trace_serves_every_batch_and_length():
    rec = Recorder()
    params = _params((32, 16), (32,), (10, 32), (10,))
    compiled = aot_function(mlp, rec, dynamic_dims={0: {0, 1}, 1: {0, 1}})

    def inputs(B, T):
        return torch.randn(B, T, 16), torch.randint(0, 10, (B, T))

    _check(mlp, compiled, inputs, SIZES, params)
    assert len(rec.graphs) == 2  # one forward, one backward for all sizes
    fw, bw = (format_graph(g) for g in rec.graphs)
    assert "# primals_1: f32[s0, s1, 16]" in fw and "f32[s0, s1, 32]" in fw
    assert "aten.sym_size.int(primals_1, 0)" in fw and "f32[s0*s1, 10]" in fw
    assert "f32[s0, s1, 16]" in bw


def test_transformer_block_symbolic_batch_and_sequence():
    rec = Recorder()
    C = 32
    params = _params((C,), (C,), (3 * C, C), (C, C), (11, C), seed=1)
    mask = torch.ones(16, 16).tril()
    compiled = aot_function(
        lambda x, y, m, *p: block(x, y, m, *p), rec, dynamic_dims={0: {0, 1}, 1: {0, 1}}
    )

    def inputs(B, T):
        return torch.randn(B, T, C), torch.randint(0, 11, (B, T)), mask

    _check(lambda x, y, m, *p: block(x, y, m, *p), compiled, inputs, SIZES, params)
    assert len(rec.graphs) == 2
    fw, bw = rec.graphs
    env = fw.meta["shape_env"]
    assert not any(v.is_Number for v in env.replacements.values()), env.format_symbols()
    text = format_graph(fw)
    assert "f32[s0, 4, s1, 8]" in text and "f32[4*s0, s1, s1]" in text
    assert "aten.slice.Tensor(primals_3, 0, 0, sym_size_int_1)  # f32[s1, 16]" in text
    for g in (fw, bw):  # no hint is baked into an op argument (only the static sizes)
        for n in g.graph.nodes:
            if n.op == "call_function" and n.target in (aten.view.default, aten.expand.default):
                assert all(not isinstance(a, int) or a in (-1, 4, 8, 32, 96, 11) for a in n.args[1])


def test_backward_receives_saved_sizes_as_int_placeholders():
    rec = Recorder()
    compiled = aot_function(
        lambda x, n: (x.sum() * 2, x.shape[0] * n), rec, dynamic_dims={0: {0, 1}, 1: True}
    )
    for shape, n in [((3, 4), 3), ((5, 7), 2)]:
        x = torch.randn(shape, requires_grad=True)
        out, k = compiled(x, n)
        out.backward()
        assert k == shape[0] * n
        torch.testing.assert_close(x.grad, torch.full(shape, 2.0))
    fw, bw = (format_graph(g) for g in rec.graphs)
    assert fw.splitlines()[2] == "    # primals_2: s2"
    assert "mul_1 = sym_size_int * primals_2  # s0*s2" in fw
    assert bw.splitlines()[:3] == [
        "def forward(sym_size_int, sym_size_int_1, tangents_1):",
        "    # sym_size_int: s0",
        "    # sym_size_int_1: s1",
    ]
    assert "aten.expand.default(mul_2, [sym_size_int, sym_size_int_1])  # f32[s0, s1]" in bw


def test_guards_fail_then_a_static_plan():
    rec = Recorder()
    compiled = aot_function(lambda x: x.view(-1, 4).sum(0), rec, dynamic_dims={0: {0}})
    for n in (8, 12, 3):  # 3: not a multiple of 4, eager raises
        x = torch.randn(n * 4 if n != 3 else n)
        try:
            exp = x.view(-1, 4).sum(0)
        except RuntimeError:
            continue
        torch.testing.assert_close(compiled(x), exp)
    env = rec.graphs[0].meta["shape_env"]
    assert env.guard_texts() == ["a[0].size()[0] >= 2", "(a[0].size()[0] % 4) == 0"]
    assert len(rec.graphs) == 1


def test_torch_level_graph_with_symbolic_example_values():
    """Contract 3: placeholders' example_value fakes are symbolic; the backend traces them."""

    def f(x, w):
        return (torch.relu(x @ w).view(x.size(0), -1) * 2,)

    gm = torch.fx.symbolic_trace(f)
    env = ShapeEnv()
    x, w = torch.randn(6, 3, 4), torch.randn(4, 5, requires_grad=True)
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    phs[0].meta["example_value"] = fake_like(x, sizes=env.sizes_of(x, "L['x']", {0}))
    phs[1].meta["example_value"] = fake_like(w)
    gm.meta["shape_env"] = env
    rec = Recorder()
    compiled = aot_autograd(rec)(gm, [x, w])
    assert "s0" in format_graph(rec.graphs[0]) and rec.graphs[0].meta["shape_env"] is env
    for n in (6, 2, 9):
        x = torch.randn(n, 3, 4)
        (got,) = compiled(x, w)
        (exp,) = f(x, w)
        torch.testing.assert_close(got, exp)
        torch.testing.assert_close(
            torch.autograd.grad(got.sum(), w)[0], torch.autograd.grad(exp.sum(), w)[0]
        )
    assert len(rec.graphs) == 2
    assert env.guard_texts() == ["L['x'].size()[0] >= 2"]


def test_aot_eager_inference_symbolic():
    env = ShapeEnv()

    def f(x):
        return (x.softmax(-1)[:, : x.shape[1] // 2],)

    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(4, 6)
    ph = next(n for n in gm.graph.nodes if n.op == "placeholder")
    ph.meta["example_value"] = fake_like(x, sizes=env.sizes_of(x, "L['x']"))
    compiled = aot_autograd(nop)(gm, [x])
    for shape in [(4, 6), (3, 9), (5, 2)]:
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x)[0], f(x)[0])
    assert len(compiled.plans) == 1


def test_another_layout_gets_a_static_plan():
    rec = Recorder()
    compiled = aot_function(lambda x: x.reshape(-1) * 2, rec, dynamic_dims={0: {0, 1}})
    for x in (torch.randn(3, 4), torch.randn(5, 2), torch.randn(4, 3).t(), torch.randn(6, 7)):
        torch.testing.assert_close(compiled(x), x.reshape(-1) * 2)
    symbolic, static = (format_graph(g) for g in rec.graphs)  # the transposed one: static
    assert "aten.view.default(arg_1, [-1])  # f32[s0*s1]" in symbolic
    assert "f32[3, 4]" in static and "aten.clone" in static


GOLDEN_FORWARD = """\
def forward(primals_1, primals_2):
    # primals_1: f32[s0, s1, 8]
    # primals_2: f32[4, 8]
    t = aten.t.default(primals_2)  # f32[8, 4]
    sym_size_int = aten.sym_size.int(primals_1, 0)  # s0
    sym_size_int_1 = aten.sym_size.int(primals_1, 1)  # s1
    mul = sym_size_int * sym_size_int_1  # s0*s1
    view = aten.view.default(primals_1, [mul, 8])  # f32[s0*s1, 8]
    mm = aten.mm.default(view, t)  # f32[s0*s1, 4]
    _unsafe_view = aten._unsafe_view.default(mm, [sym_size_int, sym_size_int_1, 4])  # f32[s0, s1, 4]
    relu = aten.relu.default(_unsafe_view)  # f32[s0, s1, 4]
    view_1 = aten.view.default(relu, [sym_size_int, -1])  # f32[s0, 4*s1]
    slice_1 = aten.slice.Tensor(view_1, 0, 0, 9223372036854775807)  # f32[s0, 4*s1]
    slice_2 = aten.slice.Tensor(slice_1, 1, 1, 9223372036854775807)  # f32[s0, 4*s1 - 1]
    sum_1 = aten.sum.default(slice_2)  # f32[]
    return (sum_1, primals_1, relu)"""

GOLDEN_BACKWARD = """\
def backward(primals_1, relu, tangents_1):
    # primals_1: f32[s0, s1, 8]
    # relu: f32[s0, s1, 4]
    # tangents_1: f32[]
    sym_size_int = aten.sym_size.int(primals_1, 0)  # s0
    sym_size_int_1 = aten.sym_size.int(primals_1, 1)  # s1
    mul = sym_size_int * sym_size_int_1  # s0*s1
    view = aten.view.default(primals_1, [mul, 8])  # f32[s0*s1, 8]
    mul_1 = 4 * sym_size_int_1  # 4*s1
    sub = mul_1 - 1  # 4*s1 - 1
    expand = aten.expand.default(tangents_1, [sym_size_int, sub])  # f32[s0, 4*s1 - 1]"""


def test_symbolic_graphs_read_well():
    """Golden: sizes are nodes computed from the inputs, vals print symbolic shapes."""
    rec = Recorder()
    w = torch.randn(4, 8, requires_grad=True)

    def f(x, w):
        return F.linear(x, w).relu().view(x.shape[0], -1)[:, 1:].sum()

    compiled = aot_function(f, rec, dynamic_dims={0: {0, 1}})
    for shape in [(3, 5, 8), (2, 7, 8)]:
        x = torch.randn(shape)
        got = torch.autograd.grad(compiled(x, w), w)[0]
        torch.testing.assert_close(got, torch.autograd.grad(f(x, w), w)[0])
    fw, bw = rec.graphs
    assert format_graph(fw) == GOLDEN_FORWARD
    assert format_graph(bw, "backward").startswith(GOLDEN_BACKWARD)


def test_mutation_through_symbolic_views_and_input_epilogue():
    rec = Recorder()

    def f(x, buf):
        y = x.clone()
        y[:, : x.shape[1] // 2] += 1
        y.view(-1)[0] = 3
        buf.add_(x.sum(0))
        z = y.transpose(0, 1)
        z.mul_(2)
        return y, x[1:], z[:2]

    compiled = aot_function(f, rec, dynamic_dims={0: {0, 1}, 1: {0}})
    for shape in [(3, 4), (5, 6), (2, 9)]:
        x, b1, b2 = torch.randn(shape), torch.zeros(shape[1]), torch.zeros(shape[1])
        got, exp = compiled(x, b1), f(x, b2)
        for g, e in zip(got, exp):
            torch.testing.assert_close(g, e)
        torch.testing.assert_close(b1, b2)
        assert got[1]._base is x  # an output that views an input is regenerated as a view
    assert len(rec.graphs) == 1
    text = format_graph(rec.graphs[0])
    assert "aten.slice_scatter.default(slice_1, add_, 1, 0, floordiv)  # f32[s0, s1]" in text


def test_after_the_backend_call_a_new_fact_is_rolled_back_for_a_static_plan():
    """The frontend renders the env's guards when the backend returns: later facts can't be used."""
    from kiln.autograd.aot import AOTCompiled, aot_eager

    env = ShapeEnv()
    x = torch.randn(6, 4)
    example = fake_like(x, sizes=env.sizes_of(x, "L['x']", {0}))

    def fn(x):
        if x.requires_grad and x.shape[0] > 5:  # a fact only the training trace relies on
            return (x * 3,)
        return (x * 2,)

    with torch.no_grad():
        compiled = AOTCompiled(fn, aot_eager.settings, [x], examples=[example], shape_env=env)
    assert env.guard_texts() == ["L['x'].size()[0] >= 2"] and compiled.frozen
    for n in (6, 9):
        xg = torch.randn(n, 4, requires_grad=True)
        torch.testing.assert_close(compiled(xg)[0], xg * 3)
    assert env.guard_texts() == ["L['x'].size()[0] >= 2"]  # rolled back
    static = [k for k in compiled.plans if k is not None and "symbolic" not in k]
    assert len(static) == 2  # one static training plan per size
    x11 = torch.randn(11, 4)
    with torch.no_grad():  # the symbolic inference plan serves a new size
        torch.testing.assert_close(compiled(x11)[0], x11 * 2)
    assert sum(1 for k in compiled.plans if k is not None and "symbolic" in k) == 1


def _split_by_ints(x, w, n, m):
    a, b = (x @ w).split([n, m])
    return a.sin().sum() + (b * 3).sum()


def test_int_inputs_the_backward_reads_are_saved_as_sizes():
    # n and m become graph inputs (symbolic after their values change); the backward slices
    # by n: an int input saved for it goes with the sizes, after the tensors
    # (Note [Partitioner: saved sizes])
    compiled = kiln.compile(_split_by_ints)
    for n in (3, 4, 5):
        x = torch.randn(8, 4, requires_grad=True)
        w = torch.randn(4, 4, requires_grad=True)
        out = compiled(x, w, n, 8 - n)
        grads = torch.autograd.grad(out, (x, w))
        x_ref, w_ref = x.detach().requires_grad_(), w.detach().requires_grad_()
        ref = _split_by_ints(x_ref, w_ref, n, 8 - n)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(grads, torch.autograd.grad(ref, (x_ref, w_ref)))
