"""List iterators made while tracing: a list's iterator that has ended sees nothing appended to
the list afterwards (Note [Iterators: exhausted list iterators])."""

import gc
import weakref

import torch
from frontend_helpers import run_and_compare

import kiln


def loop_then_append(x):
    a = [1, 2, 3]
    ran_out, stepped = iter(a), iter(a)
    for _ in ran_out:
        next(stepped)  # at the end, but never told so
    a.append(9)
    return x + 1, list(ran_out), list(stepped)


def list_then_append(x):
    a = [1.0, 2.0]
    it = iter(a)
    first = list(it)
    a.append(3.0)
    return x * len(first), list(it)


def next_raises_then_append(x):
    a = [2.0]
    it = iter(a)
    next(it)
    ended = next(it, None)
    a.append(5.0)
    return x + 1, ended, next(it, "ended")


def ended_iterator_across_a_break(x):
    a = [1, 2]
    it = iter(a)
    for _ in it:
        pass
    print("break")  # the ended iterator is rebuilt for the code after the break
    a.append(7)
    return x + 1, list(it)


def test_a_loop_ends_the_iterator():
    run_and_compare(loop_then_append, torch.ones(2), fullgraph=True)


def test_list_of_the_iterator_ends_it():
    run_and_compare(list_then_append, torch.ones(2), fullgraph=True)


def test_stop_iteration_ends_it():
    run_and_compare(next_raises_then_append, torch.ones(2), fullgraph=True)


def test_ended_iterator_is_rebuilt_ended():
    run_and_compare(ended_iterator_across_a_break, torch.ones(2))


def take_two_after_a_break(it):
    print("break")
    return [next(it), next(it)]


def iterator_local_and_argument(x):
    it = iter([1, 2, 3, 4])
    taken = take_two_after_a_break(it)  # `it` is both a local and an argument at the break
    return x + 1, taken, list(it)


def test_iterator_rebuilt_once_for_a_local_and_an_argument():
    run_and_compare(iterator_local_and_argument, torch.ones(2))


class _Obj:
    def __init__(self, arg):
        self.arg = arg


def iterator_of_state_across_collect(d, objects):
    it = iter(d.valuerefs())  # (a list of the weak dict's items, read from its data)
    next(it)
    del objects[-1]
    gc.collect()  # the dead object's entry leaves the dict here
    return len(list(it)), len(d)


def _weak_dict():
    d = weakref.WeakValueDictionary()
    objects = [_Obj(i) for i in range(6)]
    for o in objects:
        d[o.arg] = o
    return d, objects


def test_iterator_over_values_read_from_state_is_rebuilt_before_the_break():
    # (rebuilt after gc.collect() it read the dict's entries again: KeyError for the dead one)
    expected = iterator_of_state_across_collect(*_weak_dict())
    kiln.reset()
    f = kiln.compile(iterator_of_state_across_collect)
    assert f(*_weak_dict()) == expected == (5, 5)
