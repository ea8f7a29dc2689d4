"""torch._C._dispatch_keys and the thread's local dispatch key sets read in compiled code: folded
to constants with the guards that keep them true (Note [Torch: dispatch keys of a traced tensor]);
every answer equals eager's."""

import pytest
import torch
from frontend_helpers import CountingBackend

import kiln


def keys_and_sets(x):
    inc = torch._C._dispatch_tls_local_include_set()
    exc = torch._C._dispatch_tls_local_exclude_set()
    made = torch._C._dispatch_keys(x * 2)
    given = torch._C._dispatch_keys(x)
    merged = (inc | made) - exc
    top = merged.highestPriorityTypeId() == torch.DispatchKey.PythonDispatcher
    return x.cos() + 1, inc, exc, made, given, merged, top, made.has("CPU"), made.raw_repr()


def _same(got, want):
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:]


def test_keys_and_sets_equal_eager_in_one_graph():
    be = CountingBackend()
    f = kiln.compile(keys_and_sets, backend=be, fullgraph=True)
    x = torch.randn(4, requires_grad=True)
    _same(f(x), keys_and_sets(x))
    y = torch.randn(4, dtype=torch.float64)
    _same(f(y), keys_and_sets(y))
    assert be.calls == 2  # (dtype and requires_grad guards)


def test_thread_local_sets_are_guarded():
    be = CountingBackend()
    f = kiln.compile(keys_and_sets, backend=be)
    x = torch.randn(3)
    _same(f(x), keys_and_sets(x))
    with torch._C._AutoDispatchBelowAutograd():  # changes the local exclude set
        got, want = f(x), keys_and_sets(x)
    _same(got, want)
    assert be.calls == 2
    _same(f(x), keys_and_sets(x))
    assert be.calls == 2  # the first entry again


def test_inference_mode_and_inference_inputs():
    be = CountingBackend()
    f = kiln.compile(keys_and_sets, backend=be)
    x = torch.randn(3)
    _same(f(x), keys_and_sets(x))
    with torch.inference_mode():
        got, want = f(x), keys_and_sets(x)  # new tensors are inference tensors: no autograd keys
        _same(got, want)
        inference_x = torch.randn(3)
    assert be.calls == 2
    _same(f(inference_x), keys_and_sets(inference_x))  # a break, the call runs in Python
    with pytest.raises(kiln.exc.Unsupported, match="inference tensor"):
        kiln.compile(keys_and_sets, backend=be, fullgraph=True)(inference_x)


class _Tagged(torch.Tensor):
    """A plain subclass (no __tensor_flatten__): not traced."""


def test_subclass_inputs_fold_only_when_traced():
    from torch.testing._internal.two_tensor import TwoTensor

    def f(x):
        return torch._C._dispatch_keys(x.sin())

    z = TwoTensor(torch.randn(3), torch.randn(3))
    # a wrapper subclass is traced with a fake of itself: the Python keys of the subclass fold
    be = CountingBackend()
    assert kiln.compile(f, backend=be, fullgraph=True)(z) == f(z)
    assert be.calls == 1
    t = torch.randn(3).as_subclass(_Tagged)
    assert kiln.compile(f, backend="eager")(t) == f(t)
    with pytest.raises(kiln.exc.Unsupported, match="subclass"):
        kiln.compile(f, backend="eager", fullgraph=True)(t)


def branch_on_keys(x, keys):
    if keys.has("CPU"):
        return torch.sin(x + 1)
    return torch.sin(x - 1)


def test_key_set_argument_is_guarded_by_value():
    be = CountingBackend()
    f = kiln.compile(branch_on_keys, backend=be, fullgraph=True)
    for x in (torch.randn(2, 3), torch.randn(2, 3)):
        keys = torch._C._dispatch_keys(x)
        torch.testing.assert_close(f(x, keys), branch_on_keys(x, keys))
    assert be.calls == 1  # equal sets (new objects): the same entry
    meta_keys = torch._C._dispatch_keys(torch.empty(2, device="meta"))
    torch.testing.assert_close(f(x, meta_keys), branch_on_keys(x, meta_keys))
    assert be.calls == 2
