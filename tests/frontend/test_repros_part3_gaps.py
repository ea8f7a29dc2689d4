"""Gaps found by PyTorch's test_repros (parts 1 and 3): each case compiled with fullgraph (or its
graph breaks counted) and compared with eager.

PYTEST_DONT_REWRITE: the traced functions' `assert` statements stay Python's own."""

import os
import weakref
from typing import Literal, TypedDict

import pytest
import torch
from frontend_helpers import CountingBackend, assert_same, run_and_compare

import kiln


def size_is_list(x, xs):
    return x + 1 if x.size(0) is xs else x * 2, x.size(0) is not xs


def test_is_between_a_symbolic_size_and_a_list_is_false():
    """A size made symbolic is an int: `is` against a list is False (was a graph break)."""
    kiln.reset()
    compiled = kiln.compile(size_is_list, backend="eager", fullgraph=True, dynamic=True)
    x = torch.randn(2)
    out, want = compiled(x, [1, 2]), size_is_list(x, [1, 2])
    torch.testing.assert_close(out[0], want[0])
    assert out[1] is want[1] is True
    run_and_compare(size_is_list, torch.randn(3), [3], fullgraph=True)


def paths_of_literals(x):
    try:
        bad = os.fspath(3)
    except TypeError as e:
        bad = str(e)
    return torch.sin(x), os.fspath("."), os.fspath(b"dir/file"), bad


def test_os_fspath_of_a_literal_folds():
    run_and_compare(paths_of_literals, torch.randn(4), fullgraph=True, expected_graphs=1)


class PixelInputs(TypedDict):
    type: Literal["pixel_values"]
    data: torch.Tensor


class PartialInputs(TypedDict, total=False):
    data: torch.Tensor


def typed_dicts(x, y):
    obj = PixelInputs(type=int, data=y)
    out = x * obj["data"]
    obj["data"] = 3
    extra = PartialInputs({"data": y + 1}, total=False)  # (any keys: it is dict's call)
    return out * obj["data"], obj, type(obj) is dict, extra


def test_typed_dict_instance_is_a_dict():
    run_and_compare(typed_dicts, torch.randn(4), torch.randn(4), fullgraph=True, expected_graphs=1)


def assert_with_tensor_message(x):
    b = x.sin()
    assert x[0] == 2, x  # noqa: S101
    return x.cos() + b


def test_assert_on_a_tensor_with_a_non_string_message_reruns_when_it_fails():
    # Note [Asserts: a branch that only raises]: no break; a failing call runs in Python
    for x, reruns in ((torch.tensor([3.0, 4.0]), 2), (torch.tensor([2.0, 4.0]), 0)):
        run_and_compare(assert_with_tensor_message, x, expected_breaks=0, expected_graphs=1)
        assert kiln.counters["frames"]["eager_reruns"] == reruns


def scaled(x, c=None):
    if c is None:
        c = 2
    return c * x


def calls_kiln_compile(x):
    return kiln.compile(scaled, backend="eager")(x) + 1


def calls_torch_compile(x):
    return torch.compile(scaled, backend="eager", fullgraph=True)(x, c=3)


def compile_with_bad_settings(x):
    return kiln.compile(scaled, fullgraph=1)(x)


def test_compile_called_in_a_compiled_frame_is_traced_in_its_graph():
    for fn in (calls_kiln_compile, calls_torch_compile):
        backend = CountingBackend()  # (eager's own kiln.compile call makes a graph too)
        run_and_compare(fn, torch.randn(4), fullgraph=True, backend=backend)
        assert backend.calls == 1
    # settings the call rejects: a graph break, and the TypeError raised as eagerly
    run_and_compare(compile_with_bad_settings, torch.randn(2), expected_breaks=1)


def returns_the_compiled_function(x):
    h = kiln.compile(scaled, backend="eager", dynamic=False)
    return h(x), h


def test_compiled_function_made_in_the_frame_is_made_again_when_returned():
    kiln.reset()
    compiled = kiln.compile(returns_the_compiled_function, backend="eager", fullgraph=True)
    x = torch.randn(3)
    out, h = compiled(x)
    torch.testing.assert_close(out, scaled(x))
    assert h is not scaled and h._kiln_orig_fn is scaled  # a kiln wrapper, as eager's
    torch.testing.assert_close(h(x, 4), scaled(x, 4))


