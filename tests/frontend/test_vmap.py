"""torch.vmap in compiled code: the function traced once, one node that vmaps it at run time
(Note [Vmap: the body traced, vmap applied at run time]); eager torch.vmap is the oracle."""

import pytest
import torch

import kiln
from kiln.exc import Unsupported
from kiln.frontend.variables.functorch_vmap import VmapCall
from tests.frontend.frontend_helpers import CountingBackend, run_and_compare

BACKENDS = ["eager", "aot_eager", "kiln"]


def _vmap_nodes(gm):
    return [n for n in gm.graph.nodes if isinstance(n.target, VmapCall)]


def _one_graph(fn, *args, **kw):
    backend = CountingBackend()
    run_and_compare(fn, *args, backend=backend, fullgraph=True, expected_graphs=1, **kw)
    return backend.graphs[0]


def test_vmap_is_one_node_of_one_graph():
    def fn(x, y):
        return torch.vmap(lambda a, b: (a * b).sum())(x, y) + 1

    gm = _one_graph(fn, torch.randn(4, 3), torch.randn(4, 3))
    assert len(_vmap_nodes(gm)) == 1


def test_func_vmap_and_decorator():
    def fn(x):
        @torch.func.vmap
        def norm(row):
            return row / row.norm()

        return norm(x)

    _one_graph(fn, torch.randn(5, 3))


def test_a_batch_of_size_0_is_captured():
    def fn(x, y):  # (associative_scan's generic path vmaps slices that can be empty)
        return torch.vmap(lambda a, b: a * b + 1, in_dims=(1, 0))(x, y)

    gm = _one_graph(fn, torch.randn(3, 0, 2), torch.randn(0, 3, 2))
    assert len(_vmap_nodes(gm)) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_every_backend(backend):
    w = torch.randn(3, 2)

    def body(a, b):
        return (a @ w).relu() + b.sum()  # a closed-over tensor: not batched

    def fn(x, y):
        return torch.vmap(body)(x, y)

    x, y = torch.randn(6, 3), torch.randn(6, 4)
    kiln.reset()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(x, y), fn(x, y))
    torch.testing.assert_close(compiled(x * 2, y), fn(x * 2, y))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_through_vmap(backend):
    def fn(x, w):
        return torch.vmap(lambda row: (row * w).sin().sum())(x)

    def grads(f):
        x = torch.randn(4, 3, requires_grad=True)
        w = torch.randn(3, requires_grad=True)
        torch.manual_seed(0)
        f(x, w).pow(2).sum().backward()
        return x.grad, w.grad

    torch.manual_seed(1)
    want = grads(fn)
    kiln.reset()
    torch.manual_seed(1)
    got = grads(kiln.compile(fn, backend=backend, fullgraph=True))
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a)


def test_in_dims_tuple_with_none_and_out_dims():
    def fn(x, y):
        return torch.vmap(lambda a, b: a + b, in_dims=(1, None), out_dims=1)(x, y)

    _one_graph(fn, torch.randn(3, 5), torch.randn(3))


def test_negative_in_dim_and_tuple_outputs_with_out_dims():
    def fn(x):
        return torch.vmap(lambda a: (a.sin(), a.cos().sum()), in_dims=-1, out_dims=(0, 0))(x)

    _one_graph(fn, torch.randn(2, 3, 4))


def test_list_output_keeps_its_type():
    def fn(x):
        return torch.vmap(lambda a: [a + 1, a * 2])(x)

    _one_graph(fn, torch.randn(3, 2))


def test_nested_vmap():
    def fn(x, y):
        inner = torch.vmap(lambda a, b: a * b, in_dims=(0, None))
        return torch.vmap(inner, in_dims=(0, None))(x, y)

    gm = _one_graph(fn, torch.randn(2, 3, 4), torch.randn(4))
    assert len(_vmap_nodes(gm)) == 1  # the inner vmap is a node of the outer body


def test_keyword_argument_is_not_batched():
    def fn(x, s):
        return torch.vmap(lambda a, scale: a * scale)(x, scale=s)

    _one_graph(fn, torch.randn(4, 3), torch.randn(3))


def test_constant_argument_with_in_dim_none():
    def fn(x):
        return torch.vmap(lambda a, p: a.pow(p), in_dims=(0, None))(x, 2)

    _one_graph(fn, torch.randn(4, 3))


def test_chunk_size():
    def fn(x):
        return torch.vmap(lambda a: a.softmax(0), chunk_size=2)(x)

    _one_graph(fn, torch.randn(5, 3))


def test_randomness_same():
    def fn(x):
        return torch.vmap(lambda a: a + torch.rand(()), randomness="same")(x)

    compiled = kiln.compile(fn, backend=CountingBackend(), fullgraph=True)
    out = compiled(torch.zeros(4, 3))
    # one draw shared by every example, as randomness="same" gives in eager
    torch.testing.assert_close(out, out[:1].expand(4, 3))


