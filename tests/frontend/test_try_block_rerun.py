"""Ops that may raise at run time inside a try block: compiled, and the frame runs again in Python
when its compiled code raises before any effect (Note [Blocks: ops inside try blocks])."""

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare


class BoxEmbeddings(torch.nn.Module):
    """LayoutLM's pattern: embedding lookups whose IndexError the handler rewords."""

    def __init__(self):
        super().__init__()
        self.x = torch.nn.Embedding(10, 4)
        self.y = torch.nn.Embedding(10, 4)

    def forward(self, h, bbox):
        h = h * 2
        try:
            left = self.x(bbox[:, 0])
            upper = self.y(bbox[:, 1])
        except IndexError as e:
            raise IndexError("The `bbox` coordinate values should be within 0-10 range.") from e
        return h + left + upper


def _boxes(high):
    return torch.tensor([[1, 2], [3, high]])


@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_lookups_in_try_are_compiled_and_the_handler_still_runs(backend):
    model = BoxEmbeddings()
    h = torch.randn(2, 4)
    run_and_compare(model, h, _boxes(4), backend=backend, expected_breaks=0, expected_frames=1)
    assert kiln.counters["frames"]["eager_reruns"] == 0
    compiled = run_and_compare(model, h, _boxes(40), backend=backend, expected_breaks=0)
    assert kiln.counters["frames"]["eager_reruns"] == 2  # (the handler's error, each call)
    assert "internal_errors" not in kiln.counters["frames"]
    torch.testing.assert_close(compiled(h, _boxes(4)), model(h, _boxes(4)))  # still compiled
    assert kiln.counters["frames"]["eager_reruns"] == 2


def swallowing_handler(x, i, seen):
    seen.append("before")  # a side effect before the op: not made twice by the rerun
    y = x + 1
    try:
        y = y + x[i]
    except IndexError:
        seen.append("handled")
        y = y * 0
    return y


def test_rerun_makes_side_effects_once():
    x = torch.arange(3.0)
    run_and_compare(swallowing_handler, x, torch.tensor([1]), [], expected_graphs=1)
    run_and_compare(swallowing_handler, x, torch.tensor([9]), [], expected_graphs=1)
    assert kiln.counters["frames"]["eager_reruns"] == 2


def writes_then_indexes(x, i):
    x.add_(1)  # the graph writes its input: it cannot run twice
    try:
        y = x[i] * 2
    except IndexError:
        y = x * 0
    return y


def test_graph_with_writes_breaks_at_the_try_block_instead():
    x = torch.arange(3.0)
    run_and_compare(writes_then_indexes, x, torch.tensor([1]), expected_breaks=1)
    run_and_compare(writes_then_indexes, x, torch.tensor([5]), expected_breaks=1)
    # (the resume function at the try block writes nothing: it is the one run again)
    assert kiln.counters["frames"]["eager_reruns"] == 2


def random_then_indexes(x, i):
    noise = torch.rand(3)
    try:
        y = x[i] + noise
    except IndexError:
        y = noise
    return y


@pytest.mark.parametrize("index", [[2], [3]])
def test_graph_drawing_random_numbers_reruns_with_the_same_draws(index):
    # the generator's state is put back before the rerun: eager's draws, and its state after
    kiln.reset()
    x, i = torch.arange(3.0), torch.tensor(index)
    compiled = kiln.compile(random_then_indexes, backend="eager")
    for _ in range(2):
        torch.manual_seed(0)
        expected, expected_next = random_then_indexes(x, i), torch.rand(2)
        torch.manual_seed(0)
        torch.testing.assert_close(compiled(x, i), expected)
        torch.testing.assert_close(torch.rand(2), expected_next)  # (drawn once, as eager)
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["frames"]["eager_reruns"] == (2 if index == [3] else 0)


def error_after_the_graph(x, i, table):
    try:
        y = x[i] + 1
    except IndexError:
        y = x
    kiln.graph_break()
    return y, table[1]  # (Python's own IndexError, after the graph ran)


def test_error_after_the_graph_ran_is_not_rerun():
    x = torch.zeros(2)
    run_and_compare(error_after_the_graph, x, torch.tensor([1]), [5, 6], expected_breaks=1)
    run_and_compare(error_after_the_graph, x, torch.tensor([1]), [5], expected_breaks=2)
    assert kiln.counters["frames"]["eager_reruns"] == 0


def handler_in_callee(x, i):
    try:
        return x[i]
    except IndexError:
        return x.sum()


def caller(x, i):
    return handler_in_callee(x * 2, i) + 1


def test_try_block_of_an_inlined_callee():
    x = torch.arange(4.0)
    run_and_compare(caller, x, torch.tensor([2]), expected_graphs=1, expected_breaks=0)
    run_and_compare(caller, x, torch.tensor([-9]), expected_graphs=1, expected_breaks=0)
    assert kiln.counters["frames"]["eager_reruns"] == 2


def test_out_of_range_index_on_the_first_call_is_the_users_error():
    emb = torch.nn.Embedding(5, 2)

    def f(i):
        return emb(i) * 2

    kiln.reset()
    compiled = kiln.compile(f, backend="kiln")
    with pytest.raises(IndexError):
        compiled(torch.tensor([7]))
    assert "internal_errors" not in kiln.counters["frames"]
    torch.testing.assert_close(compiled(torch.tensor([3])), f(torch.tensor([3])))
    assert kiln.counters["frames"]["ok"] == 1  # the frame stayed compiled


class DroppedLookup(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.emb = torch.nn.Embedding(6, 3)
        self.drop = torch.nn.Dropout(p)

    def forward(self, i):
        try:
            e = self.emb(i)
        except IndexError:
            e = torch.zeros(3)
        return self.drop(e * 2)


@pytest.mark.parametrize("p,training", [(0.5, False), (0.0, True)])
def test_dropout_that_draws_nothing_is_no_effect(p, training):
    model = DroppedLookup(p).train(training)
    for i in ([1], [9]):
        run_and_compare(model, torch.tensor(i), expected_graphs=1, expected_breaks=0)


def test_dropout_in_training_reruns_with_the_same_draws():
    kiln.reset()
    model = DroppedLookup(0.5).train()
    compiled = kiln.compile(model, backend="eager")
    for i in ([1], [9]):
        torch.manual_seed(0)
        expected = model(torch.tensor(i))
        torch.manual_seed(0)
        torch.testing.assert_close(compiled(torch.tensor(i)), expected)
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["frames"]["eager_reruns"] == 1


def user_generator_then_indexes(x, i, gen):
    noise = torch.rand(3, generator=gen)
    try:
        y = x[i] + noise
    except IndexError:
        y = noise
    return y


def test_draws_from_a_users_generator_stay_eagers():
    kiln.reset()
    compiled = kiln.compile(user_generator_then_indexes, backend="eager")
    x = torch.arange(3.0)
    for i in ([1], [7]):
        expected = user_generator_then_indexes(x, torch.tensor(i), torch.Generator().manual_seed(1))
        got = compiled(x, torch.tensor(i), torch.Generator().manual_seed(1))
        torch.testing.assert_close(got, expected)
    assert kiln.counters["stats"]["graph_breaks"] >= 1  # (a generator object: a break)
