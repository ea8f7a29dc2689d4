"""A module whose functions assign its own globals (for test_ctx_conformance)."""

import contextlib

counter = 0


def bump():
    global counter
    counter += 1
    return counter


@contextlib.contextmanager
def bumped(x):
    global counter
    counter += 1
    try:
        yield x * counter
    finally:
        counter += 10
