"""bool(obj) of a user object checks what __bool__ / __len__ returned, as Python does: a float
from __bool__, a float or a negative number from __len__ raise, with the attribute the method
set before returning left set."""

import torch
from frontend_helpers import run_and_compare


class Truth:
    def __init__(self, result, via_len=False):
        self.result = result
        self.asked = False
        if via_len:
            self.__class__ = ByLen

    def __bool__(self):
        self.asked = True
        return self.result


class ByLen:
    def __len__(self):
        self.asked = True
        return self.result


def branch(x, obj):
    if obj:
        return x + 1
    return x - 1


def test_bool_returning_a_bool():
    run_and_compare(branch, torch.randn(3), Truth(False), fullgraph=True)


def test_bool_returning_a_float_raises():
    run_and_compare(branch, torch.randn(3), Truth(1.5))


def test_len_results():
    for result in (0, 3, 2.0, -1):
        run_and_compare(branch, torch.randn(3), Truth(result, via_len=True))
