"""Facts torch._check asserted on unbacked symbols decide later questions (kiln.symbolic)."""

import sympy

from kiln.symbolic.unbacked_facts import decide

u = sympy.Symbol("u0", integer=True)
v = sympy.Symbol("u1", integer=True)


def test_bounds_from_one_fact():
    facts = {sympy.Ge(u, 0)}
    assert decide(facts, sympy.Ge(u, 0)) is True
    assert decide(facts, sympy.Gt(u, -1)) is True
    assert decide(facts, sympy.Lt(u, 0)) is False
    assert decide(facts, sympy.Eq(u, -3)) is False
    assert decide(facts, sympy.Ne(u, -3)) is True
    assert decide(facts, sympy.Ge(u, 1)) is None  # (u may be 0)
    assert decide(facts, sympy.Gt(v, 0)) is None  # another symbol


def test_bounds_from_two_facts_and_a_linear_question():
    facts = {sympy.Ge(u, 2), sympy.Le(u, 4)}
    assert decide(facts, sympy.Lt(u, 5)) is True
    assert decide(facts, sympy.Eq(u, 7)) is False
    assert decide(facts, sympy.Gt(2 * u + 1, 3)) is True
    assert decide(facts, sympy.Gt(2 * u + 1, 5)) is None
    assert decide(facts, sympy.Gt(u + v, 0)) is None  # two symbols: not decided
