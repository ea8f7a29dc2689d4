"""A graph break inside an inlined call that already changed a container in place: the change
is put back and the call runs in Python (Note [Side effects: containers put back at a break])."""

import collections

import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare


def helper(x, log, table, seen, queue):
    log.append(x.shape[0])
    table["calls"] = table.get("calls", 0) + 1
    seen.add(len(log))
    queue.appendleft("in")
    print("a break inside the callee")
    log.append("after")
    return x * 2


def caller(x, log, table, seen, queue):
    local = [1]
    local.append(2)
    y = helper(x + 1, log, table, seen, queue)
    local.append(3)
    return y + 1, local


def test_callee_mutations_before_its_break_happen_once():
    log, table, seen, queue = [], {}, set(), collections.deque(maxlen=3)
    run_and_compare(caller, torch.randn(3), log, table, seen, queue, calls=1)
    assert "unimplemented" not in kiln.counters  # (no frame fell back to running in Python)
    assert kiln.counters["stats"]["unique_graphs"] >= 3  # caller before, callee, caller after


def made_in_frame_then_broken(x):
    acc = []
    for i in range(3):
        acc.append(i)
        y = _append_then_break(acc, x)
    return y, acc


def _append_then_break(acc, x):
    acc.append("callee")
    kiln.graph_break()
    return x + len(acc)


def test_container_made_in_the_frame_is_put_back():
    kiln.reset()
    x = torch.randn(2)
    got = kiln.compile(made_in_frame_then_broken, backend="eager")(x)
    want = made_in_frame_then_broken(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] == [0, "callee", 1, "callee", 2, "callee"]
    assert "unimplemented" not in kiln.counters  # (each loop pass resumes compiled)
