"""Unbound locals raise in the traced code as in eager: the `except ... as e` name after its
handler (Python deletes it), `del x` then a read, a never-assigned branch local, a free
variable of a nested function not yet bound (NameError); caught without a graph break."""

import torch
from frontend_helpers import run_and_compare


def except_name_after_handler(x):
    e = 5
    try:
        raise ValueError("a")
    except ValueError as e:  # noqa: F841
        y = x + 1
    try:
        return e  # noqa: F821
    except NameError as err:
        return y, str(err), type(err).__name__


def except_name_uncaught(x):
    try:
        raise ValueError("a")
    except ValueError as e:  # noqa: F841
        y = x + 1
    return y, e  # noqa: F821


def deleted_then_read(x):
    y = x * 2
    del y
    try:
        return y  # noqa: F821
    except UnboundLocalError as err:
        return x - 1, str(err)


def branch_local(x, flag):
    if flag:
        z = x + 1
    try:
        return z
    except UnboundLocalError as err:
        return x + 2, str(err)


def free_variable(x):
    def inner():
        return v + 1

    try:
        out = inner()
    except NameError as err:
        out = str(err)
    v = x  # noqa: F841
    return x * 3, out


def test_except_name_deleted_after_handler():
    run_and_compare(except_name_after_handler, torch.randn(2), expected_graphs=1, expected_breaks=0)


def test_except_name_read_uncaught_raises():
    run_and_compare(except_name_uncaught, torch.randn(2))  # UnboundLocalError, as eager


def test_deleted_local():
    run_and_compare(deleted_then_read, torch.randn(2), expected_graphs=1, expected_breaks=0)


def test_never_assigned_local():
    run_and_compare(branch_local, torch.randn(2), False, expected_graphs=1, expected_breaks=0)


def test_unbound_free_variable():
    run_and_compare(free_variable, torch.randn(2), expected_graphs=1, expected_breaks=0)
