"""A frame kiln runs in Python calls its user callees as kiln-compiled frames (Note [Frames:
callees of a frame run in Python]): functions, methods, modules, closures made per call, calls
with keywords, *args and a `with` block's exit, each compared with eager."""

import contextlib
import sys

import torch
from frontend_helpers import CountingBackend, assert_same, run_and_compare

import kiln
from kiln.frontend.call_through import routable


@contextlib.contextmanager
def breaks_before_yield():
    """A context manager kiln cannot rebuild once entered: the frame using it runs in Python."""
    kiln.graph_break()
    yield


def ops_of(backend):
    return [
        [str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
        for gm in backend.graphs
    ]


def helper(x, scale=2.0):
    return x.cos() * scale


def skipped_calls_helper(x):
    with breaks_before_yield():
        y = x.sin()
    return helper(y) + 1


def test_callee_of_a_frame_run_in_python_is_compiled():
    backend = CountingBackend()
    run_and_compare(skipped_calls_helper, torch.randn(4), backend=backend)
    assert kiln.counters["unimplemented"], dict(kiln.counters)  # the caller ran in Python
    assert any("cos" in " ".join(ops) for ops in ops_of(backend)), ops_of(backend)
    assert backend.calls == 1  # one compile of helper, a cache hit on the second call


def test_switched_off_the_callees_run_eagerly(monkeypatch):
    monkeypatch.setattr(kiln.config, "route_calls_of_eager_frames", False)
    backend = CountingBackend()
    run_and_compare(skipped_calls_helper, torch.randn(4), backend=backend)
    assert backend.calls == 0


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()

    def double(self, x, *, by=2):
        return x * by


def test_methods_modules_keywords_and_star_args():
    block = Block()

    def fn(x, args):
        with breaks_before_yield():
            x = x + 1
        a = block(x)  # a module: its forward compiled
        b = block.double(x, by=3)  # a method, with a keyword
        c = helper(*args)  # *args
        return a + b + c

    backend = CountingBackend()
    run_and_compare(fn, torch.randn(2, 4), (torch.randn(2, 4), 0.5), backend=backend)
    ops = " ".join(" ".join(o) for o in ops_of(backend))
    assert "linear" in ops and "relu" in ops and "mul" in ops and "cos" in ops, ops_of(backend)


def test_module_hooks_still_run_around_the_forward():
    block = Block()
    seen = []
    handle = block.register_forward_hook(lambda m, i, o: seen.append(o.shape))

    def fn(x):
        with breaks_before_yield():
            x = x * 2
        return block(x)

    try:
        x = torch.randn(3, 4)
        expected = fn(x)
        got = kiln.compile(fn, backend="eager")(x)
        assert_same(expected, got)
        assert seen == [torch.Size([3, 4])] * 2  # eager once, compiled once
    finally:
        handle.remove()


def test_functions_made_per_call_compile_once():
    def fn(x):
        with breaks_before_yield():
            y = x.sin()

        def inner(a):
            return a * y

        return inner(x)

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    for _ in range(4):
        x = torch.randn(3)
        assert_same(fn(x), compiled(x))
    assert backend.calls == 1  # inner's code, compiled once for every new function object


def test_exceptions_and_with_blocks_behave_as_in_python():
    class Exit:
        def __init__(self, log):
            self.log = log

        def __enter__(self):
            self.log.append("enter")
            return self

        def __exit__(self, *exc):
            self.log.append(("exit", exc[0]))
            return True  # swallows the error

    def raises(x):
        raise ValueError(x.shape[0])

    def fn(x, log):
        with breaks_before_yield():
            x = x + 1
        with Exit(log):
            raises(x)
        try:
            raises(x)
        except ValueError as e:
            log.append(str(e))
        return x

    run_and_compare(fn, torch.randn(2), [])


def test_what_is_routed():
    assert routable(helper)
    assert not routable(contextlib.nullcontext.__init__)  # the standard library
    assert not routable(torch.nn.functional.relu)  # torch
    assert not routable(breaks_before_yield.__wrapped__)  # a generator function
    assert not routable(kiln.compile(helper))  # already compiled
    assert not routable(len)


def test_a_frame_over_the_cache_limit_still_routes(monkeypatch):
    monkeypatch.setattr(kiln.config, "cache_size_limit", 1)

    def fn(x, n):
        return helper(x) + n

    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend)
    compiled(torch.randn(2), 0)  # helper inlined into fn's graph
    for n in (0.5, 1.5, 2.5):  # a float: fn's guard fails, the limit is hit
        x = torch.randn(2)
        assert_same(fn(x, n), compiled(x, n))
    assert kiln.counters["frames"]["cache_limit_hit"] == 1
    assert ops_of(backend)[1:] == [["cos", "<built-in function mul>"]], ops_of(backend)


class Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


def test_objects_with_a_python_call_are_routed():
    scale = Scaler(3.0)

    def fn(x):
        with breaks_before_yield():
            x = x + 1
        return scale(x)

    backend = CountingBackend()
    run_and_compare(fn, torch.randn(3), backend=backend)
    assert ops_of(backend) == [["<built-in function mul>"]], ops_of(backend)


def test_a_generator_frame_run_in_python_runs_as_written():
    def gen(x):
        with breaks_before_yield():
            x = x + 1
        yield helper(x)
        yield helper(x + 1)

    def fn(x):
        return list(kiln.compile(gen, backend="eager")(x))

    x = torch.randn(3)
    assert_same([helper(x + 1), helper(x + 2)], fn(x))


def lowest_limit_then_builtin(x):
    with breaks_before_yield():
        x = x + 1
    old = sys.getrecursionlimit()
    depth = 1
    while True:  # the smallest limit Python accepts here: no room for one more frame
        try:
            sys.setrecursionlimit(depth)
        except RecursionError:
            depth += 1
        else:
            break
    sys.setrecursionlimit(old)  # a builtin, called with the frame at the limit
    return x * 2, depth > 1


def test_a_builtin_called_at_the_recursion_limit():
    """Routing a builtin adds no frame (Note [Frames: routing near the recursion limit])."""
    limit = sys.getrecursionlimit()
    try:
        run_and_compare(lowest_limit_then_builtin, torch.randn(3))
    finally:
        sys.setrecursionlimit(limit)
    assert kiln.counters["unimplemented"], dict(kiln.counters)  # the frame ran in Python
