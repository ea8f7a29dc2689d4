"""Memory planning of the wrapper: views instead of copies, buffer reuse, in-place stores."""

import re

import torch

from kiln.autograd.aten_tracer import trace_aten
from kiln.backend import compile_fx as kc
from kiln.backend.decompositions import DECOMPOSITIONS
from tests.backend.helpers import check

aten = torch.ops.aten


def _storage(t):
    return t.untyped_storage().data_ptr()


def test_view_of_a_realized_clone_is_not_copied():
    # bmm reads clone(expand(q)) in memory; the graph also returns its transpose (as a partition
    # saves it for the backward): one buffer, the transpose a view of it (Note [Backend: views
    # of unrealized values]); before, each was a copy of q in its own layout
    x, w, k = torch.randn(8, 16), torch.randn(16, 12), torch.randn(2, 2, 4, 8)

    def f(x, w, k):
        a = aten.view.default(aten.mm.default(x, w), [2, 4, 3, 4])
        q = aten.slice.Tensor(aten.permute.default(a, [0, 2, 1, 3]), 1, 0, 2)
        cf = torch.contiguous_format
        c = aten.clone.default(aten.expand.default(q, [2, 2, 4, 4]), memory_format=cf)
        v = aten._unsafe_view.default(c, [4, 4, 4])
        kk = aten._unsafe_view.default(aten.clone.default(k, memory_format=cf), [4, 4, 8])
        return aten.bmm.default(v, kk), aten.permute.default(v, [0, 2, 1])

    c = check(f, [x, w, k], atol=1e-5, rtol=1e-5)
    # mm's out, the clone of q, the clone of k, bmm's out
    assert c.wrapper_src.count("empty_strided(") == 4, c.wrapper_src
    _, saved = c(x, w, k)
    assert saved.stride() == (16, 1, 4)


def test_saved_old_value_of_a_mutated_input_is_kept():
    # eager saves buf * 2; the min-cut saves buf and recomputes buf * 2 in the backward, which
    # needs buf's value before the in-place update: the runtime keeps a copy of that saved input
    # (and checks only the outputs that may share its memory)
    import kiln

    def f(x, buf):
        y = x * (buf.expand(8) * 2)
        buf.add_(1)
        return (y * x).sum()

    kiln.reset()
    x, buf = torch.randn(8, requires_grad=True), torch.randn(1)
    x2, buf2 = x.detach().clone().requires_grad_(True), buf.clone()
    out = kiln.compile(f, backend="kiln")(x, buf)
    ref = f(x2, buf2)
    out.backward()
    ref.backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(buf, buf2)
    torch.testing.assert_close(x.grad, x2.grad)


def test_a_freed_buffer_is_reused_with_another_shape():
    # a's memory takes b (same layout), exp(a)'s takes sin(b); b dies at sin(b) and the last mm's
    # 8x32 output spans as many floats: it takes b's memory (a view). 2 buffers, 5 values
    x, w, w2 = torch.randn(16, 16) / 4, torch.randn(16, 16) / 4, torch.randn(32, 32) / 4

    def f(x, w, w2):
        a = aten.mm.default(x, w)
        b = aten.mm.default(aten.exp.default(a), w)
        s = aten.view.default(aten.sin.default(b), [8, 32])
        return (aten.mm.default(s, w2),)

    c = check(f, [x, w, w2], atol=1e-5, rtol=1e-5)
    src = c.wrapper_src
    assert src.count("empty_strided(") == 2, src
    assert ".view((8, 32)); del " in src, src  # Note [Wrapper: cheap views]


def test_unrelated_loops_are_separate_kernels_scalar_work_shares_one():
    # Note [Scheduler: horizontal fusion needs shared reads]
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    check(lambda x, y: (x.sin(), y.cos()), [x, y], expect_kernels=2)
    check(lambda x, y: (x.sin(), x.cos()), [x, y], expect_kernels=1)  # one pass over x
    a, b = torch.tensor(3), torch.tensor(4)
    check(lambda a, b: (a + 1, b + 1), [a, b], expect_kernels=1)


def test_recomputed_forward_values_come_right_before_their_use():
    # Note [Partitioner: recompute order]: the min-cut saves x and recomputes cos(x) in the
    # backward; it is placed after the tangent's first use, where it is needed
    from kiln.autograd.aot import aot_function
    from kiln.autograd.partition import min_cut_rematerialization_partition

    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x):
        return aten.cos.default(aten.cos.default(x)).sum() * 3

    x = torch.randn(16, requires_grad=True)
    g = aot_function(f, keep, partition_fn=min_cut_rematerialization_partition)
    out = g(x)
    out.backward()
    x2 = x.detach().clone().requires_grad_(True)
    f(x2).backward()
    torch.testing.assert_close(x.grad, x2.grad)
    bw = graphs[1]
    order = [n for n in bw.graph.nodes if n.op == "call_function"]
    first_cos = next(i for i, n in enumerate(order) if n.target is aten.cos.default)
    assert first_cos > 0, bw.code  # a tangent op runs first
    assert "cos" not in str(order[0].target), bw.code


