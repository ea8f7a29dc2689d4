"""The cache: hits across steps, misses with reasons, size-generic graphs and their guards."""

import torch
from ca_helpers import ca_counters, clean

import kiln.compiled_autograd as ca


def _loss(w, v):
    return (w.t().reshape(-1) * 2).sum() + (w @ v).sum()


def test_size_generic_graph_serves_new_shapes_and_guards_equalities():
    shapes = [(10, 10), (20, 20), (20, 30), (7, 3), (5, 9), (11, 2), (4, 4)]
    compiles = []
    with clean("compiled_autograd_verbose") as log:
        for shape in shapes:
            w = torch.randn(*shape, requires_grad=True)
            v = torch.randn(shape[1], requires_grad=True)
            with ca.enable(None):
                _loss(w, v).backward()
            w2 = w.detach().clone().requires_grad_()
            v2 = v.detach().clone().requires_grad_()
            _loss(w2, v2).backward()
            torch.testing.assert_close(w.grad, w2.grad)
            torch.testing.assert_close(v.grad, v2.grad)
            counters = ca_counters()
            assert "compiles" in counters, f"{shape}: fell back to eager\n{log.getvalue()}"
            compiles.append(counters["compiles"])
    # square shapes made both dims one size (guarded equal); the first non-square shape and the
    # first change of the other dim recompile; from then on one generic graph serves every shape
    assert compiles == [1, 2, 3, 4, 4, 4, 4]
    text = log.getvalue()
    assert "Cache miss due to changed shapes: marking size idx" in text
    assert "= sizes[" in text


def test_hits_do_not_capture_again_and_new_structure_does():
    w = torch.randn(6, requires_grad=True)
    with clean("compiled_autograd_verbose") as log:
        for _ in range(3):
            with ca.enable(None):
                (w.sin() * w).sum().backward()
        with ca.enable(None):
            (w.cos() * w).sum().backward()
        counters = ca_counters()
    assert counters == {"captures": 2, "compiles": 2, "calls": 4}
    assert "Cache miss due to new autograd node: CosBackward0" in log.getvalue()


def test_scalar_change_is_a_new_node_and_hooks_count_in_the_key():
    w = torch.randn(6, requires_grad=True)
    with clean():
        with ca.enable(None):
            w.pow(2.0).sum().backward()
            w.pow(3.0).sum().backward()  # PowBackward0 saved exponent=3.0: a new key
        assert ca_counters()["compiles"] == 2
        h = w.register_hook(lambda g: g * 0)
        with ca.enable(None):
            w.pow(3.0).sum().backward()  # a hook on w now: a new key, and the hook applies
        h.remove()
        assert ca_counters()["compiles"] == 3
    x = w.detach()
    torch.testing.assert_close(w.grad, 2 * x + 3 * x * x)


def test_aliasing_of_saved_tensors_is_part_of_the_key():
    a = torch.randn(5, requires_grad=True)
    b = torch.randn(5, requires_grad=True)
    with clean():
        with ca.enable(None):
            (a * a).sum().backward()  # self and other are the same tensor
            x, y = a * 1, b * 1
            (x * y).sum().backward()
    ra = a.detach().clone().requires_grad_()
    rb = b.detach().clone().requires_grad_()
    (ra * ra).sum().backward()
    ((ra * 1) * (rb * 1)).sum().backward()
    torch.testing.assert_close(a.grad, ra.grad)
    torch.testing.assert_close(b.grad, rb.grad)


def test_reset_forgets_graphs():
    w = torch.randn(3, requires_grad=True)
    with clean():
        with ca.enable(None):
            w.exp().sum().backward()
        ca.reset()
        with ca.enable(None):
            w.exp().sum().backward()
        assert ca_counters()["compiles"] == 2


def test_sizes_zero_and_one_are_never_generic():
    compiles = []
    with clean():
        for shape in [(3, 4), (5, 6), (1, 6), (7, 8), (7, 1), (0, 8)]:
            w = torch.randn(*shape, requires_grad=True)
            b = torch.randn(1, shape[1], requires_grad=True)
            w2 = w.detach().clone().requires_grad_()
            b2 = b.detach().clone().requires_grad_()
            with ca.enable(None):
                (w * b).sin().sum().backward()
            (w2 * b2).sin().sum().backward()
            torch.testing.assert_close(w.grad, w2.grad)
            torch.testing.assert_close(b.grad, b2.grad)
            counters = ca_counters()
            assert "compiles" in counters, f"{shape}: fell back to eager"
            compiles.append(counters["compiles"])
    assert compiles == [1, 2, 3, 3, 4, 5]  # (1, 6), (7, 1), (0, 8): captured for their sizes


def test_finalizers_during_capture_are_not_engine_calls():
    """An object dying while the backward is captured (a weakref callback, a __del__) must not
    make the capture fall back; an unknown function the engine calls still does."""
    import sys
    import weakref

    from kiln.compiled_autograd.capture import _is_finalizer

    seen = {}

    class Dies:
        def __del__(self):
            seen["__del__"] = _is_finalizer(sys._getframe())

    def on_death(ref):
        seen["weakref callback"] = _is_finalizer(sys._getframe())

    def user_hook(grad):
        seen["hook"] = _is_finalizer(sys._getframe())

    obj = Dies()
    ref = weakref.ref(obj, on_death)
    del obj
    user_hook(None)
    assert ref() is None
    assert seen == {"__del__": True, "weakref callback": True, "hook": False}


def test_remembered_walk_still_sees_changed_sizes_dtypes_and_hooks():
    """Note [Compiled autograd: the hot path]: hits skip the trie walk, misses still log."""
    with clean("compiled_autograd_verbose") as log:
        for shape, dtype, hook in [
            (10, torch.float32, False),
            (10, torch.float32, False),  # a remembered walk: no capture
            (10, torch.float32, False),
            (12, torch.float32, False),  # a changed size on the remembered path
            (10, torch.float64, False),  # a new dtype: a new node
            (10, torch.float32, True),  # a hook on the leaf: a new node
            (10, torch.float32, False),
        ]:
            w = torch.randn(shape, dtype=dtype, requires_grad=True)
            if hook:
                w.register_hook(lambda g: g * 3)
            with ca.enable(None):
                (w.sin() * w).sum().backward()
            ref = w.detach().clone().requires_grad_()
            (ref.sin() * ref).sum().backward()
            torch.testing.assert_close(w.grad, ref.grad * (3 if hook else 1))
        counters = ca_counters()
    text = log.getvalue()
    assert "Cache miss due to changed shapes" in text
    assert counters["calls"] == 7 and counters["captures"] == 4, counters


def test_saved_parameters_and_their_views_alias_in_the_key():
    """A CompiledFunction's saved tensors are lifted in bulk: a parameter it saves and its
    transpose (same address, other strides) are told apart; equal ones are one input."""
    import kiln

    lin = torch.nn.Linear(6, 4)
    ref = torch.nn.Linear(6, 4)
    ref.load_state_dict(lin.state_dict())
    f = kiln.compile(lambda x: (lin(x) @ lin.weight).relu(), backend="aot_eager")
    with clean():
        for _ in range(3):
            x = torch.randn(3, 6)
            with ca.enable(None):
                f(x).sum().backward()
            (ref(x) @ ref.weight).relu().sum().backward()
        counters = ca_counters()
    assert counters.get("fallbacks", 0) == 0 and counters["captures"] == 1, counters
    for p, q in zip(lin.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
