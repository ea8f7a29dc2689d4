"""Tuple iterators reaching a frame from outside (Note [Iterators: inputs]): traced over their
remaining items, guarded on them, and advanced after the graph by what the trace took."""

import torch
from frontend_helpers import run_and_compare

import kiln


def take_two(it, x):
    a = next(it)
    b = next(it)
    return x * a + b


def test_next_advances_the_callers_iterator():
    calls = []
    for _ in range(2):
        it_eager, it_compiled = iter((2.0, 3.0, 4.0)), iter((2.0, 3.0, 4.0))
        x = torch.ones(3)
        kiln.reset()
        compiled = kiln.compile(take_two, fullgraph=True)
        torch.testing.assert_close(compiled(x=x, it=it_compiled), take_two(it_eager, x))
        assert list(it_compiled) == list(it_eager) == [4.0]
        calls.append(kiln.counters["stats"]["unique_graphs"])
    assert calls == [1, 1]


def test_guards_on_the_items_left():
    kiln.reset()
    compiled = kiln.compile(take_two)
    x = torch.ones(2)
    for items in ((1.0, 2.0, 9.0), (1.0, 2.0), (5.0, 6.0, 7.0)):
        eager_it, compiled_it = iter(items), iter(items)
        torch.testing.assert_close(compiled(compiled_it, x), take_two(eager_it, x))
        assert list(compiled_it) == list(eager_it)
    partly_used = iter((7.0, 1.0, 2.0))
    next(partly_used)  # the guard reads the items left, not the tuple's
    torch.testing.assert_close(compiled(partly_used, x), x * 1.0 + 2.0)


def test_exhausted_iterator_raises_stop_iteration():
    it = iter((1.0,))
    next(it)
    run_and_compare(take_two, it, torch.ones(2))


def sequential_glue(x, seq):
    # Sequential.forward iterates a snapshot of its modules; a break at a block leaves the
    # rest of the loop to a resume function that receives `iter((remaining modules))`
    for m in seq:
        x = m(x)
        if isinstance(m, torch.nn.ReLU):
            print(end="")
    return x.sum()


def test_loop_resumed_after_a_break_stays_compiled():
    torch.manual_seed(0)
    seq = torch.nn.Sequential(
        torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4), torch.nn.Tanh()
    )
    run_and_compare(sequential_glue, torch.randn(2, 4), seq)
    # the resume functions trace the rest of the loop: no frame falls back to eager
    assert (
        kiln.counters["graph_break"].get(
            "iteration over UserDefinedObjectVariable(tuple_iterator)", 0
        )
        == 0
    )
    assert kiln.counters["stats"]["unique_graphs"] >= 2


def every_layer_breaks(x, seq):
    for m in seq:
        x = m(x)
        print(end="")  # a break in every iteration
    return x


def test_a_break_per_layer_does_not_recompile_per_layer():
    # only the items a trace takes are guarded: twelve layers (more than the cache limit) share
    # the resume function's two entries (an item left, none left)
    torch.manual_seed(0)
    seq = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(12)])
    x = torch.randn(2, 4)
    kiln.reset()
    compiled = kiln.compile(every_layer_breaks)
    for _ in range(2):
        torch.testing.assert_close(compiled(x, seq), every_layer_breaks(x, seq))
    assert kiln.counters["stats"]["recompiles"] == 1
    assert kiln.counters["frames"]["ok"] == kiln.counters["frames"]["total"]
    assert kiln.counters["stats"]["unique_graphs"] <= 3


class _ShoutingTuple(tuple):
    """A tuple whose subscript is overridden: iterating it still yields the tuple's own items."""

    def __getitem__(self, key):
        return f"{key}!"


def test_iterator_over_tuple_subclass_reads_tuple_items():
    def first(t, x):
        it = iter(t)  # breaks: T.__iter__ is C; the resume gets a tuple iterator as input
        return x + next(it)

    kiln.reset()
    compiled = kiln.compile(first)
    x = torch.ones(2)
    torch.testing.assert_close(
        compiled(_ShoutingTuple((1, 2)), x), first(_ShoutingTuple((1, 2)), x)
    )


def free_after_running_out(make):
    freed = []

    class Tracked(tuple):
        def __del__(self):
            freed.append(it is not None)  # reads the frame's cell: stored before the step

    it = None
    it = iter(make(Tracked))  # breaks (Tracked is made here; its __iter__ is C)
    try:
        next(it)  # the iterator runs out: Python's lets go of its tuple here
    except StopIteration:
        pass
    collected = list(freed)
    return collected


def test_tuple_iterator_that_runs_out_lets_go_of_its_tuple():
    def make(cls):
        return cls(())

    expected = free_after_running_out(make)
    assert expected == [True]
    for _ in range(2):
        assert kiln.compile(free_after_running_out, backend="eager")(make) == expected


def drain(it, x):
    for item in it:
        x = x + item
    return x


def test_iterator_run_out_by_the_graph_is_run_out_after_it():
    # a tuple iterator that found its end holds no tuple any more: __reduce__ shows it
    kiln.reset()
    compiled = kiln.compile(drain)
    x = torch.ones(2)
    eager_it, compiled_it = iter((1.0, 2.0)), iter((1.0, 2.0))
    torch.testing.assert_close(compiled(compiled_it, x), drain(eager_it, x))
    assert compiled_it.__reduce__() == eager_it.__reduce__()
