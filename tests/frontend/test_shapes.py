"""ShapeEnv: symbolic arithmetic, facts as guards, replacements, 0/1 specialisation, policy."""

import itertools

import pytest
import sympy
import torch

from kiln.frontend import frame_shapes
from kiln.frontend.frame_shapes import FrameShapes, changed_dims
from kiln.symbolic.shape_env import ShapeEnv, SymNode, sym_max, sym_min


def _guard(env, **tensors):
    """Evaluate the env's guard expression against concrete tensors named like the sources."""
    return eval(env.guard_expr(), {"L": tensors})


def test_static_helpers_unchanged():
    x = torch.empty(3, 4)
    assert frame_shapes.static_size(x, 1) == 4 and type(frame_shapes.static_size(x, 1)) is int
    assert frame_shapes.static_sizes(x) == (3, 4)
    assert frame_shapes.static_strides(x.t()) == (1, 4)
    assert frame_shapes.static_numel(x) == 12


def test_arithmetic_with_ints_and_symbols():
    env = ShapeEnv()
    a, b = env.sizes_of(torch.empty(10, 6), "L['x']")
    assert isinstance(a, SymNode) and a.hint == 10
    assert str((a + 1).expr) == "s0 + 1" and (1 + a).hint == 11
    assert (a - b).hint == 4 and (20 - a).hint == 10
    assert str((a * b).expr) == "s0*s1" and (3 * a).hint == 30
    half = a // 2
    assert str(half.expr) == "floor(s0/2)" and half.hint == 5
    assert (a % 4).hint == 2 and (-a).hint == -10 and (+a) is a
    assert (a - a) == 0 and isinstance(a - a, int)
    assert (b // 1).expr == b.expr
    assert env.guards == []  # arithmetic records nothing
    assert sym_max(a, b).hint == 10 and sym_min(a, 3) == 3 or sym_min(a, 3).hint == 3
    with pytest.raises(TypeError):
        hash(a)


def test_bool_and_comparisons_record_guards():
    env = ShapeEnv()
    (n,) = env.sizes_of(torch.empty(10), "L['x']")
    assert (n > 1) is True and (n != 1) is True and (n >= 2) is True  # static from the range
    assert bool(n) is True and (n * n > 0) is True
    assert env.guards == []
    assert (n > 5) is True
    assert (n < 8) is False
    assert env.guard_texts() == [
        "L['x'].size()[0] >= 2",
        "L['x'].size()[0] > 5",
        "L['x'].size()[0] >= 8",
    ]
    assert _guard(env, x=torch.empty(10)) and _guard(env, x=torch.empty(9))
    assert not _guard(env, x=torch.empty(7)) and not _guard(env, x=torch.empty(3))
    assert not _guard(env, x=torch.empty(1))


def test_equality_becomes_a_replacement():
    env = ShapeEnv()
    (a,) = env.sizes_of(torch.empty(7), "L['x']")
    (b,) = env.sizes_of(torch.empty(7), "L['y']")
    assert a == b
    assert env.replacements == {b.expr: a.expr}
    assert (b - a) == 0  # now static: no second guard
    assert len(env.guards) == 1
    assert "L['y'].size()[0] == L['x'].size()[0]" in env.guard_texts()
    assert _guard(env, x=torch.empty(9), y=torch.empty(9))
    assert not _guard(env, x=torch.empty(9), y=torch.empty(8))
    c = env.create_size(7, "L['y'].size()[0]")  # the same source gives the same (replaced) size
    assert c.expr == a.expr


def test_divisibility_fact():
    env = ShapeEnv()
    (n,) = env.sizes_of(torch.empty(24), "L['x']")
    assert n % 8 == 0
    assert env.guard_texts()[-1] == "(L['x'].size()[0] % 8) == 0"
    assert (n % 8) == 0 and len(env.guards) == 1  # known now, no new guard
    q = n // 8
    assert (q * 8).expr == n.expr  # exact division
    assert _guard(env, x=torch.empty(16)) and not _guard(env, x=torch.empty(20))


def test_zero_one_specialisation():
    env = ShapeEnv()
    sizes = env.sizes_of(torch.empty(1, 0, 5), "L['x']")
    assert sizes[0] == 1 and sizes[1] == 0 and type(sizes[0]) is int and type(sizes[1]) is int
    assert isinstance(sizes[2], SymNode)
    assert env.guard_texts()[:2] == ["L['x'].size()[0] == 1", "L['x'].size()[1] == 0"]
    assert _guard(env, x=torch.empty(1, 0, 9))
    assert not _guard(env, x=torch.empty(2, 0, 9)) and not _guard(env, x=torch.empty(1, 0, 1))


def test_int_and_index_specialise():
    env = ShapeEnv()
    a, b = env.sizes_of(torch.empty(4, 6), "L['x']")
    assert list(range(a)) == [0, 1, 2, 3]
    assert int(b // 2) == 3
    texts = env.guard_texts()
    assert "L['x'].size()[0] == 4" in texts and "(L['x'].size()[1] // 2) == 3" in texts
    assert _guard(env, x=torch.empty(4, 7)) and not _guard(env, x=torch.empty(4, 8))
    assert a.expr == 4 or env.simplify(a.expr) == 4  # a is now the constant 4
    assert torch.empty(a, 2).shape == (4, 2)


def test_evaluate_static_and_dynamic_facts():
    env = ShapeEnv()
    a, b = env.sizes_of(torch.empty(4, 6), "L['x']")
    s0, s1 = a.expr, b.expr
    assert env.evaluate(sympy.Ge(s0 * s1, 4)) is True and env.guards == []
    assert env.evaluate(sympy.Eq(s0, 1)) is False and env.guards == []
    assert env.evaluate(sympy.Lt(s0, s1)) is True and len(env.guards) == 1
    assert env.static_value(sympy.Gt(s0, 3)) is None


def test_guard_expression_matches_the_traced_decisions():
    """For every concrete shape, the guard holds iff the program takes the same branches."""

    def program(n, m):
        out = []
        out.append(n > 4)
        out.append(n % 2 == 0)
        out.append(n == m)
        out.append(n // 2 + m < 12)
        return out

    env = ShapeEnv()
    n, m = env.sizes_of(torch.empty(6, 6), "L['x']")
    traced = program(n, m)
    for nn, mm in itertools.product(range(0, 14), range(0, 14)):
        holds = _guard(env, x=torch.empty(nn, mm))
        same = nn >= 2 and mm >= 2 and program(nn, mm) == traced
        assert holds == same, (nn, mm, env.guard_texts())


def test_automatic_dynamic_policy_seed_example():
    assert changed_dims({"L['x']": (10,)}, {"L['x']": (8,)}) == {"L['x']": {0}}
    assert changed_dims({"L['x']": (10,)}, {"L['x']": (10,)}) == {}
    assert changed_dims({"L['x']": (1,)}, {"L['x']": (8,)}) == {"L['x']": {0}}  # (torch's)
    assert changed_dims({"L['x']": (0,)}, {"L['x']": (8,)}) == {"L['x']": {0}}
    assert changed_dims({"L['x']": (8,)}, {"L['x']": (0,)}) == {}
    assert changed_dims({"L['x']": (8,)}, {"L['x']": (1,)}) == {}
    assert changed_dims({"L['x']": (4, 5)}, {"L['x']": (4, 5, 6)}) == {}
    assert changed_dims({}, {"L['x']": (4,)}) == {}
    assert changed_dims({"L['x']": (4, 5, 6)}, {"L['x']": (7, 5, 9)}) == {"L['x']": {0, 2}}


def test_frame_shapes_sequence_and_marks():
    frame = FrameShapes()
    x10, x8, x1 = torch.empty(10), torch.empty(8), torch.empty(1)
    assert frame.update({"L['x']": (10,)}) == {}
    assert frame.dynamic_dims("L['x']", x10) == set()
    assert frame.update({"L['x']": (8,)}) == {"L['x']": {0}}
    assert frame.dynamic_dims("L['x']", x8) == {0}
    assert frame.update({"L['x']": (12,)}) == {}  # already dynamic: nothing new
    frame2 = FrameShapes()
    frame2.update({"L['x']": (1,)})
    assert frame2.update({"L['x']": (8,)}) == {"L['x']": {0}}  # from 1 too (torch's)
    assert frame2.update({"L['x']": (9,)}) == {}
    assert frame2.dynamic_dims("L['x']", x1) == {0}  # the env then specialises the 1
    frame3 = FrameShapes()
    frame3.update({"L['x']": (8,)})
    assert frame3.update({"L['x']": (1,)}) == {}  # to 1: traced static (it would specialise)

    y = torch.empty(3, 4, 5)
    frame_shapes.mark_dynamic(y, 0)
    frame_shapes.mark_dynamic(y, [-1])
    frame_shapes.mark_static(y, 2)
    assert y._kiln_dynamic_dims == {0, 2} and y._kiln_static_dims == {2}
    fresh = FrameShapes()
    assert fresh.dynamic_dims("L['y']", y) == {0}
    assert fresh.dynamic_dims("L['y']", y, dynamic=True) == {0, 1}
    assert fresh.dynamic_dims("L['y']", y, dynamic=False) == set()


def test_render_and_format():
    env = ShapeEnv()
    a, b = env.sizes_of(torch.empty(4, 6), "L['x']")
    expr = sym_max(a, b // 2).expr + sympy.Mod(a.expr, 3) - b.expr**2
    text = env.render(expr)
    value = eval(text, {"L": {"x": torch.empty(10, 7)}})
    assert value == max(10, 7 // 2) + 10 % 3 - 49
    assert "s0 (hint 4) from L['x'].size()[0]" in env.format_symbols()
    assert ShapeEnv().guard_expr() == "True"


def test_static_facts_about_mod_and_floor():
    env = ShapeEnv()
    a, b = env.sizes_of(torch.empty(12, 6), "L['x']")
    s0, s1 = a.expr, b.expr
    assert env.static_value(sympy.Lt(sympy.Mod(s0, 8), 8)) is True
    assert env.static_value(sympy.Ge(sympy.Mod(s0 * s1, 2), 0)) is True
    assert env.static_value(sympy.Eq(sympy.Mod(s0 * s1, 2), 0)) is None
    assert env.static_value(sympy.Eq(sympy.Mod(s0, 8), 9)) is False
    assert env.static_value(sympy.Ge(sympy.floor(s0 / 2), 0)) is True
    assert (a * b) % 2 == 0 and len(env.guards) == 1


def test_frame_shapes_logs_the_new_dynamic_dim():
    from kiln import logs

    lines = []
    original = logs.log
    logs.log = lambda channel, msg: lines.append((channel, msg))
    try:
        frame = FrameShapes()
        frame.update({"L['x']": (10,)})
        frame.update({"L['x']": (8,)})
    finally:
        logs.log = original
    assert ("recompiles", "L['x'] dim 0 became dynamic: size 10 -> 8") in lines


def test_floats_and_powers():
    env = ShapeEnv()
    (n,) = env.sizes_of(torch.empty(10), "L['x']")
    sq = n**2
    assert str(sq.expr) == "s0**2" and env.guards == []
    assert eval(env.render(sq.expr), {"L": {"x": torch.empty(7)}}) == 49
    assert n * 0.5 == 5.0 and 1.5 * n == 15.0 and float(n) == 10.0
    assert env.guard_texts()[-1] == "L['x'].size()[0] == 10"  # a float result specialises
    assert n**2 == 100 and type(n**2) is int  # now the constant 10


def test_seed_example_policy_compiles_at_most_twice():
    """Seed 004: [10] then [8] for 100 rounds: static, then one symbolic entry for all sizes."""
    frame = FrameShapes()
    cache = []  # (guard expression, env) per compiled entry

    def call(x):
        for expr, _ in cache:
            if eval(expr, {"L": {"x": x}}):
                return
        frame.update({"L['x']": tuple(x.shape)})
        env = ShapeEnv()
        dims = frame.dynamic_dims("L['x']", x)
        (n,) = env.sizes_of(x, "L['x']", dynamic_dims=dims)
        expr = env.guard_expr()
        if not isinstance(n, SymNode):  # a static entry pins the size (TENSOR_MATCH's job)
            expr = f"tuple(L['x'].shape) == {tuple(x.shape)}"
        cache.append((expr, env))

    for _ in range(100):
        call(torch.empty(10))
        call(torch.empty(8))
    assert len(cache) == 2
    assert cache[1][0] == "(L['x'].size()[0] >= 2)"
    call(torch.empty(1))  # size 1 is specialised: its own entry
    call(torch.empty(33))
    assert len(cache) == 3
