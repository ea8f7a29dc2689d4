"""Checks of tensor values kept in the graph (torch._assert_async, `assert t`) raise as eager."""

import pytest
import torch

import kiln

BACKENDS = ["eager", "aot_eager", "kiln"]


def _raises_like_eager(fn, *args):
    """Run fn eagerly and compiled (fullgraph) on fresh copies; the same error type and text."""
    eager_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    with pytest.raises(Exception) as eager:
        fn(*eager_args)
    return eager.type, str(eager.value), eager_args


def _check_async(x):
    torch._assert_async(x.sum() > 0, "the sum is not positive")
    return x * 2


def _check_async_no_msg(x):
    torch._assert_async((x > 0).all())
    return x + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_assert_async_passes_and_fails(backend):
    f = kiln.compile(_check_async, backend=backend, fullgraph=True)
    x = torch.tensor([1.0, 2.0])
    torch.testing.assert_close(f(x), _check_async(x))
    with pytest.raises(RuntimeError, match="^the sum is not positive$"):
        f(torch.tensor([-1.0, 0.5]))
    g = kiln.compile(_check_async_no_msg, backend=backend, fullgraph=True)
    torch.testing.assert_close(g(x), x + 1)
    with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value"):
        g(torch.tensor([1.0, -1.0]))


def _mutate_after_check(x, log):
    torch._assert_async(x[0] > 0, "first must be positive")
    x.add_(1)
    log.append(1)
    return x.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_failing_check_leaves_no_later_effects(backend):
    f = kiln.compile(_mutate_after_check, backend=backend, fullgraph=True)
    log = []
    x = torch.tensor([-1.0, 2.0])
    with pytest.raises(RuntimeError, match="first must be positive"):
        f(x, log)
    assert log == []
    assert x.tolist() == [-1.0, 2.0]  # the mutation after the check did not happen
    y = torch.tensor([1.0, 2.0])
    assert f(y, log).item() == 5.0 and log == [1] and y.tolist() == [2.0, 3.0]


def _check_unused_result(x):
    y = x.relu()
    torch._assert_async(y.max() < 10)  # nothing reads the check: it must still run
    return x - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_kept_without_users(backend):
    f = kiln.compile(_check_unused_result, backend=backend, fullgraph=True)
    assert f(torch.ones(3)).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(RuntimeError):
        f(torch.full((3,), 20.0))


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_check_in_a_training_graph(backend):
    def fn(w, x):
        out = (w * x).sum()
        torch._assert_async(out.detach() != 0, "zero output")
        return out

    f = kiln.compile(fn, backend=backend, fullgraph=True)
    w = torch.ones(3, requires_grad=True)
    f(w, torch.tensor([1.0, 2.0, 3.0])).backward()
    assert w.grad.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match="zero output"):
        f(w, torch.tensor([1.0, -1.0, 0.0]))


