"""Plain sets and frozensets passed in or read from globals (Note [Sets: inputs]): membership,
iteration, mutation written back, identity, and the guards on their contents, compared with
eager under fullgraph=True."""

import math

import pytest
import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


def helper_a():
    return 1


def helper_b():
    return 2


def branch_on(x, s):
    if helper_a in s:
        return x.sin()
    return x.cos()


def test_function_in_set_input_recompiles_when_removed():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(branch_on, backend=backend, fullgraph=True)
    s = {helper_a, "hello", torch.sin}
    x = torch.randn(3)
    assert torch.equal(compiled(x, s), branch_on(x, s))
    assert torch.equal(compiled(x, s), x.sin())
    assert backend.calls == 1  # the same contents: a cache hit
    s.remove(helper_a)
    s.add(helper_b)
    assert torch.equal(compiled(x, s), branch_on(x, s))
    assert torch.equal(compiled(x, s), x.cos())
    assert backend.calls == 2


def literal_branch(x, s):
    if "PyTorch" in s:
        return x.sin()
    return x.cos() + len(s)


def test_set_of_mixed_literals_with_nan():
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(literal_branch, backend=backend, fullgraph=True)
    s = {"PyTorch", 3.3, 1j, math.nan}
    x = torch.randn(2)
    assert torch.equal(compiled(x, s), literal_branch(x, s))
    s.discard("PyTorch")
    assert torch.equal(compiled(x, s), literal_branch(x, s))
    assert backend.calls == 2


def loops_and_operators(x, s, f):
    total = x
    for item in sorted(s):
        total = total + item
    return total, s | {9}, s & f, s - f, 3 in f, len(f), s <= {1, 2, 3, 4}


def test_iteration_and_operators_on_inputs():
    run_and_compare(loops_and_operators, torch.ones(2), {1, 2, 3}, frozenset({2, helper_a}))


GLOBAL_SET = {"a", "b"}


def reads_global(x):
    return x + ("a" in GLOBAL_SET) + len(GLOBAL_SET)


def test_global_set_guarded_by_contents():
    kiln.reset()
    compiled = kiln.compile(reads_global, backend="eager", fullgraph=True)
    x = torch.zeros(1)
    assert torch.equal(compiled(x), reads_global(x))
    GLOBAL_SET.discard("a")
    try:
        assert torch.equal(compiled(x), reads_global(x))
    finally:
        GLOBAL_SET.add("a")


def mutates(x, s):
    s.add(3)
    s.discard("a")
    return x + len(s), s


def test_mutation_written_back_and_identity_kept():
    kiln.reset()
    compiled = kiln.compile(mutates, backend="eager", fullgraph=True)
    eager_set, compiled_set = {"a", "b", helper_a}, {"a", "b", helper_a}
    expected, expected_out = mutates(torch.zeros(1), eager_set)
    got, got_out = compiled(torch.zeros(1), compiled_set)
    assert torch.equal(expected, got)
    assert got_out is compiled_set
    assert compiled_set == eager_set == {"b", 3, helper_a}


def returns_itself(x, s):
    return x + 1, s


def test_unchanged_input_set_returned_as_itself():
    kiln.reset()
    compiled = kiln.compile(returns_itself, backend="eager", fullgraph=True)
    s = {1, 2}
    assert compiled(torch.zeros(1), s)[1] is s


def text_and_order(x, s):
    return x + 1, str(s), list(s), [i for i in s], str(s.copy()), list(s | {"zz"})


def test_an_input_set_is_read_in_its_own_order():
    s = set()
    for word in ("gallahad", "lancelot", "robin", "arthur", "bedevere"):
        s.update(word)  # (a history whose order a copy need not keep)
    run_and_compare(text_and_order, torch.ones(2), s, fullgraph=True)


def adds_and_discards(x, s):
    s.discard("b")
    s.add("q")
    s.add("r")
    return x + 1


def test_written_back_set_keeps_its_items_in_place():
    eager_set, compiled_set = set("abcdefg"), set("abcdefg")
    adds_and_discards(torch.ones(1), eager_set)
    kiln.reset()
    kiln.compile(adds_and_discards, backend="eager", fullgraph=True)(torch.ones(1), compiled_set)
    assert list(compiled_set) == list(eager_set)


def pops(x, s):
    return x + 1, s.pop()


def test_pop_of_an_input_set_breaks():
    kiln.reset()
    compiled = kiln.compile(pops, backend="eager")
    eager_set, compiled_set = set(range(40)), set(range(40))
    for s in (eager_set, compiled_set):
        s.pop()  # (the next pop continues after this one)
        s.add(0)
    assert pops(torch.ones(1), eager_set)[1] == compiled(torch.ones(1), compiled_set)[1]
    assert eager_set == compiled_set


def adds_many(x, s):
    s.discard("a")
    for word in ("kiwi", "fig", "plum", "pear", "lime", "date", "sloe", "yuzu", "nut", "pea"):
        s.add(word)
    s.update(["rye", "oat"])
    return x + 1


def test_written_back_set_adds_its_items_in_the_order_the_frame_added_them():
    # (where two items collide in the set's table, the order they went in decides its order)
    eager_set, compiled_set = set("abcdefg"), set("abcdefg")
    adds_many(torch.ones(1), eager_set)
    kiln.reset()
    kiln.compile(adds_many, backend="eager", fullgraph=True)(torch.ones(1), compiled_set)
    assert list(compiled_set) == list(eager_set)


def sums_items(x, s):
    z = torch.zeros(1)
    for item in s:
        z += item
    return x + z


def test_iterating_a_set_of_tensors_breaks_naming_the_cause():
    kiln.reset()
    tensors = {torch.ones(1), torch.tensor([2.0]), torch.zeros(1)}
    with pytest.raises(kiln.exc.Unsupported, match="set holding tensors or objects"):
        kiln.compile(sums_items, fullgraph=True)(torch.ones(1), tensors)
    kiln.reset()
    expected = sums_items(torch.ones(1), tensors)
    assert torch.equal(kiln.compile(sums_items)(torch.ones(1), tensors), expected)
    assert kiln.counters["stats"]["graph_breaks"] >= 1  # (the loop runs in Python)


def updates_from_a_list(x, s):
    s.update([147, 114])  # added in the list's order (not that of a set built from it)
    return x + len(s)


def test_update_from_a_list_adds_in_the_lists_order():
    # (147 then 114 and 114 then 147 leave this set in different orders: they probe into the
    # same slots; a set built from the list iterates them the other way round)
    eager_set, compiled_set = {24, 77, 73, 15, 50, 11}, {24, 77, 73, 15, 50, 11}
    updates_from_a_list(torch.ones(1), eager_set)
    kiln.reset()
    compiled = kiln.compile(updates_from_a_list, backend="eager", fullgraph=True)
    compiled(torch.ones(1), compiled_set)
    assert list(compiled_set) == list(eager_set)


def union_with_a_list(x, s):
    return x + 1, list(s.union([147, 114]))


def test_union_with_a_list_orders_as_eager():
    run_and_compare(union_with_a_list, torch.ones(1), {24, 77, 73, 15, 50, 11}, fullgraph=True)
