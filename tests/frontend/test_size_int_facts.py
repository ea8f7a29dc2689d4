"""Ints in a container that became size symbols (automatic dynamic): `in`, `==` and `<` on many
of them give eager's answers, the guards recorded for them hold on later calls, and the static
sign rule of Note [Shapes: signs of sums of sizes] answers as sympy's assumptions do."""

import collections
import random

import sympy

import kiln
from kiln.symbolic.shape_env import MIN_SYMBOL_VALUE, _linear_sign, _sum_sign


def _lookups(d, v):
    return v in d, v not in d, d.count(v), [x < v for x in d][:5]


def test_in_over_a_deque_of_size_ints():
    compiled = kiln.compile(_lookups, backend="eager")
    n = 120
    for k, v in [(0, 50), (1, 51), (2, 3), (3, 500), (4, 2), (5, 124), (6, 125)]:
        d = collections.deque(range(k, n + k))
        assert compiled(d, v) == _lookups(d, v), (k, v)


def test_guards_of_compared_ints_hold():
    compiled = kiln.compile(_lookups, backend="eager")
    # the ints change between calls (size symbols after the first recompile); the values then
    # move in and out of the deque, so every recorded fact is checked against a new call
    for step in range(12):
        items = [7 + (step * 3 + i * 5) % 40 for i in range(30)]
        d = collections.deque(items)
        for v in (items[step], 8 + step, 100):
            assert compiled(d, v) == _lookups(d, v), (step, v)


def test_sum_sign_matches_sympy():
    rng = random.Random(0)
    for _ in range(400):
        dummies = [sympy.Dummy(nonnegative=True, integer=True) for _ in range(rng.randint(0, 3))]
        diff = sympy.expand(
            sum((rng.choice([1, -1]) * d for d in dummies), sympy.Integer(rng.randint(-4, 4)))
        )
        expected = (
            diff.is_positive,
            diff.is_nonnegative,
            diff.is_zero,
            diff.is_negative,
            diff.is_nonpositive,
        )
        assert _sum_sign(diff) == expected, diff


def test_sum_sign_leaves_other_sums_to_sympy():
    d = sympy.Dummy(nonnegative=True, integer=True)
    assert _sum_sign(2 * d - 1) is None
    assert _sum_sign(d * d) is None
    assert _sum_sign(sympy.Symbol("u", integer=True) + 1) is None
    assert _sum_sign(d + sympy.Rational(1, 2)) is None


def test_linear_sign_matches_the_shifted_difference():
    rng = random.Random(1)
    syms = [sympy.Symbol(f"s{i}", integer=True, positive=True) for i in range(3)]
    shifted = {s: sympy.Dummy(nonnegative=True, integer=True) + MIN_SYMBOL_VALUE for s in syms}

    def side():
        picked = rng.sample(syms, rng.randint(0, 2))
        return sum((rng.choice([1, -1]) * s for s in picked), sympy.Integer(rng.randint(-6, 6)))

    for _ in range(400):
        lhs, rhs = side(), side()
        diff = sympy.expand((lhs - rhs).xreplace(shifted))
        assert _linear_sign(lhs, rhs, set(syms)) == _sum_sign(diff), (lhs, rhs)
    assert _linear_sign(2 * syms[0], syms[1], set(syms)) is None
    assert _linear_sign(sympy.Mod(syms[0], 2), 0, set(syms)) is None
