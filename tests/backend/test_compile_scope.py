"""Per-compile backend state is scoped: restored on exit, separate per thread (two threads compile
at once and both are right)."""

import sys
import threading

import torch

import kiln
from kiln.backend import lowering as L
from kiln.backend.index_exprs import ranges
from kiln.backend.ir import compile_scope, set_range
from kiln.symbolic.shape_env import ShapeEnv
from kiln.symbolic.sizes import size_hint, to_expr, use_shape_env


def _env(hint_a, hint_b, equal):
    """A ShapeEnv with two size symbols; `equal` records the fact that makes s1 -> s0."""
    env = ShapeEnv()
    a = env.create_size(hint_a, "L['a'].size()[0]")
    b = env.create_size(hint_b, "L['b'].size()[0]")
    if equal:
        assert bool(a == b)
    return env, a.expr, b.expr


def test_scope_restores_the_previous_state():
    env, s0, s1 = _env(5, 5, equal=True)
    with compile_scope():
        use_shape_env(env)
        set_range("i0", 0, 4)
        with L.lowering_node("outer graph", "outer val", "outer target"):
            with compile_scope():  # a compile inside a compile starts fresh
                assert ranges() == {} and size_hint(s0) == 8192 and to_expr(s1) == s1
                with L.lowering_node("inner graph", None, None):
                    assert L.V.graph == "inner graph"
            assert L.V.graph == "outer graph" and L.V.current_target == "outer target"
        assert ranges() == {"i0": (0, 4)} and size_hint(s0) == 5 and to_expr(s1) == s0
    assert L.V.graph is None and ranges() == {} and size_hint(s0) == 8192


def test_two_threads_keep_their_own_state():
    barrier = threading.Barrier(2, timeout=60)
    seen, errors = {}, []

    def work(name, hint, equal):
        try:
            env, s0, s1 = _env(hint, hint if equal else hint + 1, equal)
            with compile_scope():
                use_shape_env(env)
                set_range("i0", 0, hint - 1)
                with L.lowering_node(name, None, None):
                    barrier.wait()  # both threads are inside their scopes now
                    seen[name] = (size_hint(s0), to_expr(s1), ranges()["i0"], L.V.graph)
                    barrier.wait()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [
        threading.Thread(target=work, args=("a", 5, True)),
        threading.Thread(target=work, args=("b", 9, False)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert seen["a"][0] == 5 and seen["a"][2] == (0, 4) and seen["a"][3] == "a"
    assert seen["b"][0] == 9 and seen["b"][2] == (0, 8) and seen["b"][3] == "b"
    assert str(seen["a"][1]) == "s0" and str(seen["b"][1]) == "s1"  # only a proved s1 == s0


def _f(x, y):
    return torch.relu(x @ y) * x.sum(1, keepdim=True)


def _g(x):
    return torch.softmax(x * 2.0, dim=-1) + x.mean(0)


def test_two_threads_compile_different_functions_at_once():
    kiln.reset()
    barrier = threading.Barrier(2, timeout=120)
    results, errors = {}, []
    cases = {
        "f": (_f, [(torch.randn(6, 4), torch.randn(4, 3)), (torch.randn(9, 4), torch.randn(4, 5))]),
        "g": (_g, [(torch.randn(5, 7),), (torch.randn(8, 3),)]),
    }

    def work(name):
        fn, calls = cases[name]
        try:
            compiled = kiln.compile(fn, backend="kiln", dynamic=True)
            barrier.wait()
            results[name] = [(compiled(*args), fn(*args)) for args in calls]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave the two compiles finely
    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in cases]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    for name in cases:
        for got, want in results[name]:
            torch.testing.assert_close(got, want)