# (pytest rewrites the `assert` statements of test modules: the user code is compiled from text)
_USER_CODE = """
def _user_assert(x):
    assert x.min() >= 0, "x must be non-negative"
    return x.sqrt()


def _user_assert_bare(x):
    assert (x != 0).all()
    return 1 / x


def _user_assert_not(x):
    assert not x.isnan().any(), "nan"
    return x * 3


def _computed_message(x):
    assert x.sum() > 0, f"bad {x.shape}"
    return x + 1


def _many_elements(x):
    assert x > 0
    return x


def _assert_in_try(x, log):
    try:
        assert x.sum() > 0, "neg"
    except AssertionError as e:
        log.append(str(e))
    return x + 1
"""
_USER = {"torch": torch}
exec(compile(_USER_CODE, "user_asserts.py", "exec"), _USER)
_user_assert = _USER["_user_assert"]
_user_assert_bare = _USER["_user_assert_bare"]
_user_assert_not = _USER["_user_assert_not"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_assert_on_a_tensor(backend):
    f = kiln.compile(_user_assert, backend=backend, fullgraph=True)
    x = torch.tensor([4.0, 9.0])
    assert f(x).tolist() == [2.0, 3.0]
    etype, text, _ = _raises_like_eager(_user_assert, torch.tensor([-1.0]))
    with pytest.raises(AssertionError) as got:
        f(torch.tensor([-1.0, 4.0]))
    assert etype is AssertionError and str(got.value) == text == "x must be non-negative"
    g = kiln.compile(_user_assert_bare, backend=backend, fullgraph=True)
    assert g(torch.tensor([2.0])).tolist() == [0.5]
    with pytest.raises(AssertionError) as got:
        g(torch.tensor([2.0, 0.0]))
    assert got.value.args == ()
    h = kiln.compile(_user_assert_not, backend=backend, fullgraph=True)
    assert h(torch.tensor([1.0])).tolist() == [3.0]
    with pytest.raises(AssertionError, match="^nan$"):
        h(torch.tensor([1.0, float("nan")]))


def test_python_assert_with_a_computed_message_reruns_when_it_fails():
    # Note [Asserts: a branch that only raises]: the check in the graph, eager's message
    fn = _USER["_computed_message"]
    kiln.reset()
    compiled = kiln.compile(fn, fullgraph=True)
    assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(AssertionError) as got:
        compiled(-torch.ones(2))
    with pytest.raises(AssertionError) as expected:
        fn(-torch.ones(2))
    assert str(got.value) == str(expected.value) and "bad" in str(got.value)
    assert kiln.counters["frames"]["eager_reruns"] == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_assert_on_many_elements_raises_as_eager():
    with pytest.raises(RuntimeError, match="ambiguous"):
        kiln.compile(_USER["_many_elements"])(torch.ones(2))


def test_assert_inside_try_is_caught_by_the_handler():
    f = kiln.compile(_USER["_assert_in_try"])
    log = []
    assert f(-torch.ones(2), log).tolist() == [0.0, 0.0]
    assert log == ["neg"]
    assert f(torch.ones(2), log).tolist() == [2.0, 2.0]
    assert log == ["neg"]


def _reduce_check_then_mutate(x):
    torch._assert_async(x.sum() > 0)
    x.mul_(2)  # a kernel reading x like the check's sum: it must not fuse in before the check
    return x.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_mutation_written_in_place_waits_for_the_check(backend):
    f = kiln.compile(_reduce_check_then_mutate, backend=backend, fullgraph=True)
    x = -torch.ones(8)
    with pytest.raises(RuntimeError):
        f(x)
    assert x.tolist() == [-1.0] * 8
    y = torch.ones(8)
    assert f(y).item() == 16.0 and y.tolist() == [2.0] * 8


def _check_item(x, log):
    n = x.sum().item()
    torch._check(n > 0)
    log.append(n)  # a side effect after the check
    if n > 0:  # decided by the checked fact: no guard, no break
        return x * n
    return x - 100


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_check_of_an_item_is_asserted_at_run_time(backend):
    kiln.config.capture_scalar_outputs = True
    try:
        f = kiln.compile(_check_item, backend=backend, fullgraph=True)
        log = []
        assert f(torch.tensor([1, 2]), log).tolist() == [3, 6] and log == [3]
        assert f(torch.tensor([2, 2]), log).tolist() == [8, 8] and log == [3, 4]
        with pytest.raises(RuntimeError) as eager:
            _check_item(torch.tensor([-1, -2]), [])
        with pytest.raises(RuntimeError) as got:
            f(torch.tensor([-1, -2]), log)
        assert str(got.value) == str(eager.value)
        assert log == [3, 4]
    finally:
        kiln.config.capture_scalar_outputs = False


def test_torch_check_of_an_item_other_uses_still_break():
    def fn(x):
        n = x.sum().item()
        ok = n > 0  # not torch._check's argument: a data-dependent bool
        torch._check(ok)
        return x + 1

    kiln.config.capture_scalar_outputs = True
    try:
        with pytest.raises(kiln.exc.Unsupported, match="data-dependent"):
            kiln.compile(fn, fullgraph=True)(torch.tensor([1, 2]))
        with pytest.raises(RuntimeError):
            kiln.compile(fn)(torch.tensor([-1, -2]))
    finally:
        kiln.config.capture_scalar_outputs = False


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_graph_holding_only_a_check(backend):
    def fn(x):
        torch._assert_async(x.sum() > 0, "only a check")

    f = kiln.compile(fn, backend=backend, fullgraph=True)
    assert f(torch.ones(2)) is None
    with pytest.raises(RuntimeError, match="only a check"):
        f(-torch.ones(2))


def test_torch_check_reads_the_item_not_its_tensor_later():
    def fn(t, x):
        n = t.item()
        t.add_(10)  # the check is on n, read before this write
        torch._check(n > 0)
        return x * n

    kiln.config.capture_scalar_outputs = True
    try:
        f = kiln.compile(fn, fullgraph=True)
        assert f(torch.tensor([2]), torch.ones(2)).tolist() == [2.0, 2.0]
        t = torch.tensor([-1])
        with pytest.raises(RuntimeError, match="Expected cond to be True"):
            f(t, torch.ones(2))
    finally:
        kiln.config.capture_scalar_outputs = False


def _assert_shape(img):
    x = torch.sin(img)
    torch._assert(img.shape[-2] == 8 and img.shape[-1] == 16, f"shape {img.shape}")
    return img + x


def test_torch_assert_of_static_sizes_is_one_graph():
    # PyTorch's test_str_format_assert2: true while tracing, nothing in the graph
    from frontend_helpers import run_and_compare

    run_and_compare(_assert_shape, torch.randn(1, 3, 8, 16), expected_graphs=1, expected_breaks=0)


def test_torch_assert_false_raises_as_eager():
    from frontend_helpers import run_and_compare

    run_and_compare(_assert_shape, torch.randn(1, 3, 8, 15), expected_breaks=1)
    with pytest.raises(AssertionError, match=r"shape torch.Size\(\[1, 3, 8, 15\]\)"):
        kiln.compile(_assert_shape, backend="eager")(torch.randn(1, 3, 8, 15))
