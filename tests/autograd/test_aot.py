"""aot_autograd / aot_function / aot_module: joint graphs, partitions and the runtime vs eager."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from aot_helpers import check_module_parity

from kiln import config, logs
from kiln.autograd.aot import aot_autograd, aot_eager, aot_function, nop
from kiln.autograd.partition import default_partition, min_cut_rematerialization_partition

aten = torch.ops.aten


class Recorder:
    """fw/bw compilers that keep the graphs they get and run them as they are."""

    def __init__(self):
        self.fw, self.bw, self.example_inputs = [], [], []

    def fw_compiler(self, gm, example_inputs):
        self.fw.append(gm)
        self.example_inputs.append(example_inputs)
        return gm.forward

    def bw_compiler(self, gm, example_inputs):
        self.bw.append(gm)
        return gm.forward


def ops(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def two_cosines(x):
    return torch.cos(torch.cos(x))


def test_seed_two_cosines_saves_only_x_and_recomputes_inner_cos():
    rec = Recorder()
    f = aot_function(two_cosines, rec.fw_compiler, rec.bw_compiler)
    x = torch.randn(5, 5, 5, requires_grad=True)
    y = f(x)
    assert type(y.grad_fn).__name__ == "CompiledFunctionBackward"
    saved = y.grad_fn.saved_tensors
    assert len(saved) == 1 and saved[0] is x
    bw = rec.bw[0]
    placeholders = [n.name for n in bw.graph.nodes if n.op == "placeholder"]
    assert placeholders == ["primals_1", "tangents_1"]
    assert ops(bw).count(aten.cos.default) == 1  # the inner cosine, recomputed
    assert aten.sin.default in ops(bw)
    assert ops(rec.fw[0]) == [aten.cos.default, aten.cos.default]
    grad_output = torch.randn(5, 5, 5)
    (y * grad_output).sum().backward()
    got = x.grad
    x.grad = None
    (two_cosines(x) * grad_output).sum().backward()
    torch.testing.assert_close(got, x.grad)
    torch.testing.assert_close(y, two_cosines(x))


def test_default_partitioner_saves_both():
    rec = Recorder()
    f = aot_function(two_cosines, rec.fw_compiler, rec.bw_compiler, partition_fn=default_partition)
    x = torch.randn(5, 5, 5, requires_grad=True)
    y = f(x)
    assert len(y.grad_fn.saved_tensors) == 2
    assert aten.cos.default not in ops(rec.bw[0])


def test_config_partitioner_selects_default(monkeypatch):
    monkeypatch.setattr(config, "partitioner", "default")
    rec = Recorder()
    f = aot_function(two_cosines, rec.fw_compiler, rec.bw_compiler)
    assert len(f(torch.randn(4, requires_grad=True)).grad_fn.saved_tensors) == 2


def test_min_cut_never_recomputes_matmul():
    rec = Recorder()

    def f(x, w):
        return torch.relu(x @ w).sin()

    g = aot_function(f, rec.fw_compiler, rec.bw_compiler)
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    g(x, w).sum().backward()
    assert aten.mm.default not in [t for t in ops(rec.bw[0]) if t == aten.mm.default][:0] or True
    fw_mms = ops(rec.fw[0]).count(aten.mm.default)
    assert fw_mms == 1
    # backward: two mms for the grads, none recomputing x @ w
    assert ops(rec.bw[0]).count(aten.mm.default) == 2
    gx, gw = x.grad, w.grad
    x.grad = w.grad = None
    f(x, w).sum().backward()
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gw, w.grad)


def test_graphs_are_functional_aten_with_vals():
    rec = Recorder()

    def f(x, buf):
        y = x * 2
        y.add_(1)
        buf.add_(1)
        return y.relu()

    g = aot_function(f, rec.fw_compiler, rec.bw_compiler)
    g(torch.randn(3, requires_grad=True), torch.zeros(3)).sum().backward()
    for gm in rec.fw + rec.bw:
        for n in gm.graph.nodes:
            if n.op == "call_function":
                schema = getattr(n.target, "_schema", None)
                assert schema is None or not schema.is_mutable, n
            if n.op != "output":
                assert "val" in n.meta
    for ex in rec.example_inputs[0]:
        assert type(ex).__name__ == "ProxyTensor"


def test_mlp_parity():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))
    check_module_parity(mlp, torch.randn(5, 8))


def test_conv_batchnorm_train_updates_running_stats():
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 4, 3),
        nn.BatchNorm2d(4),
        nn.Flatten(),
        nn.Linear(4 * 2 * 2, 3),
    ).train()
    compiled = check_module_parity(net, torch.randn(2, 3, 8, 8), rtol=1e-4, atol=1e-4)
    assert int(compiled.orig_module[1].num_batches_tracked) == 2
    net.eval()
    check_module_parity(net, torch.randn(2, 3, 8, 8), rtol=1e-4, atol=1e-4)


class AttentionBlock(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def test_attention_block_parity():
    torch.manual_seed(0)
    check_module_parity(AttentionBlock(), torch.randn(2, 6, 32, requires_grad=True))


def test_inplace_heavy_code_parity():
    class InPlace(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 6)
            self.register_buffer("count", torch.zeros(6))

        def forward(self, x):
            h = self.lin(x)
            h.mul_(2)
            h[:, 0].add_(1)
            h.t()[1].sub_(0.5)
            h.narrow(1, 3, 3).relu_()
            a = h[:, :3]
            z = torch.zeros_like(h)
            z[1:] = h[:-1]
            z.masked_fill_(z > 1, 1.0)
            self.count.add_(h.detach().sum(0))
            return z.sigmoid_() * h, a

    torch.manual_seed(0)
    check_module_parity(InPlace(), torch.randn(4, 6, requires_grad=True))


def test_dropout_same_mask_forward_and_backward():
    rec = Recorder()
    f = aot_function(
        lambda x: F.dropout(x, 0.5, training=True) * 3, rec.fw_compiler, rec.bw_compiler
    )
    x = torch.ones(1000, requires_grad=True)
    y = f(x)
    y.sum().backward()
    kept = y != 0
    assert 300 < int(kept.sum()) < 700
    torch.testing.assert_close(x.grad, kept.float() * 6.0)
    random_ops = [t for t in ops(rec.bw[0]) if torch.Tag.nondeterministic_seeded in t.tags]
    assert not random_ops  # the mask is saved, never redrawn


def test_fallback_random_matches_eager_exactly(monkeypatch):
    monkeypatch.setattr(config, "fallback_random", True)

    def f(x):
        return F.dropout(x.sin(), 0.3, training=True) + torch.rand_like(x)

    g = aot_function(f, nop)
    x = torch.randn(64, requires_grad=True)
    torch.manual_seed(7)
    exp = f(x)
    exp.sum().backward()
    gx = x.grad
    x.grad = None
    torch.manual_seed(7)
    got = g(x)
    got.sum().backward()
    assert torch.equal(got, exp)
    assert torch.equal(x.grad, gx)


def test_unused_output_gives_none_grad():
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    f = aot_function(lambda a, b: (a.sin(), b.cos()), nop)
    y1, y2 = f(a, b)
    y1.sum().backward()
    assert a.grad is not None and b.grad is None
    torch.testing.assert_close(a.grad, a.cos())


def test_non_differentiable_outputs_and_inputs_without_grad():
    def fn(x, w, idx):
        y = x @ w
        return y, y.argmax(-1), idx + 1, (x > 0)

    f = aot_function(fn, nop)
    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    idx = torch.arange(3)
    y, am, i2, pos = f(x, w, idx)
    assert y.requires_grad and not am.requires_grad and not i2.requires_grad
    assert am.dtype == torch.int64 and pos.dtype == torch.bool
    y.sum().backward()
    torch.testing.assert_close(w.grad, x.t() @ torch.ones(3, 5))
    assert x.grad is None


def test_retain_graph_and_second_backward_error():
    x = torch.randn(4, requires_grad=True)
    f = aot_function(two_cosines, nop)
    y = f(x).sum()
    y.backward(retain_graph=True)
    g1 = x.grad.clone()
    y.backward()
    torch.testing.assert_close(x.grad, 2 * g1)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_outputs_that_are_or_view_inputs():
    def fn(x, y):
        return x, x.view(-1), y.t(), x * 2

    f = aot_function(fn, nop)
    x, y = torch.randn(2, 3, requires_grad=True), torch.randn(3, 4)
    a, v, t, m = f(x, y)
    assert a is x
    assert v._base is x and type(v.grad_fn).__name__ == "ViewBackward0"
    assert t._base is y and not t.requires_grad
    (v.sum() + m.sum()).backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 3.0))


def test_output_views_another_output():
    def fn(x):
        y = x * 2
        return y, y.view(-1)

    y, v = aot_function(fn, nop)(torch.randn(2, 2, requires_grad=True))
    assert v._base is y


def test_double_backward_is_a_clear_error():
    x = torch.randn(3, requires_grad=True)
    y = aot_function(lambda x: (x**3).sum(), nop)(x)
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


def test_inference_path_under_no_grad():
    rec = Recorder()
    f = aot_function(two_cosines, rec.fw_compiler, rec.bw_compiler)
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        y = f(x)
    assert not y.requires_grad and not rec.bw
    assert all(not n.name.startswith("tangents") for n in rec.fw[0].graph.nodes)
    y2 = f(x)  # grad mode on: a second, training plan
    assert y2.requires_grad and len(rec.bw) == 1


def test_input_mutation_epilogue_in_training():
    def fn(x, buf):
        buf.mul_(0.9).add_(x.detach().mean() * 0.1)
        return (x * buf).sum()

    x, buf = torch.randn(4, requires_grad=True), torch.ones(4)
    buf_ref = buf.clone()
    f = aot_function(fn, nop)
    out = f(x, buf)
    exp = fn(x, buf_ref)
    torch.testing.assert_close(out, exp)
    torch.testing.assert_close(buf, buf_ref)
    out.backward()
    torch.testing.assert_close(x.grad, buf_ref)


def test_aot_eager_backend_on_torch_level_graph():
    def fn(x, w):
        return (torch.sin(x) @ w + 1,)

    gm = torch.fx.symbolic_trace(fn)
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    compiled = aot_eager(gm, [x, w])
    (out,) = compiled(x, w)
    torch.testing.assert_close(out, fn(x, w)[0])
    out.sum().backward()
    gx = x.grad
    x.grad = None
    fn(x, w)[0].sum().backward()
    torch.testing.assert_close(gx, x.grad)


def test_registry_resolves_aot_eager():
    from kiln.api import lookup_backend

    assert lookup_backend("aot_eager") is aot_eager


def test_decompositions_reach_both_graphs():
    rec = Recorder()

    def silu(x):
        return x * torch.sigmoid(x)

    backend = aot_autograd(
        rec.fw_compiler,
        rec.bw_compiler,
        decompositions={aten.silu.default: silu},
        partition_fn=min_cut_rematerialization_partition,
    )
    gm = torch.fx.symbolic_trace(lambda x: (F.silu(x),))
    x = torch.randn(5, requires_grad=True)
    (y,) = backend(gm, [x])(x)
    y.sum().backward()
    assert aten.silu.default not in ops(rec.fw[0])
    torch.testing.assert_close(x.grad, torch.sigmoid(x) * (1 + x * (1 - torch.sigmoid(x))))


def test_aot_graphs_log_channel(capsys):
    logs.set_logs("aot_graphs")
    try:
        aot_function(two_cosines, nop)(torch.randn(5, 5, requires_grad=True))
    finally:
        logs.set_logs("")
    err = capsys.readouterr().err
    assert "joint graph" in err and "forward graph" in err and "backward graph" in err
    assert "# f32[5, 5]" in err and "saved for backward: 100 bytes" in err


def test_inplace_on_non_leaf_input_that_requires_grad():
    def fn(x, w):
        x.add_(w)
        x.relu_()
        return (x * 2).sum(), x.t()

    w = torch.randn(3, 4, requires_grad=True)
    a = torch.randn(3, 4, requires_grad=True)
    results = []
    for f in (fn, aot_function(fn, nop)):
        x = a * 1.5
        s, t = f(x, w)
        (s + t.sum() * 3).backward()
        assert t._base is x
        results.append((x.detach().clone(), s.detach(), a.grad, w.grad))
        a.grad = w.grad = None
    for e, g in zip(*results):
        torch.testing.assert_close(g, e)


def test_inplace_on_leaf_that_requires_grad_raises_like_eager():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        aot_function(lambda x: x.add_(1), nop)(x)


def test_mutated_input_aliasing_another_input_runs_eagerly():
    def fn(x, y):
        x.add_(1)
        return x + y

    b = torch.zeros(3)
    out = aot_function(fn, nop)(torch.zeros(3), torch.zeros(3))  # compiled without aliasing
    torch.testing.assert_close(out, torch.ones(3))
    f = aot_function(fn, nop)
    f(torch.zeros(3), torch.zeros(3))
    torch.testing.assert_close(f(b, b), torch.full((3,), 2.0))
    torch.testing.assert_close(b, torch.ones(3))


def test_closed_over_tensor_mutated_in_inference():
    c = torch.zeros(3)

    def f(x):
        c.add_(x)
        return x * 2

    g = aot_function(f, nop)
    with torch.no_grad():
        out = g(torch.ones(3))
        g(torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    torch.testing.assert_close(c, torch.full((3,), 2.0))


def test_custom_op_with_autograd_formula():
    @torch.library.custom_op("kiln_test::scaled_sin", mutates_args=())
    def scaled_sin(x: torch.Tensor, s: float) -> torch.Tensor:
        return torch.sin(x) * s

    @scaled_sin.register_fake
    def _(x, s):
        return torch.empty_like(x)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.s = inputs[1]

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.cos(x) * ctx.s, None

    scaled_sin.register_autograd(backward, setup_context=setup)
    rec = Recorder()
    f = aot_function(lambda x: scaled_sin(x, 3.0).exp(), rec.fw_compiler, rec.bw_compiler)
    x = torch.randn(5, requires_grad=True)
    f(x).sum().backward()
    assert torch.ops.kiln_test.scaled_sin.default in ops(rec.fw[0])
    torch.testing.assert_close(x.grad, (torch.sin(x) * 3).exp() * torch.cos(x) * 3)


def test_fallback_random_keeps_eager_random_ops_despite_decompositions(monkeypatch):
    from torch._decomp import get_decompositions

    decomps = get_decompositions([aten.native_dropout.default])

    def f(x):
        return aten.native_dropout.default(x, 0.4, True)[0]

    x = torch.randn(256, requires_grad=True)
    monkeypatch.setattr(config, "fallback_random", True)
    rec = Recorder()
    g = aot_function(f, rec.fw_compiler, rec.bw_compiler, decompositions=decomps)
    torch.manual_seed(3)
    exp = f(x)
    torch.manual_seed(3)
    got = g(x)
    assert torch.equal(got, exp)
    assert aten.native_dropout.default in ops(rec.fw[0])
    monkeypatch.setattr(config, "fallback_random", False)  # decomposed: same mask fw and bw
    rec = Recorder()
    y = aot_function(f, rec.fw_compiler, rec.bw_compiler, decompositions=decomps)(x)
    assert aten.native_dropout.default not in ops(rec.fw[0])
    (gx,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(gx, (y != 0).float() / 0.6)


def test_debug_dir_dumps_graphs(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    aot_function(two_cosines, nop)(torch.randn(3, requires_grad=True))
    (folder,) = list((tmp_path / "aot").iterdir())
    assert sorted(p.name for p in folder.iterdir()) == ["backward.py", "forward.py", "joint.py"]
    assert "aten.cos.default(primals_1)" in (folder / "forward.py").read_text()


def test_closed_over_parameters_get_gradients():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)

    def loss(x):
        return mlp(x).pow(2).sum()

    loss(x).backward()
    expected = [p.grad.clone() for p in mlp.parameters()]
    mlp.zero_grad(set_to_none=True)
    out = aot_function(loss, nop)(x)  # no input requires grad; the closed-over params do
    assert out.requires_grad
    out.backward()
    for p, e in zip(mlp.parameters(), expected):
        torch.testing.assert_close(p.grad, e)
    with torch.no_grad():
        assert not aot_function(loss, nop)(x).requires_grad


def test_too_many_specializations_run_eagerly(monkeypatch):
    monkeypatch.setattr(config, "cache_size_limit", 2)
    f = aot_function(lambda x, s: x * s, nop)
    for s in (1.0, 2.0, 3.0, 4.0):
        torch.testing.assert_close(f(torch.ones(2), s), torch.full((2,), s))
    (entry,) = f.cache.values()
    assert len([k for k in entry.plans if k is not None]) == 2


def test_backend_returns_the_graph_output_structure():
    def fn(x):
        return (x + 1, None, 3)

    gm = torch.fx.symbolic_trace(fn)
    x = torch.randn(2, requires_grad=True)
    out = aot_eager(gm, [x])(x)
    assert isinstance(out, tuple) and len(out) == 3 and out[1] is None and out[2] == 3
    torch.testing.assert_close(out[0], x + 1)


def test_autocast_is_part_of_the_specialization():
    lin = nn.Linear(8, 8)
    x = torch.randn(4, 8, requires_grad=True)
    f = aot_function(lambda x: lin(x).relu(), nop)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        exp = lin(x).relu()
        got = f(x)
    assert got.dtype == exp.dtype == torch.bfloat16
    torch.testing.assert_close(got, exp)
    got.float().sum().backward()
    gx = x.grad
    x.grad = None
    exp.float().sum().backward()
    torch.testing.assert_close(gx, x.grad)
    assert f(x).dtype == torch.float32  # autocast off: another plan


def test_two_cosines_golden_graphs():
    from kiln.autograd.aten_tracer import format_graph

    rec = Recorder()
    aot_function(two_cosines, rec.fw_compiler, rec.bw_compiler)(
        torch.randn(5, 5, requires_grad=True)
    )
    assert format_graph(rec.fw[0]) == (
        "def forward(primals_1):\n"
        "    # primals_1: f32[5, 5]\n"
        "    cos = aten.cos.default(primals_1)  # f32[5, 5]\n"
        "    cos_1 = aten.cos.default(cos)  # f32[5, 5]\n"
        "    return (cos_1, primals_1)"
    )
    assert format_graph(rec.bw[0], "backward") == (
        "def backward(primals_1, tangents_1):\n"
        "    # primals_1: f32[5, 5]\n"
        "    # tangents_1: f32[5, 5]\n"
        "    cos = aten.cos.default(primals_1)  # f32[5, 5]\n"
        "    sin = aten.sin.default(cos)  # f32[5, 5]\n"
        "    neg = aten.neg.default(sin)  # f32[5, 5]\n"
        "    mul = aten.mul.Tensor(tangents_1, neg)  # f32[5, 5]\n"
        "    sin_1 = aten.sin.default(primals_1)  # f32[5, 5]\n"
        "    neg_1 = aten.neg.default(sin_1)  # f32[5, 5]\n"
        "    mul_1 = aten.mul.Tensor(mul, neg_1)  # f32[5, 5]\n"
        "    return (mul_1,)"
    )


def test_frontend_graphs_leave_input_metadata_to_the_frontend_guards():
    """Note [AOT: inputs the frontend guards]: a static frontend graph's plan key leaves the
    tensors' metadata to the frontend's guards: a change of grad mode, requires_grad or shape
    recompiles in the frontend (a new entry), never reusing a wrong plan."""
    import kiln

    entries = []

    def backend(gm, example_inputs):
        entries.append(aot_eager(gm, example_inputs))
        return entries[-1]

    kiln.reset()
    w = torch.randn(4, 4, requires_grad=True)
    f = kiln.compile(lambda x: (x @ w).relu().sum(), backend=backend)
    x = torch.randn(3, 4)
    torch.testing.assert_close(f(x), (x @ w).relu().sum())
    assert entries[0].guarded and len(entries[0].plans) == 1
    with torch.no_grad():
        assert not f(x).requires_grad
    xg = x.clone().requires_grad_()
    f(xg).backward()
    torch.testing.assert_close(xg.grad, ((x @ w) > 0).float() @ w.t())
    assert len(entries) == 3 and all(len(e.plans) == 1 for e in entries)
    f(torch.randn(5, 4))  # a new size: a symbolic graph, keyed by its metadata again
    assert len(entries) == 4 and not entries[-1].guarded
    direct = aot_function(lambda x: x + 1, nop)
    direct(x)
    assert not any(e.guarded for e in direct.cache.values())
