"""Fake tensors with symbolic sizes: torch's SymNode protocol, ops and autograd on SymInt sizes."""

import pytest
import torch
import torch.nn.functional as F

from kiln.symbolic.fake import FakeMode, fake_like, sym_sizes, sym_strides
from kiln.symbolic.shape_env import ShapeEnv, SymNode, from_torch, to_torch


def fake(env, t, dims, name, requires_grad=False):
    """A fake of `t` whose `dims` are symbolic (sources L['name'])."""
    sizes = env.sizes_of(t, f"L['{name}']", dims)
    return fake_like(t, sizes=sizes, requires_grad=requires_grad)


def text(t):
    return str(tuple(str(s) for s in t.shape)).replace("'", "")


def assert_unspecialised(env):
    """No symbol was pinned to a constant (no op fell back to concrete sizes)."""
    assert all(not v.is_Number for v in env.replacements.values()), env.format_symbols()
    assert not any("==" in g and g.split("==")[1].strip().isdigit() for g in env.guard_texts())


def test_symint_protocol_arithmetic_and_guards():
    env = ShapeEnv()
    a, b = (to_torch(s) for s in env.sizes_of(torch.empty(6, 4), "L['x']"))
    assert isinstance(a, torch.SymInt) and str(a * b + 1) == "s0*s1 + 1"
    assert str(a // 2) == "floor(s0/2)" and str(a % 3) == "Mod(s0, 3)"
    assert isinstance(a / 2, torch.SymFloat) and str(a / 2) == "s0/2"
    assert isinstance(a == b, torch.SymBool) and str(torch.sym_max(a, b)) == "Max(s0, s1)"
    assert env.guards == []  # arithmetic and building facts record nothing
    assert (a > 1) is True or bool(a > 1)  # static from the range: no guard
    assert env.guards == []
    assert bool(a > b) is True  # a fact torch relies on becomes a guard
    assert env.guard_texts()[-1] == "L['x'].size()[0] > L['x'].size()[1]"
    assert from_torch(a + 0).expr == from_torch(a).expr and from_torch(a - a) == 0
    assert int(a) == 6 and "L['x'].size()[0] == 6" in env.guard_texts()
    node = from_torch(b)
    assert node.guard_or_false("", 0) is False or node.kind == "int"
    eq = node.eq(node.wrap_int(4))
    assert eq.is_bool() and eq.guard_or_false("", 0) is False and eq.guard_or_true("", 0)
    assert not eq.statically_known_true("", 0) and node.ge(node.wrap_int(2)).statically_known_true(
        "", 0
    )
    assert isinstance(node.eq(node), SymNode) and node.eq(node).constant is True
    assert float(b / 3) == 4 / 3 and "L['x'].size()[1] == 4" in env.guard_texts()  # floats pin


def test_fake_like_symbolic_strides_and_factories():
    env = ShapeEnv()
    x = fake(env, torch.empty(3, 5, 8), {0, 1}, "x")
    assert text(x) == "(s0, s1, 8)" and str(x.stride()) == "(8*s1, 8, 1)"
    xt = fake(env, torch.empty(4, 6).t(), {0, 1}, "y")  # a transposed dense layout
    assert text(xt) == "(s2, s3)" and tuple(str(s) for s in xt.stride()) == ("1", "s2")
    assert sym_sizes(x)[2] == 8 and isinstance(sym_sizes(x)[0], SymNode)
    assert isinstance(sym_strides(x)[0], SymNode)
    with FakeMode():
        z = torch.zeros(x.shape[0], 4)
        r = torch.arange(x.shape[1])
        f = torch.full((x.shape[1], 2), 1.5)
        n = x.new_empty((x.shape[0] * 2,))
    assert (text(z), text(r), text(f), text(n)) == ("(s0, 4)", "(s1,)", "(s1, 2)", "(2*s0,)")
    assert_unspecialised(env)


def test_ops_with_symbolic_batch_and_sequence():
    env = ShapeEnv()
    torch.manual_seed(0)
    x = fake(env, torch.empty(3, 5, 16), {0, 1}, "x")
    w, b = torch.randn(32, 16), torch.randn(32)
    h = F.linear(x, w, b)
    assert text(h) == "(s0, s1, 32)"
    flat = h.view(h.shape[0] * h.shape[1], 32)
    assert text(flat) == "(s0*s1, 32)" and text(h.reshape(-1, 4, 8)) == "(s0*s1, 4, 8)"
    assert text(h.flatten(0, 1)) == "(s0*s1, 32)"
    t = h.transpose(0, 1)
    assert text(t) == "(s1, s0, 32)" and str(t.stride()) == "(32, 32*s1, 1)"
    assert text(t.reshape(-1, 32)) == "(s0*s1, 32)"
    att = torch.matmul(h, h.transpose(-1, -2)).softmax(-1)
    assert text(att) == "(s0, s1, s1)"
    assert text(F.layer_norm(h, (32,))) == "(s0, s1, 32)"
    q = h.view(h.shape[0], h.shape[1], 4, 8).transpose(1, 2)
    assert text(F.scaled_dot_product_attention(q, q, q, is_causal=True)) == "(s0, 4, s1, 8)"
    assert text(torch.cat([h, h], 1)) == "(s0, 2*s1, 32)" and text(h[:, 1:]) == "(s0, s1 - 1, 32)"
    assert str(h[:, 1:].storage_offset()) == "32"
    idx = fake_like(torch.zeros(3, 5, dtype=torch.long), sizes=sym_sizes(x)[:2])  # x's symbols
    assert text(F.embedding(idx, torch.randn(10, 16))) == "(s0, s1, 16)"
    loss = F.cross_entropy(h.view(-1, 32), idx.view(-1))
    assert text(loss) == "()"
    img = fake(env, torch.empty(2, 3, 8, 8), {0}, "img")
    conv = F.conv2d(img, torch.randn(4, 3, 3, 3), padding=1)
    assert text(conv) == "(s2, 4, 8, 8)"
    assert_unspecialised(env)


def test_autograd_grad_through_symbolic_fakes():
    env = ShapeEnv()
    torch.manual_seed(0)
    x = fake(env, torch.empty(3, 5, 16), {0, 1}, "x", requires_grad=True)
    w = torch.randn(32, 16, requires_grad=True)
    ln = torch.nn.LayerNorm(32)
    emb = torch.nn.Embedding(10, 32)
    idx = fake_like(torch.zeros(3, 5, dtype=torch.long), sizes=sym_sizes(x)[:2])
    h = F.linear(x, w) + emb(idx)
    q = ln(h).view(h.shape[0], h.shape[1], 4, 8).transpose(1, 2)
    a = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(h.shape)
    with FakeMode():  # slicing a real buffer by a symbolic size must not reach its CPU kernel
        mask = torch.ones(8, 8).tril()[: h.shape[1], : h.shape[1]]
    s = (h @ h.transpose(-1, -2)).masked_fill(mask == 0, float("-inf")).softmax(-1) @ a
    loss = F.cross_entropy(torch.cat([s, F.gelu(a)], 1).reshape(-1, 32), idx.repeat(1, 2).view(-1))
    gx, gw, gln, gemb = torch.autograd.grad(loss, [x, w, ln.weight, emb.weight])
    assert text(gx) == "(s0, s1, 16)" and text(gw) == "(32, 16)"
    assert text(gln) == "(32,)" and text(gemb) == "(10, 32)"
    img = fake(env, torch.empty(2, 3, 8, 8), {0}, "img", requires_grad=True)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    (gi, gcw) = torch.autograd.grad(conv(img).relu().mean(), [img, conv.weight])
    assert text(gi) == "(s2, 3, 8, 8)" and text(gcw) == "(4, 3, 3, 3)"
    assert_unspecialised(env)


def test_op_without_rule_specialises_with_a_guard():
    env = ShapeEnv()
    x = fake(env, torch.empty(3, 6), {0, 1}, "x")
    y = torch.ops.aten.diag_embed.default(x)  # no shape rule: the sizes are pinned
    assert tuple(y.shape) == (3, 6, 6)
    assert "L['x'].size()[0] == 3" in env.guard_texts()


@pytest.mark.parametrize("shape", [(2, 7), (9, 3)])
def test_hints_match_eager_shapes(shape):
    env = ShapeEnv()
    real = torch.randn(*shape)
    x = fake(env, real, {0, 1}, "x")

    def f(t):
        return (t.t() @ t).softmax(0)[:, 1:].sum(0, keepdim=True).expand(t.shape[0], -1)

    out = f(x)
    assert tuple(from_torch(s).hint if isinstance(s, torch.SymInt) else s for s in out.shape) == (
        tuple(f(real).shape)
    )


def test_specialisations_are_logged_with_their_op_and_facts_have_reasons(capsys):
    from kiln import logs

    env = ShapeEnv()
    x = fake(env, torch.empty(3, 6), {0, 1}, "x")
    mark = env.mark()
    before = set(logs._enabled)
    logs.set_logs("recompiles")
    try:
        torch.ops.aten.kthvalue.default(x, 1)  # (an op with no shape rule)
    finally:
        logs.set_logs(",".join(before))
    facts = env.facts_since(mark)
    assert [str(f) for f, _ in facts] == ["Eq(s0, 3)", "Eq(s1, 6)"]
    assert all(r == "aten op aten.kthvalue.default" for _, r in facts)
    assert sorted(env.specialised().values()) == [3, 6]
    err = capsys.readouterr().err
    assert "specialising the sizes of aten.kthvalue.default's inputs (no shape rule)" in err
    assert "specialised size s0 to 3 by aten op aten.kthvalue.default" in err


def test_a_symbol_is_solved_from_an_input_of_size_a_s_plus_b():
    from kiln.autograd.aten_tracer import trace_aten

    env = ShapeEnv()
    (n,) = env.sizes_of(torch.empty(5), "L['n']")
    x = fake_like(torch.empty(11, 4), sizes=(2 * n + 1, 4))  # only 2*s0 + 1 is an input size
    gm = trace_aten(lambda x: x[: x.shape[0] // 2].new_zeros(to_torch(n), 2), [x])
    code = gm.code
    assert "sym_size_int = torch.ops.aten.sym_size.int(arg0_1, 0)" in code
    assert "sub = sym_size_int - 1" in code and "floordiv = sub // 2" in code
    assert tuple(gm(torch.randn(7, 4))[0].shape) == (3, 2)


def test_metadata_queries_and_pooling_keep_symbols():
    env = ShapeEnv()
    img = fake(env, torch.empty(2, 3, 8, 8), {0, 2, 3}, "img", requires_grad=True)
    assert str(torch.ops.aten.sym_numel.default(img)) == "3*s0*s1*s2"
    assert str(torch.ops.aten.sym_size.int(img, 2)) == "s1"
    out = F.max_pool2d(F.avg_pool2d(img, 2), 2, stride=1)
    assert text(out) == "(s0, 3, floor(s1/2) - 1, floor(s2/2) - 1)"
    (g,) = torch.autograd.grad(out.sum(), img)
    assert text(g) == "(s0, 3, s1, s2)"
    assert_unspecialised(env)


def test_composite_ops_keep_symbols_and_leave_the_dispatcher_as_it_was():
    # Note [Tracer: composite ops on symbolic sizes]: matmul decomposes before our dispatch sees
    # it; each batched/folded/broadcast form (and linear through it) must keep the symbols.
    env = ShapeEnv()
    torch.manual_seed(0)
    x = fake(env, torch.empty(3, 5, 16), {0, 1}, "x")
    w = torch.randn(32, 16)
    on = torch._C.DispatchKey.PythonDispatcher
    assert not torch._C._dispatch_tls_is_dispatch_key_included(on)
    assert text(F.linear(x, w)) == "(s0, s1, 32)"  # 3-D @ 2-D: folded into one mm
    assert text(x @ x.transpose(1, 2)) == "(s0, s1, s1)"  # batched
    assert text(torch.matmul(x[0], w.t())) == "(s1, 32)" and text(x.matmul(w[0])) == "(s0, s1)"
    v = fake_like(torch.randn(16))  # a static fake (the frontend's examples are all fakes)
    assert text(torch.matmul(v, x.transpose(1, 2))) == "(s0, s1)"
    assert text(torch.dot(x[0, 0], v)) == "()"
    assert text(torch.tensordot(x, w, dims=([2], [1]))) == "(s0, s1, 32)"
    assert text(torch.inner(x, w)) == "(s0, s1, 32)"
    y = fake(env, torch.empty(2, 1, 5, 16), {0}, "y")
    assert text(torch.matmul(y, x.transpose(1, 2))) == "(s2, s0, 5, s1)"  # broadcast batch
    assert not torch._C._dispatch_tls_is_dispatch_key_included(on)
    assert_unspecialised(env)
    static = fake_like(torch.empty(3, 5, 16))
    assert text(F.linear(static, w)) == "(3, 5, 32)"
