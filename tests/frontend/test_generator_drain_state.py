"""A suspended generator whose frame holds a list, dict, object or an iterator it was given is
not drained at a break (Note [Generators: a drained rest reads only its own state]): the code
after the break may change what its rest reads."""

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


class Box:
    def __init__(self, v):
        self.v = v


def _reads(box, d, lst):
    yield 0
    yield box.v
    yield d["k"]
    yield lst[0]


def write_what_the_rest_reads(x, box, d, lst):
    gen = _reads(box, d, lst)
    next(gen)
    kiln.graph_break()
    box.v, d["k"], lst[0] = 5, 6, 7
    return x + 1, list(gen)


def test_an_object_dict_and_list_the_rest_reads_are_read_when_asked():
    run_and_compare(write_what_the_rest_reads, torch.ones(2), Box(1), {"k": 2}, [3])
    reasons = list(kiln.counters["graph_break"])
    assert any("frame holds a list, dict, object" in r for r in reasons), reasons


def store_into_the_list_a_genexpr_walks(x):
    lst = [x, x + 1, x + 2]
    doubled = (v * 2 for v in lst)
    next(doubled)
    kiln.graph_break()
    lst[2] = x * 100
    lst.append(x)
    return list(doubled)


def test_a_generator_expression_sees_the_list_as_it_is_when_asked():
    run_and_compare(store_into_the_list_a_genexpr_walks, torch.arange(3.0))


def share_an_iterator(x, iterator_first):
    it = iter([x, x + 1, x + 2])
    doubled = (v * 2 for v in it)  # steps `it`: they share its items
    next(doubled)
    kiln.graph_break()
    if iterator_first:
        return list(it), list(doubled)
    return list(doubled), list(it)


@pytest.mark.parametrize("iterator_first", [True, False])
def test_an_iterator_shared_with_a_generator_expression(iterator_first):
    run_and_compare(share_an_iterator, torch.arange(3.0), iterator_first)


def _own_loop(t):
    for k in (1, 2, 3):  # an iterator its own body made, over constants
        yield t * k


def own_iterator_after_a_write(t):
    gen = _own_loop(t)
    next(gen)
    kiln.graph_break()
    t.add_(1)
    return list(gen)


def test_a_generator_over_its_own_iterator_is_still_rebuilt():
    run_and_compare(own_iterator_after_a_write, torch.ones(2))
    reasons = list(kiln.counters["graph_break"])
    assert not any("rebuilding" in r for r in reasons), reasons


def _reads_grad(p):
    yield 0
    yield p.grad


def return_it_before_backward(p):
    gen = _reads_grad(p)
    next(gen)
    return gen


def test_a_grad_read_by_the_rest_is_read_when_asked():
    p = torch.ones(2, requires_grad=True)
    gen = kiln.compile(return_it_before_backward, backend="eager")(p)
    (p * 3).sum().backward()  # sets p.grad after the frame returned, before the item is asked
    assert torch.equal(list(gen)[0], torch.full((2,), 3.0))


def _calls(f):
    yield 0
    yield f()


def bound_method_reads_after_a_write(x, box):
    gen = _calls(box.get)  # the rest reads box.v through the method
    next(gen)
    kiln.graph_break()
    box.v = 9
    return x + 1, list(gen)


class Getter(Box):
    def get(self):
        return self.v


def test_a_bound_method_the_rest_calls_reads_its_object_when_asked():
    compiled = kiln.compile(bound_method_reads_after_a_write, backend="eager")
    for _ in range(2):  # (a fresh object per call: the function writes it)
        _, items = compiled(torch.ones(1), Getter(1))
        assert items == [9] == bound_method_reads_after_a_write(torch.ones(1), Getter(1))[1]