def test_random_op_under_default_randomness_raises_like_eager():
    def fn(x):
        return torch.vmap(lambda a: a + torch.rand(3))(x)

    kiln.reset()
    with pytest.raises(RuntimeError) as eager:
        fn(torch.zeros(4, 3))
    with pytest.raises(RuntimeError) as compiled:
        kiln.compile(fn, backend="eager")(torch.zeros(4, 3))
    assert str(compiled.value) == str(eager.value)


def test_the_interpreter_folds_with_its_level():
    def body(a):
        interp = torch._functorch.pyfunctorch.retrieve_current_functorch_interpreter()
        if interp.key() == torch._C._functorch.TransformType.Vmap:
            return a * interp.level() + interp.batch_size()
        return a

    def fn(x):
        return torch.vmap(body)(x), torch.vmap(torch.vmap(body))(x)

    _one_graph(fn, torch.randn(3, 2))


def test_a_frame_run_under_an_outer_vmap_gets_its_own_entry():
    def body(a):
        return a * torch._functorch.pyfunctorch.retrieve_current_functorch_interpreter().level()

    def fn(x):
        return torch.vmap(body)(x)

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(compiled(x[0]), fn(x[0]))
    torch.testing.assert_close(torch.vmap(compiled)(x), torch.vmap(fn)(x))  # level 2 inside


def test_side_effect_in_the_body_is_a_break():
    seen = []

    def fn(x):
        def body(a):
            seen.append(1)
            return a + 1

        return torch.vmap(body)(x)

    kiln.reset()
    with pytest.raises(Unsupported, match="torch.vmap: the vmapped function has side effects"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(2, 3))
    seen.clear()
    out = kiln.compile(fn, backend="eager")(torch.randn(2, 3))
    assert out.shape == (2, 3) and seen == [1]  # the call ran in Python (vmap calls body once)


def test_in_place_change_of_an_input_is_a_break():
    def fn(x):
        return torch.vmap(lambda a: a.add_(1))(x)

    run_and_compare(fn, torch.randn(3, 2), expected_breaks=1)


def test_mismatched_batch_sizes_raise_like_eager():
    def fn(x, y):
        return torch.vmap(lambda a, b: a + b)(x, y)

    run_and_compare(fn, torch.randn(3, 2), torch.randn(4, 2))


def test_vmapped_function_returned_from_the_frame():
    def fn(x):
        f = torch.vmap(torch.sin, in_dims=1)
        return f, x + 1

    f, _ = kiln.compile(fn, backend="eager")(torch.randn(2))
    x = torch.randn(3, 4)
    torch.testing.assert_close(f(x), torch.vmap(torch.sin, in_dims=1)(x))


def test_metadata_of_batched_tensors_is_not_folded():
    def fn(x):
        def body(a):
            b = a * 2
            return b + 1 if b.requires_grad else b - 1  # eager: False inside vmap

        return torch.vmap(body)(x)

    run_and_compare(fn, torch.randn(3, 2, requires_grad=True), expected_breaks=1)


def test_list_in_dims_raises_like_eager():
    def fn(x):
        return torch.vmap(lambda a: a + 1, in_dims=[0])(x)

    run_and_compare(fn, torch.randn(3, 2))


def test_identity_body_returns_the_input_as_eager_does():
    def fn(x):
        y = torch.vmap(lambda a: a)(x)
        y.add_(1)  # eager's result is x itself
        return y

    run_and_compare(fn, torch.randn(3, 2))


def test_module_called_under_vmap():
    lin = torch.nn.Linear(3, 2)

    def fn(x):
        return torch.vmap(lin)(x)

    _one_graph(fn, torch.randn(4, 3))


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.vmap(torch.sin, 0, 0, "error", 2),  # chunk_size is keyword-only
        lambda: torch.vmap(torch.sin, randomness="sometimes"),
        lambda: torch.vmap(torch.sin, chunk_size=0),
    ],
)
def test_what_vmap_refuses_when_made_raises_like_eager(make):
    def fn(x):
        make()  # (never called)
        return x + 1

    run_and_compare(fn, torch.randn(2))


def test_tensors_made_on_a_device_inside_the_body():
    def fn(x):
        return torch.vmap(lambda a: a + torch.ones(3, device=a.device) + torch.zeros(3).to("cpu"))(
            x
        )

    _one_graph(fn, torch.randn(2, 3))


