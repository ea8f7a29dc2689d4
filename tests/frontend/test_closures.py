"""Functions made in the frame that close over cells (Note [Functions: rebuilt closures])."""

import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare

X = torch.randn(4, 3)


def _check_returned(make, *args, expected_graphs=1, fullgraph=True):
    """`make(*args)` returns a function; compiled and eager ones give the same results."""
    kiln.reset()
    f = kiln.compile(make, backend="eager", fullgraph=fullgraph)
    for _ in range(2):
        got, want = f(*args), make(*args)
        assert got.__code__ is want.__code__
        torch.testing.assert_close(got(X), want(X))
    assert kiln.counters["stats"]["unique_graphs"] == expected_graphs


def test_returned_closure_over_root_cell():
    def make(x):
        a = x + 1

        def inner(z):
            return z + a

        return inner

    _check_returned(make, X)


def test_returned_closure_over_inlined_cells():
    def counter_factory(x):
        total = x * 2

        def add(z):
            return z + total

        return add

    def make(x):
        return counter_factory(x + 1)

    _check_returned(make, X)


def test_shared_inlined_cell_stays_shared():
    def pair(x):
        n = [x]

        def get():
            return n[0]

        def put(v):
            n[0] = v

        return get, put

    def make(x):
        return pair(x * 3)

    kiln.reset()
    get, put = kiln.compile(make, backend="eager", fullgraph=True)(X)
    get_e, put_e = make(X)
    assert get.__closure__[0] is put.__closure__[0]
    put(X - 1)
    put_e(X - 1)
    torch.testing.assert_close(get(), get_e())


def test_nonlocal_write_through_returned_closure():
    def make(x):
        count = 0

        def bump(z):
            nonlocal count
            count += 1
            return z * count

        bump(x)
        return bump

    kiln.reset()
    f = kiln.compile(make, backend="eager", fullgraph=True)
    bump, bump_e = f(X), make(X)
    for _ in range(3):
        torch.testing.assert_close(bump(X), bump_e(X))


def test_recursive_closure_rebuilt():
    def make(x):
        def fact(n):
            return 1 if n <= 1 else n * fact(n - 1)

        y = x * fact(4)
        return fact, y

    kiln.reset()
    (fact, y), (fact_e, y_e) = kiln.compile(make, backend="eager", fullgraph=True)(X), make(X)
    torch.testing.assert_close(y, y_e)
    assert fact(5) == fact_e(5) == 120
    assert fact.__closure__[0].cell_contents is fact  # its own cell holds the rebuilt function


def test_recursion_through_closures_in_graph():
    def fn(x):
        def down(t, n):
            return t if n == 0 else up(t * 2, n - 1)

        def up(t, n):
            return t if n == 0 else down(t + 1, n - 1)

        return down(x, 5)

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)


def test_same_function_returned_twice_is_one_object():
    def make(x):
        def f(z):
            return z + x

        return f, f

    kiln.reset()
    f1, f2 = kiln.compile(make, backend="eager", fullgraph=True)(X)
    assert f1 is f2


def test_closure_over_frame_free_variable():
    scale = torch.tensor(2.0)

    def fn(x):
        def inner(z):
            return z * scale

        return inner(x), inner

    kiln.reset()
    out, inner = kiln.compile(fn, backend="eager", fullgraph=True)(X)
    torch.testing.assert_close(out, X * scale)
    torch.testing.assert_close(inner(X), X * scale)


def test_closure_after_graph_break():
    def fn(x):
        a = x + 1

        def inner(z):
            return z * a

        kiln.graph_break()
        return inner(x) + 1, inner

    kiln.reset()
    f = kiln.compile(fn, backend="eager")
    (out, inner), (out_e, inner_e) = f(X), fn(X)
    torch.testing.assert_close(out, out_e)
    torch.testing.assert_close(inner(X), inner_e(X))


def test_unassigned_cell_raises_as_python():
    def make(x):
        def inner():
            return later

        if x.dim() > 5:
            later = x
        return inner

    kiln.reset()
    inner = kiln.compile(make, backend="eager", fullgraph=True)(X)
    try:
        inner()
    except NameError as e:
        assert "later" in str(e)
    else:
        raise AssertionError("NameError expected")


def test_import_inside_function():
    def fn(x):
        import math
        from math import sqrt

        import torch.nn.functional as F

        return F.relu(x) + math.pi + sqrt(2)

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)


def test_user_module_imported_inside_function_is_read_as_eager_reads_it():
    def from_import(x):
        from tests.frontend.import_target import FLAG, SCALE

        return x * SCALE if FLAG else x - SCALE

    def module_import(x):
        import tests.frontend.import_target as target

        return x * target.SCALE if target.FLAG else x - target.SCALE

    import tests.frontend.import_target as target

    for fn in (from_import, module_import):
        kiln.reset()
        compiled = kiln.compile(fn, backend="eager", fullgraph=True)
        scale, flag = target.SCALE, target.FLAG
        try:
            for new_scale, new_flag in ((scale, flag), (torch.ones(3), flag), (scale, False)):
                target.SCALE, target.FLAG = new_scale, new_flag
                torch.testing.assert_close(compiled(X), fn(X))
        finally:
            target.SCALE, target.FLAG = scale, flag


def test_closure_over_inlined_function_free_variable():
    def outer(v1):
        def fn2(v2):
            def fn3(v3):
                return v1 + v2 + v3

            return fn3

        return fn2

    fn2 = outer(torch.ones(3))

    def fn(x):
        f3 = fn2(x * 2)
        return f3(x), f3

    kiln.reset()
    (out, f3), (out_e, f3_e) = kiln.compile(fn, backend="eager", fullgraph=True)(X[0]), fn(X[0])
    torch.testing.assert_close(out, out_e)
    torch.testing.assert_close(f3(X[0]), f3_e(X[0]))


def test_function_name_set_in_frame():
    def fn(x):
        def parse(v):
            return v * 2

        parse.__name__ = "my_parse"
        parse.__qualname__ = "outer.my_parse"
        return parse(x), parse, parse.__name__

    kiln.reset()
    (out, parse, name) = kiln.compile(fn, backend="eager", fullgraph=True)(X)
    torch.testing.assert_close(out, X * 2)
    assert name == parse.__name__ == "my_parse" and parse.__qualname__ == "outer.my_parse"
    torch.testing.assert_close(parse(X), X * 2)
