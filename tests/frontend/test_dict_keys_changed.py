"""A dict that loses and gains a key while it is iterated (Note [Dicts: keys changed while
iterated]): Python's iterator raises; kiln does not model it and lets Python run it."""

import collections

import pytest
import torch

from tests.frontend.frontend_helpers import run_and_compare


def delete_and_add_while_iterating(x, d):
    for k in d:
        del d[k]
        d[k] = 0
    return x + 1


class Catch:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.caught = kind
        return kind is RuntimeError


def caught_by_a_manager(x):
    d = {0: 0}
    cm = Catch()
    with cm:
        for _ in d:
            d.pop(0)
            d[1] = 1
    return x + 1, cm.caught, d


def ordered_move_while_iterating(x):
    d = collections.OrderedDict(a=1, b=2)
    try:
        for k in d:
            d.move_to_end(k)
    except RuntimeError as e:
        return x + 1, str(e)
    return x, "none"


@pytest.mark.parametrize(
    "fn,args",
    [
        (delete_and_add_while_iterating, ({0: 0},)),
        (caught_by_a_manager, ()),
        (ordered_move_while_iterating, ()),
    ],
)
def test_keys_changed_while_iterated_raises_as_eager(fn, args):
    run_and_compare(fn, torch.ones(2), *args)


def overwrite_values_while_iterating(x, d):
    for k in d:
        d[k] = d[k] + 1  # (a value store keeps the keys: Python's iterator goes on)
    return x * 2, d


def test_value_stores_while_iterating_stay_compiled():
    run_and_compare(
        overwrite_values_while_iterating, torch.ones(2), {0: 1, 1: 2}, expected_breaks=0
    )
