"""zip and enumerate over tuples and strings (snapshots of their rows) show their own type and
are rebuilt at a break as real zip/enumerate objects (eager is the oracle)."""

import torch
from frontend_helpers import run_and_compare

import kiln


def zip_type_and_rows(x):
    z = zip((1, 2, 3), "abc")
    first = next(z)
    return x + 1, type(z).__name__, first, list(z)


def test_zip_over_tuples_is_a_zip():
    run_and_compare(zip_type_and_rows, torch.ones(2), fullgraph=True)


def enumerate_type_and_rows(x):
    e = enumerate("xyz", 5)
    first = next(e)
    return x + 1, type(e).__name__, first, list(e)


def test_enumerate_over_a_string_is_an_enumerate():
    run_and_compare(enumerate_type_and_rows, torch.ones(2), fullgraph=True)


def zip_rows_reused_across_a_break(x):
    # Python's zip hands out each row in the tuple it gave last once nothing holds that tuple
    ids = list(map(id, zip("abc", "def")))
    return x + 1, min(ids) == max(ids), len(ids)


def test_zip_left_at_a_break_is_a_real_zip():
    # (one call: the resume function is given the ids, which it specialises on)
    run_and_compare(zip_rows_reused_across_a_break, torch.ones(2), calls=1)


def iterators_kept_across_a_break(x):
    z = zip((10, 20, 30), "pqr")
    e = enumerate((x, x * 2, x * 3), 1)
    skipped = next(z), next(e)[0]
    kiln.graph_break()
    rows = [(n, s) for n, s in z]
    tail = [(i, t + 1) for i, t in e]
    return skipped, rows, tail, type(z).__name__, type(e).__name__


def test_zip_and_enumerate_resume_where_the_trace_left_them():
    run_and_compare(iterators_kept_across_a_break, torch.ones(2))


def exhausted_zip_at_a_break(x):
    z = zip((1,), (2,))
    rows = list(z)
    kiln.graph_break()
    return x + 1, rows, list(z), type(z).__name__


def test_an_exhausted_zip_stays_exhausted():
    run_and_compare(exhausted_zip_at_a_break, torch.ones(2))