def test_pointwise_over_a_dying_buffer_is_written_in_place():
    # mm's result dies in the pointwise kernel that reads it element by element: the kernel
    # writes its result over it (one buffer for the graph); a value read again later, or at
    # another element, keeps its own buffer
    x, w = torch.randn(16, 16), torch.randn(16, 16)

    def f(x, w):
        a = aten.mm.default(x, w)
        return (aten.add.Tensor(aten.mul.Tensor(a, 2), 1),)

    c = check(f, [x, w], atol=1e-5, rtol=1e-5)
    assert c.wrapper_src.count("empty_strided(") == 1, c.wrapper_src
    assert "in place" in c.wrapper_src

    def g(x, w):  # each element also reads another one's memory (a transposed)
        a = aten.mm.default(x, w)
        return (aten.add.Tensor(a, aten.permute.default(a, [1, 0])),)

    c = check(g, [x, w], atol=1e-5, rtol=1e-5)
    assert "in place" not in c.wrapper_src, c.wrapper_src

    def h(x, w):  # a is an output too: never overwritten
        a = aten.mm.default(x, w)
        return a, aten.mul.Tensor(a, 2)

    c = check(h, [x, w], atol=1e-5, rtol=1e-5)
    assert "in place" not in c.wrapper_src, c.wrapper_src


