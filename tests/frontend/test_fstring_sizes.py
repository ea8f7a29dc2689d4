"""An f-string of a dynamic size (test_misc part5 test_no_guard_for_unused_sym_node_fstring):
one whose text is dropped unseen adds no guard on the size; one that is used has eager's text."""

import torch
from frontend_helpers import assert_same

import kiln


def unused_text(x):
    f"{x.shape[0]}"  # noqa: B021 (a statement: the text is dropped)
    return x.sin()


def used_text(x):
    text = f"{x.shape[0]}"
    return x.sin(), text


def compiled_on_two_sizes(fn):
    kiln.reset()
    compiled = kiln.compile(fn, dynamic=True, fullgraph=True)
    for n in (10, 9):
        x = torch.randn(n, 3)
        assert_same(fn(x), compiled(x))
    return kiln.counters["stats"]


def test_dropped_text_of_a_dynamic_size_adds_no_guard_used_text_still_pins_it():
    stats = compiled_on_two_sizes(unused_text)
    assert stats["recompiles"] == 0, dict(stats)
    assert stats["unique_graphs"] == 1, dict(stats)
    stats = compiled_on_two_sizes(used_text)  # (the text pins the size: a recompile is right)
    assert stats["unique_graphs"] == 2, dict(stats)
