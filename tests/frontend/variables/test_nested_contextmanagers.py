"""@contextlib.contextmanager over generator functions made in the compiled frame (its
functools.wraps included), compared with eager: values, closed-over cells, finally blocks."""

import contextlib

import torch
from frontend_helpers import run_and_compare


def test_a_contextmanager_defined_in_the_frame():
    def fn(x):
        log = []

        @contextlib.contextmanager
        def compute_sin(v):
            try:
                log.append("enter")
                yield v.sin()
            finally:
                log.append("exit")

        with compute_sin(x) as y:
            out = y.cos()
        return out, log

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_a_contextmanager_writing_the_cells_of_its_maker():
    def fn(x):
        z, k = 1, 2

        def create():
            @contextlib.contextmanager
            def ctx(v):
                nonlocal z, k
                try:
                    yield v.sin()
                finally:
                    k = z

            return ctx

        z = 100
        with create()(x) as y:
            out = y.cos()
        return out, z, k

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)


def test_the_wrapper_contextmanager_makes_reads_as_the_generator_function():
    def fn(x):
        def gen(v):
            """Doc of gen."""
            yield v + 1

        cm = contextlib.contextmanager(gen)
        with cm(x) as y:
            out = y * 2
        return out, cm.__name__, cm.__doc__, cm.__wrapped__ is gen, hasattr(cm, "missing")

    run_and_compare(fn, torch.randn(3), fullgraph=True, expected_breaks=0)
