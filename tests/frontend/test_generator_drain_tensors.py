"""A suspended generator whose rest runs tensor code, rebuilt at a break or a return, runs
that code when its items are asked for, as eager does (Note [Generators: a drained rest
computes nothing]): later in-place writes and the grad mode then decide the items."""

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def _doubles_then_triples(t):
    yield t * 2
    yield t * 3


def write_between_the_break_and_the_next_item(t):
    gen = _doubles_then_triples(t)
    a = next(gen)
    kiln.graph_break()
    t.add_(1)  # eager's second item sees this write
    return a, next(gen)


def test_an_in_place_write_after_the_break_reaches_the_next_item():
    run_and_compare(write_between_the_break_and_the_next_item, torch.arange(3.0))


def next_item_under_no_grad(t):
    gen = _doubles_then_triples(t)
    a = next(gen)
    kiln.graph_break()
    with torch.no_grad():
        b = next(gen)
    return a.requires_grad, b.requires_grad, a.detach(), b


def test_the_next_item_is_computed_in_the_grad_mode_of_its_consumer():
    x = torch.arange(3.0, requires_grad=True)
    assert next_item_under_no_grad(x)[:2] == (True, False)
    run_and_compare(next_item_under_no_grad, x)


def _yields_inside_no_grad(t):
    with torch.no_grad():
        yield t * 2  # suspended here, eager stays in no_grad until the next step
    yield t * 3


def break_while_suspended_inside_no_grad(t):
    gen = _yields_inside_no_grad(t)
    a = next(gen)
    kiln.graph_break()
    b = t * 4
    c = next(gen)
    return a.requires_grad, b.requires_grad, c.requires_grad, torch.is_grad_enabled()


def test_a_generator_suspended_inside_no_grad_keeps_the_mode_across_a_break():
    x = torch.arange(3.0, requires_grad=True)
    assert break_while_suspended_inside_no_grad(x) == (False, False, True, True)
    run_and_compare(break_while_suspended_inside_no_grad, x)
    assert torch.is_grad_enabled()


def return_it_suspended(t):
    gen = _doubles_then_triples(t)
    return next(gen), gen


def test_a_returned_generator_computes_its_rest_when_asked():
    t = torch.arange(3.0)
    _, gen = kiln.compile(return_it_suspended, backend="eager", fullgraph=True)(t)
    t.add_(1)
    assert torch.equal(next(gen), torch.tensor([3.0, 6.0, 9.0]))  # (t after the write) * 3
    assert list(gen) == []


def _accumulates(t):
    acc = t * 1
    for k in range(3):
        acc = acc + k  # each item reads the one before it
        yield acc
    return acc.sum()


def returned_mid_way(t):
    gen = _accumulates(t)
    next(gen)
    return gen


def test_items_of_the_rest_that_read_each_other_are_computed_in_order():
    t = torch.ones(2)
    gen = kiln.compile(returned_mid_way, backend="eager", fullgraph=True)(t)
    want = returned_mid_way(t.clone())
    assert [x.tolist() for x in gen] == [x.tolist() for x in want] == [[2.0, 2.0], [4.0, 4.0]]


def test_a_generator_suspended_inside_no_grad_is_not_rebuilt():
    x = torch.arange(3.0, requires_grad=True)

    def returned_inside_no_grad(t):
        gen = _yields_inside_no_grad(t)
        return next(gen), gen

    with pytest.raises(kiln.exc.Unsupported, match="rebuilding a suspended generator"):
        kiln.compile(returned_inside_no_grad, backend="eager", fullgraph=True)(x)
    assert torch.is_grad_enabled()


def _three(t):
    yield t + 1
    yield t + 2
    yield t * 3


def two_generators_sharing_items(t, outer_first):
    inner = _three(t)
    outer = (v * 2 for v in inner)  # steps `inner`: they share its items
    next(outer)
    kiln.graph_break()
    if outer_first:
        return list(outer), list(inner)
    return list(inner), list(outer)


@pytest.mark.parametrize("outer_first", [True, False])
def test_generators_that_share_items_get_them_in_the_order_asked(outer_first):
    run_and_compare(two_generators_sharing_items, torch.arange(3.0), outer_first)
    reasons = list(kiln.counters["graph_break"])
    assert any("where draining one steps another" in r for r in reasons), reasons


def _mixed(t, u):
    yield 1
    yield u  # (a step that makes no op, only reads an input)
    yield u + 1
    yield 2
    yield u * 3


def mixed_items_after_a_write(t, u):
    gen = _mixed(t, u)
    a = next(gen)
    kiln.graph_break()
    u.add_(10)
    return a, list(gen)


def test_steps_with_and_without_ops_run_in_their_order():
    run_and_compare(mixed_items_after_a_write, torch.ones(1), torch.ones(2))


def _reads_a_value_of_the_graph(t):
    y = t * 2  # made in the frame's graph, read by the rest
    yield y
    yield (y * t).sum()


def returned_after_one_item(t):
    gen = _reads_a_value_of_the_graph(t)
    return next(gen).sum(), gen


def test_gradients_flow_through_items_computed_by_the_rebuilt_generator():
    t = torch.arange(3.0, requires_grad=True)
    compiled = kiln.compile(returned_after_one_item, backend="aot_eager", fullgraph=True)
    s, gen = compiled(t)
    (s + next(gen)).backward()
    want = torch.arange(3.0, requires_grad=True)
    s2, gen2 = returned_after_one_item(want)
    (s2 + next(gen2)).backward()
    assert torch.equal(t.grad, want.grad)


def _draws(t):
    for k in range(3):
        yield t.new_empty(2).uniform_() + k


def draw_between_items(t):
    gen = _draws(t)
    a = next(gen)
    kiln.graph_break()
    between = t.new_empty(1).uniform_()  # eager draws this before the rest's draws
    return a, between, list(gen)


def test_random_draws_of_the_rest_come_after_the_code_before_them():
    kiln.reset()
    t = torch.zeros(2)
    torch.manual_seed(0)
    want = draw_between_items(t)
    torch.manual_seed(0)
    got = kiln.compile(draw_between_items, backend="eager")(t)
    assert torch.equal(want[1], got[1])
    assert all(torch.equal(a, b) for a, b in zip(want[2], got[2], strict=True))
    reasons = list(kiln.counters["graph_break"])
    assert not any("rebuilding" in r for r in reasons), reasons
