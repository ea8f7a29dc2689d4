"""Plain Python functions for the bytecode round-trip tests (no torch; runs on 3.11-3.13)."""

import itertools

G = 10


def straight(a, b):
    c = a + b
    d = c * 2 - a
    return d // 3, d % 3, -d, not d


def loop_sum(n):
    s = 0
    for i in range(n):
        s += i
    return s


def while_loop(n):
    i = 0
    out = []
    while i < n:
        if i % 3 == 0:
            i += 1
            continue
        out.append(i)
        i += 1
    return out


def nested_loops(n):
    out = []
    for i in range(n):
        for j in range(n):
            if j > i:
                break
            if (i + j) % 2:
                continue
            out.append((i, j))
        else:
            out.append("never")
    return out


def loop_else(xs, target):
    for x in xs:
        if x == target:
            r = "found"
            break
    else:
        r = "missing"
    return r


def try_except(x):
    try:
        r = 10 // x
    except ZeroDivisionError:
        r = "zero"
    except (TypeError, ValueError) as e:
        r = type(e).__name__
    else:
        r = ("ok", r)
    finally:
        r = [r]
    return r


def try_finally_return(x):
    log = []
    try:
        if x:
            return "early"
        log.append(1)
    finally:
        log.append(2)
    return log


def raises(x):
    if x < 0:
        raise ValueError("negative")
    if x == 0:
        raise KeyError(x)
    return x


def reraise(x):
    try:
        raises(x)
    except ValueError:
        raise
    except KeyError as e:
        raise RuntimeError("wrapped") from e
    return "fine"


class CM:
    def __init__(self, log, name, swallow=False):
        self.log, self.name, self.swallow = log, name, swallow

    def __enter__(self):
        self.log.append(("enter", self.name))
        return self.name

    def __exit__(self, typ, val, tb):
        self.log.append(("exit", self.name, typ.__name__ if typ else None))
        return self.swallow


def with_block(x):
    log = []
    with CM(log, "a") as name:
        log.append(name)
        if x == 0:
            raise ValueError("inside")
    return log


def nested_with(x):
    log = []
    try:
        with CM(log, "outer", swallow=x == 2):
            with CM(log, "inner"):
                log.append(1 / x if x != 2 else "raise")
                if x == 2:
                    raise KeyError("k")
            log.append("after inner")
    except ZeroDivisionError:
        log.append("zde")
    return log


def gen(n):
    for i in range(n):
        got = yield i * 2
        if got:
            yield got
    return "done"


def use_gen(n):
    g = gen(n)
    out = [next(g)]
    out.append(g.send("x"))
    out.extend(g)
    return out


def yield_from(n):
    def inner():
        yield 1
        yield 2
        return 3

    r = yield from inner()
    yield r + n


def use_yield_from(n):
    return list(yield_from(n))


def comprehensions(n):
    a = [i * i for i in range(n) if i % 2]
    b = {i: str(i) for i in range(n)}
    c = {i % 3 for i in range(n)}
    d = sum(i for i in range(n))
    e = [[j for j in range(i)] for i in range(n)]
    return a, b, c, d, e


def closure(x):
    y = x + 1

    def inner(z):
        return x + y + z

    return inner(1), inner(2)


def nonlocal_counter(n):
    count = 0

    def bump():
        nonlocal count
        count += 1
        return count

    for _ in range(n):
        bump()
    return count


def cell_arg(a, b):
    def get():
        return a * b

    a = a + 1
    return get()


def star_args(*args, **kwargs):
    return len(args), sorted(kwargs.items())


def call_star(xs, kw):
    return star_args(*xs, **kw), star_args(1, *xs, k=2, **kw), max(*xs, 0)


def kwonly(a, /, b, *, c=3, d):
    return a, b, c, d


def call_kwonly(x):
    return kwonly(x, b=2, d=4), kwonly(x, x, c=x, d=x)


def lambdas(x):
    f = lambda a, b=2: a * b + x
    g = lambda *a, **k: (a, k)
    return f(3), f(3, 4), g(1, z=2), sorted([3, 1, 2], key=lambda v: -v)


def fstrings(x, y):
    return f"{x}-{y!r}-{x:>5}-{y!s:^7}-{x + 1:{y}}-{'lit'}"


def match_stmt(v):
    match v:
        case 0:
            return "zero"
        case [a, b]:
            return ("pair", a, b)
        case {"k": val}:
            return ("dict", val)
        case str() as s if len(s) > 2:
            return ("long str", s)
        case int(n) | float(n):
            return ("num", n)
        case _:
            return "other"


async def async_fn(x):
    return x + 1


def run_async(x):
    coro = async_fn(x)
    try:
        coro.send(None)
    except StopIteration as e:
        return e.value


def chained(a, b, c):
    return a < b < c, a == b != c, a <= b <= c >= a, 0 < a is not None


def walrus(xs):
    out = []
    if (n := len(xs)) > 2:
        out.append(n)
    while (x := xs.pop() if xs else None) is not None:
        out.append(x)
    return out, [y for v in range(4) if (y := v * v) > 1]


def unpacking(seq):
    a, *b, c = seq
    (d, e), f = (a, c), b
    x, y = y, x = 1, 2
    first, *_ = [*seq, *b]
    return a, b, c, d, e, f, x, y, first, {**{"a": 1}, "b": 2}


def use_global(x):
    global G
    old = G
    G = x
    r = G + old
    G = old
    return r


