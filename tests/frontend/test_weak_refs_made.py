"""weakref.ref(x) of a frame argument, made and called inside a compiled frame."""

import weakref

import pytest
import torch

import kiln


def _scaled_through_ref(x, y):
    r = weakref.ref(x)
    return r() * y


class _Box:
    pass


def _same_object(o, x):
    r = weakref.ref(o)
    return x + 1, r() is o


def test_tensor_argument_through_a_new_ref():
    x, y = torch.randn(4), torch.randn(4)
    out = kiln.compile(_scaled_through_ref, fullgraph=True)(x, y)
    torch.testing.assert_close(out, x * y)


def test_object_argument_through_a_new_ref():
    out, same = kiln.compile(_same_object, fullgraph=True)(_Box(), torch.ones(1))
    assert same is True
    torch.testing.assert_close(out, torch.full((1,), 2.0))


def _returns_ref(t):
    t = t * 2
    return weakref.ref(t), t


def _drops_referent(t):
    u = t * 2
    r = weakref.ref(u)
    del u
    return r, t + 1


def _calls_ref_of_frame_made(t):
    u = t * 2
    return weakref.ref(u)() * 3


def test_ref_of_a_tensor_made_in_the_frame_is_made_after_the_graph():
    """(test_repros part2 test_return_weakref) made again from the graph's output: alive after
    the frame exactly when eager's referent is; calling it inside the frame is still a break."""
    r, t = kiln.compile(_returns_ref, backend="eager", fullgraph=True)(torch.ones(2))
    assert r() is t
    r, _ = kiln.compile(_drops_referent, backend="eager", fullgraph=True)(torch.ones(2))
    assert r() is None and _drops_referent(torch.ones(2))[0]() is None
    with pytest.raises(kiln.exc.Unsupported):
        kiln.compile(_calls_ref_of_frame_made, fullgraph=True)(torch.ones(2))
    x = torch.ones(2)
    torch.testing.assert_close(kiln.compile(_calls_ref_of_frame_made)(x), x * 6)


class _NoWeakRefs:
    __slots__ = ()


def _ref_or_fallback(o, x):
    try:
        weakref.ref(o)
    except TypeError:
        return x + 1
    return x + 2


def test_ref_of_an_object_without_weak_references_raises_as_eager():
    # eager raises TypeError (no __weakref__ slot); the frame must not make a reference anyway
    x = torch.ones(1)
    expected = _ref_or_fallback(_NoWeakRefs(), x)
    torch.testing.assert_close(kiln.compile(_ref_or_fallback)(_NoWeakRefs(), x), expected)
    with pytest.raises(kiln.exc.Unsupported, match="takes none"):
        kiln.compile(_ref_or_fallback, fullgraph=True)(_NoWeakRefs(), x)


class _WithMethod:
    def method(self):
        return 1


def _bound_method_made_in_frame():
    return _WithMethod().method


def _ref_to_a_bound_method(x):
    o = _bound_method_made_in_frame()
    ref = weakref.ref(o)  # (a break: o is no argument) the local and the stack are one object
    return x + 1, ref() is o


def test_a_bound_method_rebuilt_at_a_break_is_one_object():
    # CPython's test_weakref check_basic_ref(create_bound_method): kiln rebuilt the method twice,
    # so the reference pointed at a temporary that died at once
    x = torch.ones(1)
    out, same = kiln.compile(_ref_to_a_bound_method, backend="eager")(x)
    assert same is True
    torch.testing.assert_close(out, x + 1)


class _Attrs:
    pass


def _reads_through_a_proxy(o, proxy, x):
    o.foo = 1
    a = proxy.foo
    o.foo = 2  # the proxy reads its referent: eager sees 2 next
    return x + a + proxy.foo


def test_reads_through_a_weakref_proxy_see_the_frames_writes():
    # Note [Objects: weakref.proxy]: the reads are the referent's, pending stores included (a
    # read before the frame's replayed stores gave 1 + 1, not 1 + 2)
    x = torch.zeros(1)
    o_eager, o_comp = _Attrs(), _Attrs()
    expected = _reads_through_a_proxy(o_eager, weakref.proxy(o_eager), x)
    compiled = kiln.compile(_reads_through_a_proxy, backend="eager", fullgraph=True)
    got = compiled(o_comp, weakref.proxy(o_comp), x)
    torch.testing.assert_close(got, expected)
    assert o_comp.foo == o_eager.foo == 2


class _Trainer:
    def __init__(self, x):
        self.value = x

    def scaled(self, k):
        return self.value * k


def _through_proxy(holder, x):
    return x + holder.trainer.value + holder.trainer.scaled(2), holder.trainer


def test_a_weakref_proxy_input_is_read_guarded_and_given_back():
    holder = _Attrs()
    compiled = kiln.compile(_through_proxy, backend="eager", fullgraph=True)
    x = torch.ones(2)
    for value in (1.0, 2.0):
        trainer = _Trainer(torch.full((2,), value))
        holder.trainer = weakref.proxy(trainer)
        got, expected = compiled(holder, x), _through_proxy(holder, x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] is holder.trainer
    plain = kiln.compile(_through_proxy, backend="eager")
    plain(holder, x)
    del trainer  # the referent died: the entry's guard fails, and the frame raises as eager's
    with pytest.raises(ReferenceError):
        _through_proxy(holder, x)
    with pytest.raises(ReferenceError):
        plain(holder, x)
    with pytest.raises(kiln.exc.Unsupported, match="referent is dead"):
        compiled(holder, x)