class SubCategorical(torch.distributions.Categorical):
    pass


def distributions_made_in_the_frame(t):
    categ = SubCategorical(logits=t)
    normal = torch.distributions.Normal(t, t.abs() + 1)
    out = categ.log_prob(torch.tensor(3)) + categ.probs + categ.logits + categ.entropy()
    return out, normal.log_prob(t + 1), normal.stddev, normal


@pytest.fixture
def validate_args():
    before = torch.distributions.Distribution._validate_args
    yield torch.distributions.Distribution.set_default_validate_args
    torch.distributions.Distribution.set_default_validate_args(before)


def test_distributions_made_in_the_frame_are_traced(validate_args):
    """torch.distributions' classes are Python code over tensors: traced like user classes."""
    validate_args(False)
    kiln.reset()
    compiled = kiln.compile(distributions_made_in_the_frame, backend="eager", fullgraph=True)
    t = torch.randn(6)
    got, want = compiled(t), distributions_made_in_the_frame(t)
    for a, b in zip(got[:3], want[:3]):
        torch.testing.assert_close(a, b)
    assert type(got[3]) is torch.distributions.Normal
    torch.testing.assert_close(got[3].scale, want[3].scale)
    # with argument validation on, its check of tensor data is checked in the graph, and an
    # invalid scale raises eager's ValueError (Note [Asserts: a branch that only raises])
    validate_args(True)
    run_and_compare(normal_log_prob, torch.randn(3), torch.ones(3))
    run_and_compare(normal_log_prob, torch.randn(3), -torch.ones(3))


def normal_log_prob(t, scale):
    return torch.distributions.Normal(t, scale).log_prob(t)


def torch_asserts(img):
    x = torch.sin(img)
    val = x.shape[-2:]
    torch._assert(len(val) == 2, f"shape {img.shape}")
    torch._assert(img.shape[-1] == 8, message="last size 8")
    torch._assert(x.sum() > -1e9, "finite")  # a tensor: checked when the graph runs
    return img + x


def torch_assert_of_data(x):
    torch._assert(x.max() < 5, "too big")
    return x * 2


def test_torch_assert_is_traced_as_an_assert():
    run_and_compare(torch_asserts, torch.randn(1, 1, 8, 8), fullgraph=True, expected_graphs=1)
    # a size the condition rejects: AssertionError with the message, as eagerly
    run_and_compare(torch_asserts, torch.randn(1, 1, 8, 7))
    for x in (torch.ones(3), torch.full((3,), 7.0)):  # the tensor check passes, then fails
        run_and_compare(torch_assert_of_data, x, fullgraph=True, expected_graphs=1)


@pytest.fixture
def chunk_cat_op():
    with torch.library._scoped_library("kiln_test_gaps", "FRAGMENT") as lib:
        lib.define("chunk_cat(Tensor[] tensors, int dim, int num_chunks, *, Tensor(a!) out) -> ()")

        def chunk_cat(tensors, dim, num_chunks, out):
            torch._chunk_cat(tensors, dim, num_chunks, out=out)

        lib.impl("chunk_cat", chunk_cat, "CPU")
        lib.impl("chunk_cat", chunk_cat, "Meta")
        yield torch.ops.kiln_test_gaps.chunk_cat


def test_custom_op_writing_its_one_out_tensor_returns_none(chunk_cat_op):
    def into_input(tensors, out):
        return chunk_cat_op(tensors, 0, 2, out=out), out.sum()

    def into_new(tensors):
        out = torch.zeros(2, 272)
        chunk_cat_op(tensors, 0, 2, out=out)
        return out * 2

    tensors = [torch.randn(16, 16), torch.randn(16), torch.randn(16, 16), torch.randn(16)]
    for backend in (None, "aot_eager"):
        out = torch.empty(2, 272)
        run_and_compare(
            into_input, tensors, out, backend=backend, fullgraph=True, expected_graphs=1
        )
        run_and_compare(into_new, tensors, backend=backend, fullgraph=True, expected_graphs=1)


class Holder:
    pass


def returns_a_weak_ref(x, obj):
    r = weakref.ref(obj)
    obj.ref = r
    return x * 2, r, r() is obj