def slicing(xs):
    ys = xs[1:-1]
    xs2 = list(xs)
    xs2[::2] = [0] * len(xs2[::2])
    del xs2[0]
    return ys, xs[::-1], xs2, xs[1:], xs[:2]


def attributes(x):
    class O:
        pass

    o = O()
    o.a = x
    o.b = o.a * 2
    del o.a
    return hasattr(o, "a"), o.b, "abc".upper().lower()


def method_calls(xs):
    d = {}
    d.setdefault("k", []).append(xs)
    s = ",".join(str(v) for v in xs)
    return d, s.split(","), s.count(",")


class Base:
    def f(self):
        return "base"


class Derived(Base):
    def f(self):
        return "derived+" + super().f()


def use_super(x):
    return Derived().f() * x


def boolean_ops(a, b):
    return a and b, a or b, not a, (a or b) and not (a and b), a if b else b


def is_in(a, xs):
    return a in xs, a not in xs, a is None, a is not xs


def deep_try(x):
    out = []
    for i in range(3):
        try:
            try:
                if i == x:
                    raise ValueError(i)
                out.append(i)
            finally:
                out.append("f")
        except ValueError as e:
            out.append(("caught", e.args))
            continue
        out.append("tail")
    return out


def itertools_use(n):
    return list(itertools.islice(itertools.count(n), 3)), list(zip(range(n), "abc"))


def exc_groups(x):
    try:
        raise ExceptionGroup("g", [ValueError(x), KeyError(x)])
    except* ValueError as e:
        r = ("v", len(e.exceptions))
    except* KeyError:
        r2 = "k"  # noqa
    return r


def comp_cells(n):
    fs = [lambda: i for i in range(n)]
    return [f() for f in fs]


def comp_shadow(xs):
    # 3.12+: each comprehension saves and restores `x` (unbound here) around its loop
    a = [x for x in xs if x]
    b = [x * 2 for x in a]
    x = len(b)
    c = [x for x in range(x)]
    return a, b, c, x


def build_big():
    """big_consts with 300 distinct float constants and a loop jumping over them (EXTENDED_ARG)."""
    lines = ["def big(x):", "    s = 0.0", "    for i in range(x):"]
    lines.append("        if i % 2:")
    lines.append("            continue")
    for k in range(300):
        lines.append(f"        s += {k}.5 * (i + {k})")
    lines.append("    return s")
    ns = {}
    exec(compile("\n".join(lines), "<big>", "exec"), ns)
    return ns["big"]


def build_many_locals():
    """A function with 300 locals (STORE_FAST/LOAD_FAST need EXTENDED_ARG)."""
    lines = ["def many(x):"]
    for k in range(300):
        lines.append(f"    v{k} = x + {k}")
    lines.append("    return " + " + ".join(f"v{k}" for k in range(0, 300, 7)))
    ns = {}
    exec(compile("\n".join(lines), "<many>", "exec"), ns)
    return ns["many"]


# (function, list of argument tuples): every case runs original and round-tripped.
CASES = [
    (straight, [(1, 2), (5, -3), (0, 0)]),
    (loop_sum, [(0,), (10,)]),
    (while_loop, [(0,), (10,)]),
    (nested_loops, [(0,), (4,)]),
    (loop_else, [([1, 2, 3], 2), ([1, 2, 3], 5)]),
    (try_except, [(2,), (0,), ("s",), (None,)]),
    (try_finally_return, [(True,), (False,)]),
    (raises, [(-1,), (0,), (3,)]),
    (reraise, [(-1,), (0,), (3,)]),
    (with_block, [(0,), (1,)]),
    (nested_with, [(0,), (1,), (2,)]),
    (use_gen, [(3,)]),
    (gen, [(0,), (4,)]),
    (yield_from, [(5,)]),
    (async_fn, [(1,)]),
    (use_yield_from, [(5,)]),
    (comprehensions, [(0,), (6,)]),
    (comp_cells, [(0,), (3,)]),
    (comp_shadow, [([0, 1, 2],), ([],)]),
    (closure, [(1,), (5,)]),
    (nonlocal_counter, [(0,), (7,)]),
    (cell_arg, [(2, 3)]),
    (star_args, [(), (1, 2), ((1,),)]),
    (call_star, [([1, 2], {"z": 1}), ([], {})]),
    (kwonly, [(1, 2)]),
    (call_kwonly, [(1,), (7,)]),
    (lambdas, [(1,)]),
    (fstrings, [(1, 5), (123, 7)]),
    (match_stmt, [(0,), ([1, 2],), ({"k": 3},), ("abcd",), ("ab",), (2.5,), (None,)]),
    (run_async, [(1,)]),
    (chained, [(1, 2, 3), (2, 2, 1), (3, 2, 1)]),
    (walrus, [([1, 2, 3],), ([],)]),
    (unpacking, [([1, 2, 3, 4],), ((1, 2),), ([1],)]),
    (use_global, [(5,)]),
    (slicing, [([1, 2, 3, 4, 5],), ((1, 2, 3),)]),
    (attributes, [(3,)]),
    (method_calls, [([1, 2, 3],)]),
    (use_super, [(2,)]),
    (boolean_ops, [(0, 1), (1, 0), (2, 3), (0, 0)]),
    (is_in, [(1, [1, 2]), (None, [])]),
    (deep_try, [(0,), (1,), (5,)]),
    (itertools_use, [(3,)]),
    (exc_groups, [(1,)]),
    (build_big(), [(0,), (5,)]),
    (build_many_locals(), [(1,)]),
]