def test_a_tuple_of_tensors_argument():
    def fn(x, y):
        both = torch.vmap(lambda pair: pair[0] * pair[1])((x, y))
        mixed = torch.vmap(lambda pair, z: pair[0] + pair[1] + z, in_dims=((0, None), 1))(
            (x, y[0]), y.t()
        )
        listed = torch.vmap(lambda xs: xs[0] - xs[1], in_dims=1)([x, y])
        return both, mixed, listed

    _one_graph(fn, torch.randn(4, 3), torch.randn(4, 3))


def test_a_constant_argument_with_an_in_dim_raises_like_eager():
    def fn(x):
        return torch.vmap(lambda a, p: a * p)(x, 2)

    run_and_compare(fn, torch.randn(4, 3))


def test_tuple_in_dims_for_a_list_raises_like_eager():
    def fn(x):
        return torch.vmap(lambda xs: xs[0] + xs[1], in_dims=((0, 0),))([x, x])

    run_and_compare(fn, torch.randn(4, 3))


def test_under_autocast_is_a_break_with_eager_values():
    def fn(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.vmap(lambda a: a @ w)(x)

    run_and_compare(fn, torch.randn(4, 3, 2), torch.randn(2, 5), expected_breaks=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_size_that_changes_is_symbolic(backend):
    w = torch.randn(3)

    def fn(x, y):
        body = lambda a, b: ((a * w).sum() + b.sum(), a.shape[0] * a)  # noqa: E731
        return torch.vmap(body, in_dims=(0, None))(x, y)

    kiln.reset()
    compiled = kiln.compile(fn, backend=backend)
    for n in (4, 5, 6, 7):
        x, y = torch.randn(n, 3), torch.randn(2, 3)
        for got, want in zip(compiled(x, y), fn(x, y)):
            torch.testing.assert_close(got, want)
            assert got.shape == want.shape and got.stride() == want.stride()
    assert not kiln.counters["graph_break"]
    assert kiln.counters["stats"]["unique_graphs"] == 2  # static, then one with a symbolic batch


def test_symbolic_batch_sizes_compared_like_eager():
    def fn(x, y):
        return torch.vmap(lambda a, b: a.sum() + b.sum(), in_dims=(0, 1))(x, y)

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for n in (4, 5, 6):
        x, y = torch.randn(n, 3), torch.randn(2, n)
        torch.testing.assert_close(compiled(x, y), fn(x, y))
    with pytest.raises(ValueError, match="vmap"):
        compiled(torch.randn(6, 3), torch.randn(2, 7))  # sizes differ: torch.vmap raises


def test_symbolic_batch_size_read_from_the_interpreter_breaks():
    def body(a):
        return (
            a * torch._functorch.pyfunctorch.retrieve_current_functorch_interpreter().batch_size()
        )

    def fn(x):
        return torch.vmap(body)(x)

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for n in (3, 4, 5):
        torch.testing.assert_close(compiled(torch.ones(n, 2)), fn(torch.ones(n, 2)))
    (reason,) = kiln.counters["graph_break"]
    assert reason.endswith("a symbolic vmap batch size read from its interpreter")


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_change_of_a_tensor_the_body_made(backend):
    def fn(x):
        def body(a):
            b = a * 2
            b.add_(1)
            b[0] = 0.0
            return b.relu_()

        return torch.vmap(body)(x)

    x = torch.randn(4, 3)
    kiln.reset()
    torch.testing.assert_close(kiln.compile(fn, backend=backend, fullgraph=True)(x), fn(x))


def test_in_place_change_through_a_view_of_an_input_is_a_break():
    def fn(x):
        def body(a):
            a[1:].mul_(2)  # writes the input (a view of it): not captured
            return a + 1

        return torch.vmap(body)(x)

    run_and_compare(fn, torch.randn(4, 3), expected_breaks=1)


def test_in_place_change_after_a_layout_dependent_copy_is_a_break():
    def fn(x):
        def body(a):
            b = a.contiguous()  # the input itself, or a copy: the layout decides
            b[0] = 1.0
            return b

        return torch.vmap(body, in_dims=1)(x)

    run_and_compare(fn, torch.randn(3, 4), expected_breaks=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inner_vmap_reads_the_outer_example(backend):
    def fn(x, w):
        return torch.vmap(lambda a: torch.vmap(lambda b: (a * b * w).sum())(a.view(3, 1)))(x)

    def grads(f):
        x = torch.randn(4, 3, requires_grad=True, generator=torch.Generator().manual_seed(0))
        w = torch.randn(1, requires_grad=True, generator=torch.Generator().manual_seed(1))
        out = f(x, w)
        out.sum().backward()
        return out, x.grad, w.grad

    kiln.reset()
    got = grads(kiln.compile(fn, backend=backend, fullgraph=True))
    for a, b in zip(got, grads(fn)):
        torch.testing.assert_close(a, b)