def test_weak_ref_made_in_the_frame_leaves_it():
    kiln.reset()
    compiled = kiln.compile(returns_a_weak_ref, backend="eager", fullgraph=True)
    obj = Holder()
    out, r, alive = compiled(torch.ones(2), obj)
    assert r is weakref.ref(obj) and obj.ref is r and alive is True  # eager's one reference
    torch.testing.assert_close(out, torch.full((2,), 2.0))


def lr_scheduler_made_in_the_frame(x, optimizer):
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return x * 2, scheduler


def test_lr_scheduler_made_in_the_frame_is_eagers():
    results = []
    for fn in (
        lr_scheduler_made_in_the_frame,
        kiln.compile(lr_scheduler_made_in_the_frame, backend="eager", fullgraph=True),
    ):
        kiln.reset()
        model = torch.nn.Linear(3, 3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        out, scheduler = fn(torch.ones(2), optimizer)
        assert scheduler.optimizer is optimizer
        model(torch.ones(1, 3)).sum().backward()
        optimizer.step()
        scheduler.step()
        results.append((out, scheduler.state_dict(), optimizer.param_groups[0]["lr"]))
    assert_same(results[0], results[1])


hook_calls = []


@kiln.disable
def doubling_pre_hook(module, inputs):
    hook_calls.append(tuple(inputs[0].shape))
    return (inputs[0] * 2,)


class Wrapper(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x).relu()


def test_module_whose_hook_breaks_still_compiles_its_forward():
    """A hook that breaks the caller's graph: the module is called through kiln's frame entry,
    its hooks in Python around its forward compiled (it ran eagerly)."""
    kiln.reset()
    lin = torch.nn.Linear(4, 3)
    lin.register_forward_pre_hook(doubling_pre_hook)
    model, x = Wrapper(lin), torch.randn(2, 4)
    want = model(x)
    hook_calls.clear()
    backend = CountingBackend()
    compiled = kiln.compile(model, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), want)
    assert hook_calls == [(2, 4), (2, 4)]
    assert any("linear" in str(gm.graph) for gm in backend.graphs), backend.graphs
    assert backend.calls == 2, [str(gm.graph) for gm in backend.graphs]  # the forward, relu


def cos_helper(x, n):
    return n * torch.cos(x) + 1


class ShallowForward(torch.nn.Module):
    @kiln.disable(recursive=False)
    def forward(self, x):
        hook_calls.append("forward in Python")
        return cos_helper(x, 3)


def test_module_with_a_forward_disabled_shallowly_compiles_its_callees():
    """forward = kiln.disable(forward, recursive=False) called from compiled code: forward runs
    in Python, the functions it calls are compiled frames (they ran eagerly)."""
    kiln.reset()
    mod, x = ShallowForward(), torch.randn(4)

    def fn(x):
        return mod(x) * 2

    want = fn(x)
    hook_calls.clear()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), want)
    assert hook_calls == ["forward in Python"] * 2
    assert any("cos" in str(gm.graph) for gm in backend.graphs), backend.graphs


class ThroughLayers(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, layers, scale):
        ctx.layers = layers
        h = x
        for layer in layers:
            h = layer(h)
        ctx.save_for_backward(h)
        return h * scale, x

    @staticmethod
    def backward(ctx, grad, grad_x):
        return grad, None, None


def apply_with_modules(x, layers):
    out, same = ThroughLayers.apply(x, layers, 2.0)
    return out + 1, same, same is x, out.requires_grad


def test_autograd_function_with_a_module_argument_under_no_grad():
    """grad mode off: apply's forward is traced in the frame (a ModuleList argument, which the
    one-node form cannot pass), an input it returns comes back as a view of it."""
    layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])
    x = torch.randn(2, 4)
    with torch.no_grad():
        compiled = run_and_compare(apply_with_modules, x, layers, fullgraph=True, expected_graphs=1)
        assert compiled(x, layers)[1]._base is x
    run_and_compare(apply_with_modules, x, layers)  # grad mode on: a break, as before


def permuted_dim_order(x):
    y = x.permute(3, 0, 2, 1)
    return y, y.dim_order(), x.dim_order()


def test_dim_order_of_static_strides_folds():
    x = torch.randn(4, 1, 5, 2)
    run_and_compare(permuted_dim_order, x, fullgraph=True, expected_graphs=1)
    strided = torch.randn(300).as_strided([4, 4, 4, 4], [1, 2, 4, 8])
    run_and_compare(permuted_dim_order, strided, fullgraph=True, expected_graphs=1)