def test_pointwise_over_a_dying_convolution_output_is_written_in_place(monkeypatch):
    """An ATen call's fresh result (a convolution's) is overwritten by the batch norm and relu
    reading it; an op whose result aliases its input (as_strided) is never overwritten."""
    from kiln import config

    monkeypatch.setattr(config, "conv_channels_last", False)  # the output has the conv's layout
    x, w = torch.randn(2, 4, 6, 6), torch.randn(8, 4, 3, 3)
    scale, shift = torch.randn(8, 1, 1), torch.randn(8, 1, 1)

    def f(x, w, s, b):
        y = aten.convolution.default(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return (aten.relu.default(aten.add.Tensor(aten.mul.Tensor(y, s), b)),)

    c = check(f, [x, w, scale, shift], atol=1e-5, rtol=1e-5)
    assert "in place" in c.wrapper_src, c.wrapper_src

    def g(x):
        v = aten.as_strided.default(x, [2, 4, 3, 3], [144, 36, 6, 1], 0)
        return (aten.mul.Tensor(v, 2), x)

    c = check(g, [x])
    assert "in place" not in c.wrapper_src, c.wrapper_src


def test_in_place_into_a_buffer_of_another_shape():
    x, w = torch.randn(16, 16), torch.randn(16, 16)

    def f(x, w):
        a = aten.view.default(aten.mm.default(x, w), [4, 64])
        return (aten.sin.default(a),)

    c = check(f, [x, w], atol=1e-5, rtol=1e-5)
    # the kernel writes through the mm output's tensor; its (4, 64) view is made at the return
    # (Note [Wrapper: reuse without views])
    assert "  # written in place" in c.wrapper_src, c.wrapper_src
    assert ".view((4, 64)), )" in c.wrapper_src, c.wrapper_src
    (out,) = c(x, w)
    assert out.shape == (4, 64) and out.stride() == (64, 1)


def test_batchnorm_running_stats_written_in_place():
    # Note [Backend: mutated inputs written in place]: the kernel computing the new running
    # statistics writes them into the buffers; the runtime copies nothing
    import kiln

    kiln.reset()
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(4)
    bn2 = torch.nn.BatchNorm2d(4)
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    from kiln.backend import compile_fx as backend_compile

    seen = []
    orig = backend_compile.compile_aten_graph

    def spy(gm, example_inputs):
        c = orig(gm, example_inputs)
        seen.append(getattr(c, "wrapper_src", ""))
        return c

    backend_compile.compile_aten_graph = spy
    try:
        compiled = kiln.compile(bn, backend="kiln")
        for _ in range(2):
            out = compiled(x)
            ref = bn2(x2)
            (out * out).sum().backward()
            (ref * ref).sum().backward()
    finally:
        backend_compile.compile_aten_graph = orig
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(bn.running_mean, bn2.running_mean)
    torch.testing.assert_close(bn.running_var, bn2.running_var)
    assert bn.num_batches_tracked.item() == bn2.num_batches_tracked.item() == 2
    torch.testing.assert_close(x.grad, x2.grad)
    assert any(src.count("# written in place") >= 3 for src in seen), seen


def test_mutated_input_read_after_its_update_keeps_its_old_value():
    import kiln

    def f(x, buf):
        old = buf.clone()
        buf.mul_(2)
        return (old * x).sum() + buf.sum()

    kiln.reset()
    x, buf = torch.randn(8), torch.randn(8)
    buf2 = buf.clone()
    out = kiln.compile(f, backend="kiln")(x, buf)
    torch.testing.assert_close(out, f(x, buf2))
    torch.testing.assert_close(buf, buf2)


def test_mm_with_a_transposed_weight_is_one_linear_call():
    # Note [Wrapper: linear for a transposed weight]: mm(x, t(w)) and addmm(b, x, t(w)) become
    # linear.out(x, w[, b]) with no Python transpose; an mm of an untransposed operand stays mm
    x, w, b, m = torch.randn(6, 16), torch.randn(8, 16), torch.randn(8), torch.randn(8, 5)

    def f(x, w, b, m):
        y = aten.mm.default(x, aten.t.default(w))
        z = aten.addmm.default(b, x, aten.t.default(w))
        return aten.mm.default(aten.relu.default(y), m), z

    c = check(f, [x, w, b, m], atol=1e-5, rtol=1e-5)
    assert c.wrapper_src.count("rt.binding('aten.linear.out')") == 1, c.wrapper_src
    assert c.wrapper_src.count("rt.binding('aten.mm.out')") == 1, c.wrapper_src
    assert ".t()" not in c.wrapper_src, c.wrapper_src


def test_a_view_read_by_several_externs_is_made_once():
    # the q, k and v projections of one activation: one view, bound to a local, deleted with
    # its buffer (Note [Wrapper: cheap views])
    x, ws = torch.randn(2, 3, 16), [torch.randn(16, 8) for _ in range(3)]

    def f(x, w0, w1, w2):
        h = aten.view.default(aten.relu.default(x), [6, 16])
        return tuple(aten.mm.default(h, w) for w in (w0, w1, w2))

    c = check(f, [x, *ws], atol=1e-5, rtol=1e-5)
    src = c.wrapper_src
    assert src.count(".view((6, 16))") == 1, src
    (local,) = set(re.findall(r"(buf\d+_v\d+) = ", src))
    assert src.count(local) == 1 + 3 + 1, src  # bound, read by the three mm calls, deleted


def test_a_leading_slice_of_an_input_is_not_a_reshape():
    # position_ids[:, :64] of a (1, 128) buffer (Hugging Face BERT): row-major at offset 0 like
    # a reshape, but fewer elements, so no .view(size) (it raised at run time)
    ids, x = torch.arange(128).view(1, 128), torch.randn(4, 64)

    def f(ids, x):
        s = aten.slice.Tensor(ids, 1, 0, 64)
        return s, aten.add.Tensor(x, aten.mul.Tensor(s, 2))

    c = check(f, [ids, x])
    assert ".view((1, 64))" not in c.wrapper_src, c.wrapper_src


def test_reused_memory_is_not_viewed_for_kernels():
    # nanogpt's forward: freed buffers taken with another shape and kernels writing in place
    # into another shape's memory were a view each (40 views per call); kernels read only the
    # pointer, so views are made where an ATen call or an output reads the shape (Note
    # [Wrapper: reuse without views])
    from kiln_bench.models import REGISTRY

    model, inputs, _ = REGISTRY["nanogpt"].build("cpu")
    model.eval()
    gm = trace_aten(lambda *a: (model(*a),), list(inputs), decompositions=DECOMPOSITIONS)
    c = kc.compile_aten_graph(gm, list(inputs))
    src = c.wrapper_src
    with torch.no_grad():
        torch.testing.assert_close(c(*inputs)[0], model(*inputs), atol=1e-4, rtol=1e-4)
    assert re.search(r"buf\d+ = buf\d+; del buf\d+\n", src), src
    views = src.count(".view(") + src.count("as_strided(") + src.count("rt.view(")
    assert views <= 20, src


def test_a_reused_buffer_passed_to_linear_has_its_own_shape():
    # w2s (64x128) takes w1s's memory (128x64) when w1s dies; the local is bound to the old
    # tensor (Note [Wrapper: reuse without views]), so the addmm-as-linear call must pass a view
    # in w2s's shape (it passed the 128x64 tensor: "mat1 and mat2 shapes cannot be multiplied",
    # repro 17 under bfloat16 autocast)
    x, b1, b2 = torch.randn(16, 64), torch.randn(128), torch.randn(64)
    w1, w2 = torch.randn(128, 64) / 8, torch.randn(64, 128) / 8

    def f(x, w1, b1, w2, b2):
        w1s = aten.mul.Tensor(w1, 2.0)
        h = aten.addmm.default(b1, x, aten.permute.default(w1s, [1, 0]))
        g = aten.relu.default(h)
        w2s = aten.mul.Tensor(w2, 2.0)
        return (aten.addmm.default(b2, g, aten.permute.default(w2s, [1, 0])),)

    c = check(f, [x, w1, b1, w2, b2], atol=1e-4, rtol=1e-4)
    assert "linear" in c.wrapper_src, c.wrapper_src  # (the path this covers)
