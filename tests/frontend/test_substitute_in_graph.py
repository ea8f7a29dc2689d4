"""kiln.substitute_in_graph: traced code calling a C function traces its registered Python
substitute (Note [Substitutes: Python stand-ins for C functions]); results equal eager's."""

import bisect

import pytest
import torch
from frontend_helpers import CountingBackend

import kiln


def scaled_by_rank(x, edges):
    return x * bisect.bisect_right(edges, 2.5) + 1


def test_c_function_breaks_until_substituted():
    x, edges = torch.randn(4), [1.0, 2.0, 3.0]
    kiln.reset()
    be = CountingBackend()
    torch.testing.assert_close(
        kiln.compile(scaled_by_rank, backend=be)(x, edges), scaled_by_rank(x, edges)
    )
    assert kiln.counters["stats"]["graph_breaks"] == 1  # bisect_right is C: not traceable

    @kiln.substitute_in_graph(bisect.bisect_right)
    def bisect_right(a, x, lo=0, hi=None, *, key=None):
        hi = len(a) if hi is None else hi
        while lo < hi:
            mid = (lo + hi) // 2
            if x < (a[mid] if key is None else key(a[mid])):
                hi = mid
            else:
                lo = mid + 1
        return lo

    try:
        kiln.reset()
        be = CountingBackend()
        f = kiln.compile(scaled_by_rank, backend=be, fullgraph=True)
        for edges in ([1.0, 2.0, 3.0], [3.0, 4.0], [0.0, 1.0, 2.0, 2.4]):
            torch.testing.assert_close(f(x, edges), scaled_by_rank(x, edges))
        assert kiln.counters["stats"]["graph_breaks"] == 0
        assert bisect.bisect_right([1, 2], 1) == 1  # eager calls still run the C function
    finally:
        kiln.frontend.substitutes._SUBSTITUTES.clear()


def test_signature_and_argument_checks():
    with pytest.raises(TypeError, match="Signature mismatch"):

        @kiln.substitute_in_graph(bisect.bisect_left)
        def wrong(seq, x):
            return 0

    with pytest.raises(TypeError, match="written in C"):
        kiln.substitute_in_graph(scaled_by_rank)
    assert kiln.frontend.substitutes.substitute_of(bisect.bisect_left) is None


def test_the_value_stays_the_c_function_and_bad_calls_break():
    import operator

    @kiln.substitute_in_graph(operator.indexOf)
    def index_of(a, b):
        for i, item in enumerate(a):
            if item is b or item == b:
                return i
        raise ValueError("sequence.index(x): x not in sequence")

    def f(x):
        fn = operator.indexOf
        return x * fn([5, 6, 7], 7), fn, fn is operator.indexOf

    def g(x):
        try:
            operator.indexOf(a=[1], b=1)  # positional-only in C: TypeError in eager
        except TypeError:
            return x - 1
        return x + 1

    try:
        x = torch.randn(3)
        out, fn, same = kiln.compile(f, backend="eager")(x)
        torch.testing.assert_close(out, x * 2)
        assert fn is operator.indexOf and same is True
        torch.testing.assert_close(kiln.compile(g, backend="eager")(x), g(x))
    finally:
        kiln.frontend.substitutes._SUBSTITUTES.clear()
