"""After a graph break, reading or deleting an unbound cell of the frame raises what eager raises."""

import torch
from frontend_helpers import run_and_compare


def _outcome(thunk):
    try:
        return ("ok", thunk())
    except UnboundLocalError as e:
        return ("UnboundLocalError", str(e))
    except NameError as e:
        return ("NameError", str(e))


def emptied_through_closure(x):
    a = 1

    def f():
        return a

    y = x * 2
    print("break")  # a graph break: what follows runs in a resume function
    del f.__closure__[0].cell_contents
    try:
        return y, a
    except UnboundLocalError as e:
        return y + 1, str(e)


def test_read_of_emptied_cell_after_break():
    run_and_compare(emptied_through_closure, torch.ones(3))


def read_inside_nested_try(x):
    b = x.sum()

    def g():
        return b

    print("break")
    g.__closure__[0].cell_contents = 5
    out = [g()]
    del g.__closure__[0].cell_contents
    try:
        try:
            out.append(b)
        finally:
            out.append("finally ran")
    except NameError as e:  # eager: an UnboundLocalError (a NameError)
        out.append((type(e).__name__, str(e)))
    for _ in range(2):  # still unbound in a loop, and rebound after
        try:
            out.append(b)
        except UnboundLocalError:
            out.append("unbound")
        b = 7
    out.append(g())
    return x + 1, out


def test_read_inside_try_finally_and_loop_after_break():
    run_and_compare(read_inside_nested_try, torch.ones(2))


def delete_of_emptied_cell(x):
    c = 3

    def h():
        return c  # noqa: F821 (c is deleted later in the frame)

    print("break")
    del h.__closure__[0].cell_contents
    try:
        del c
    except UnboundLocalError as e:
        return x - 1, str(e)
    return x, "deleted"


def test_delete_of_emptied_cell_after_break():
    run_and_compare(delete_of_emptied_cell, torch.ones(2))


def bound_cells_unchanged(x):
    k = 2

    def m():
        return k

    print("break")
    total = x
    for i in range(3):
        total = total + k * i
        k = k + 1
    return total, m()


def test_bound_cells_after_break_read_as_before():
    run_and_compare(bound_cells_unchanged, torch.ones(2))
