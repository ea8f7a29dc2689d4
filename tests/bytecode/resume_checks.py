"""Checks of kiln.frontend.resume on plain functions; needs neither torch nor pytest.

A "broken" copy of each function simulates the frontend at a graph break at instruction r: every
arrival at r stores the live stack into temporaries, builds the resume function (closure from
the frame's cells) and returns what it returns (ResumeFunction.emit_call). The stack layout and
the live locals at r come from kiln.bytecode.analysis (points with a maybe-NULL slot, a live but
maybe-unbound local, or only reachable through an exception handler are skipped). Results, raised
exceptions and side effects must equal the original's on every input.
"""

import types

from roundtrip_checks import GENERATOR_LIKE, HERE, bootstrap, load, outcome, with_code  # noqa: F401

bootstrap()

import kiln.bytecode as B  # noqa: E402
from kiln.bytecode import analysis as A  # noqa: E402
from kiln.frontend import resume as R  # noqa: E402

corpus = load("kiln_bytecode_corpus", HERE / "corpus_funcs.py")


class Reenter:
    """Stands for the context manager in a `with` slot: re-entering does nothing, exiting
    calls the original frame's __exit__ (so enter/exit each happen once, as in the original)."""

    def __init__(self, exit_fn):
        self.exit_fn = exit_fn

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return self.exit_fn(*exc)


def argnames(code):
    n = code.co_argcount + code.co_kwonlyargcount
    n += bool(code.co_flags & 4) + bool(code.co_flags & 8)
    return code.co_varnames[:n]


def with_slots(insts, states, r):
    """Stack positions at r that hold the __exit__ pushed by an active BEFORE_WITH."""
    return states[r].with_positions


def resume_points(code):
    """(r, depth, nulls, live locals, with slots) for every resumable instruction index."""
    insts = B.decode(code)
    states = A.frame_states(insts, argnames(code), code.co_flags)
    normal = _normal_reach(insts)
    start = B.first_resume(insts)
    cells = set(code.co_cellvars) | set(code.co_freevars)
    lives = A.live_locals_all(insts)
    for r in range(start + 1, len(insts)):
        s = states[r]
        if s is None or not normal[r] or A.MAYBE_NULL in s.stack:
            continue
        if B.skipped_at_loop_exit(insts, r):
            continue  # an exhausted FOR_ITER skips it (3.12+): never a resume point
        if insts[r - 1].opname in ("PRECALL", "KW_NAMES"):
            continue  # resume.py refuses these (the frontend never breaks there)
        live = lives[r] - cells
        if not live <= s.assigned:
            continue
        withs = with_slots(insts, states, r)
        yield r, s.depth, s.null_positions, tuple(sorted(live)), withs


def _normal_reach(insts):
    """Instructions reachable without taking an exception edge."""
    index = {id(i): n for n, i in enumerate(insts)}
    seen = [False] * len(insts)
    work = [0]
    while work:
        n = work.pop()
        if seen[n]:
            continue
        seen[n] = True
        inst = insts[n]
        if not inst.is_terminator and n + 1 < len(insts):
            work.append(n + 1)
        if inst.target is not None:
            work.append(index[id(inst.target)])
    return seen


WRAPPED = []


def wrap(fn):
    """Stands for kiln's frame entry: records the resume function it is given."""
    WRAPPED.append(fn)
    return fn


def broken(fn, r, depth, nulls, live, withs, use_wrap=False):
    """fn with a simulated graph break at instruction r (see the module docstring)."""
    code = fn.__code__
    rf = R.make_resume_function(code, r, depth, nulls, live, setup_with_blocks=withs)
    insts = B.decode(code)
    call = rf.emit_call(
        wrap_with=lambda k, load: B.emit.call_function(B.emit.load_const(Reenter), [load]),
        wrap=wrap if use_wrap else None,
    )
    B.insert_before(insts, insts[r], call)
    for inst in call:
        inst.exn_tab_entry = None  # the resume function handles what happens after r
    return with_code(fn, B.encode(insts, like=code)), rf


SKIP = {"use_gen", "use_yield_from", "run_async"}  # their helpers are generators, not them


def check_function(fn, inputs, max_points=8):
    points = list(resume_points(fn.__code__))
    if len(points) > max_points:  # spread the sample over the whole function
        step = len(points) / max_points
        points = [points[int(i * step)] for i in range(max_points)]
    # exc_groups: `r` is live everywhere but only bound on one path, so no point is resumable
    assert points or fn.__name__ == "exc_groups", f"{fn.__name__}: no resume points"
    built = 0
    for n, (r, depth, nulls, live, withs) in enumerate(points):
        WRAPPED.clear()
        try:
            new_fn, rf = broken(fn, r, depth, nulls, live, withs, use_wrap=n % 2 == 1)
        except R.ResumeUnsupported:
            # only 3.12+ comprehensions that make cells mid-body are refused
            assert fn.__name__ == "comp_cells" and B.PY312_PLUS, (fn.__name__, r)
            continue
        built += 1
        for args in inputs:
            got, want = outcome(new_fn, args), outcome(fn, args)
            assert got == want, (
                f"{fn.__name__} resumed at {r} ({depth=}, {nulls=}, {live=}, {withs=}){args}: {got} != {want}"
            )


def check_cache_and_names():
    code = corpus.loop_sum.__code__
    points = list(resume_points(code))
    r, depth, nulls, live, withs = points[len(points) // 2]
    a = R.make_resume_function(code, r, depth, nulls, live)
    b = R.make_resume_function(code, r, depth, nulls, live)
    # named as the user's function (tracebacks, logging's funcName), told apart by its qualname
    assert a is b and a.code.co_name == code.co_name
    assert a.code.co_qualname.startswith(f"{code.co_qualname}.__resume_at_")
    assert a.argnames == tuple(f"__stack{k}" for k in a.stack_args) + a.live_locals


def check_closure_cells_shared():
    """A closure made before the break and the resumed code share the same cells."""

    def f(n):
        total = 0

        def add(k):
            nonlocal total
            total += k

        add(n)
        marker = len([n])  # noqa: F841  (the break goes at this call)
        add(n)
        return total, add.__closure__[0].cell_contents

    insts = B.decode(f.__code__)
    r = next(n for n, i in enumerate(insts) if i.opname == "STORE_FAST" and i.argval == "marker")
    states = A.frame_states(insts, ("n",))
    live = tuple(sorted(A.livevars(insts, r) - set(f.__code__.co_cellvars)))
    new_fn, rf = broken(f, r, states[r].depth, states[r].null_positions, live, ())
    assert rf.code.co_freevars == ("total",) and rf.code.co_cellvars == ()
    assert new_fn(3) == f(3) == (6, 6)


def closure_for(fn, rf):
    """The closure tuple for calling a resume function of fn directly (fn has no cellvars)."""
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    return tuple(cells[name] for name in rf.closure_names)


def check_with_reentered():
    """A real re-entry: the caller passes a fresh context manager for the with slot."""
    log = []

    class CM:
        def __enter__(self):
            log.append("enter")

        def __exit__(self, *exc):
            log.append(("exit", exc[0].__name__ if exc[0] else None))

    def f(x):
        with CM():
            y = x + 1
            z = y * 2
        return z

    insts = B.decode(f.__code__)
    r = next(n for n, i in enumerate(insts) if i.opname == "STORE_FAST" and i.argval == "z")
    states = A.frame_states(insts, ("x",))
    depth = states[r].depth
    withs = with_slots(insts, states, r)
    rf = R.make_resume_function(
        f.__code__, r, depth, states[r].null_positions, ("y",), setup_with_blocks=withs
    )
    resumed = types.FunctionType(rf.code, f.__globals__, closure=closure_for(f, rf))
    # stack at r: [exit slot, y*2]; pass a new CM for the exit slot and the value of y*2
    assert resumed(CM(), 10, 5) == 10 and log == ["enter", ("exit", None)]
    log.clear()
    # resume at `y * 2` (stack: [exit slot, y, 2]); y=None makes the body raise: __exit__ sees it
    r2 = next(n for n, i in enumerate(insts) if i.opname == "BINARY_OP" and i.argrepr == "*")
    rf2 = R.make_resume_function(
        f.__code__,
        r2,
        states[r2].depth,
        (),
        ("y",),
        setup_with_blocks=with_slots(insts, states, r2),
    )
    resumed2 = types.FunctionType(rf2.code, f.__globals__, closure=closure_for(f, rf2))
    try:
        resumed2(CM(), None, 2, None)
        raise AssertionError("None * 2 should raise")
    except TypeError:
        pass
    assert log == ["enter", ("exit", "TypeError")], log


def check_unsupported():
    def g():
        yield 1

    try:
        R.make_resume_function(g.__code__, 3, 0)
    except R.ResumeUnsupported:
        return
    raise AssertionError("generator resume should be unsupported")


def check_stdlib_functions():
    """Simulated breaks in real library code (loops, try, 3.12 inlined comprehensions)."""
    import html
    import json
    import posixpath
    import shlex
    import statistics
    import textwrap

    cases = [
        (posixpath.relpath, [("/a/b/c", "/a/d"), ("", "/")]),
        (textwrap.dedent, [("  a\n   b\n  c",)]),
        (shlex.split, [("a 'b c' \"d e\" f\\ g",)]),
        (html.unescape, [("&lt;&amp;&#39;&gt;",)]),
        (json.dumps, [({"a": [1, 2, {"b": None}]},)]),
        (statistics.median, [([3, 1, 2],), ([],)]),
    ]
    for fn, inputs in cases:
        check_function(fn, inputs, max_points=6)


def check_random_programs():
    """A few seeded random programs (tests/bytecode/random_programs.py): round trip, edits and
    simulated breaks. Larger sweeps: `python tests/bytecode/random_programs.py 0 200`."""
    import random_programs
    import roundtrip_checks

    for seed in (11, 12, 13):
        fn = random_programs.make(seed, n=5)
        roundtrip_checks.check_roundtrip(fn, random_programs.INPUTS, B)
        roundtrip_checks.check_edits(fn, random_programs.INPUTS, B)
        check_function(fn, random_programs.INPUTS, max_points=5)


def all_checks():
    """(name, zero-argument check) pairs, run by pytest and by roundtrip_checks.main()."""
    out = []
    for fn, inputs in corpus.CASES:
        if fn.__name__ not in SKIP and not fn.__code__.co_flags & GENERATOR_LIKE:
            n = {"big": 2, "many": 2, "comp_shadow": 40}.get(fn.__name__, 8)  # sample size
            check = lambda fn=fn, inputs=inputs, n=n: check_function(fn, inputs, n)  # noqa: E731
            out.append((f"resume_{fn.__name__}", check))
    for check in (
        check_cache_and_names,
        check_closure_cells_shared,
        check_with_reentered,
        check_with_recipe,
        check_nested_resume,
        check_resume_at_call_in_try,
        check_resume_after_loop_exit,
        check_resume_origins_complete,
        check_stdlib_functions,
        check_random_programs,
        check_unsupported,
    ):
        out.append((check.__name__, check))
    return out


def check_with_recipe():
    """Note [Resume: breaks inside with blocks]: the transformed code runs the unsupported
    instruction inside emit.with_block and the resume function re-enters the same manager."""
    log = []

    class CM:
        def __enter__(self):
            log.append("enter")

        def __exit__(self, *exc):
            log.append(("exit", exc[0] and exc[0].__name__))

    def f(x, out):
        with CM():
            y = x + 1
            out.append(y)  # "unsupported": the break runs this call in Python
            z = y * 2
        return z

    insts = B.decode(f.__code__)
    states = A.frame_states(insts, ("x", "out"))
    i_call = next(n for n, i in enumerate(insts) if i.opname == "CALL" and i.arg == 1)
    r = i_call + 1  # the POP_TOP of the call's result
    state = states[r]
    assert state.with_positions == (0,) and state.depth == 2
    # live and bound at the break (z is live through the suppress path but not yet bound)
    live = tuple(sorted(A.livevars(insts, r) & {"x", "out", "y"}))
    rf = R.make_resume_function(f.__code__, r, state.depth, (), live, setup_with_blocks=(0,))
    E = B.emit
    # the transformed f: "graph" y = x + 1; then the break
    body = E.load_fast("x") + E.load_const(1) + E.binary_op("+") + E.store_fast("y")
    body += E.call_function(E.load_const(CM), []) + E.store_fast("ctx")
    inner = E.load_fast("out") + E.load_method("append") + E.load_fast("y") + E.call(1)
    inner += E.store_fast("res")
    body += E.with_block(E.load_fast("ctx"), inner, depth=0)
    body += E.with_null(rf.emit_make_function()) + E.load_fast("ctx") + E.load_fast("res")
    body += [i for name in rf.live_locals for i in E.load_fast(name)]
    body += E.call(2 + len(rf.live_locals)) + E.return_value()
    keep = insts[: B.first_resume(insts) + 1]
    names = f.__code__.co_varnames + ("ctx", "res")
    transformed = with_code(f, B.encode(keep + body, like=f.__code__, co_varnames=names))
    out = []
    assert transformed(3, out) == 8 and out == [4]
    assert log == ["enter", ("exit", None), "enter", ("exit", None)], log
    log.clear()
    try:
        transformed(3, None)  # None.append raises inside the with: __exit__ sees it
        raise AssertionError("should raise")
    except AttributeError:
        pass
    assert log == ["enter", ("exit", "AttributeError")], log


def check_nested_resume():
    """A resume function that breaks again (kiln compiles resume functions as frames): the
    wrapper given to emit_call builds a broken copy of the resume function itself."""

    def break_again(fn):
        points = list(resume_points(fn.__code__))
        insts = B.decode(fn.__code__)
        jump = next(n for n, i in enumerate(insts) if i.opname == "JUMP_FORWARD")
        points = [p for p in points if p[0] > jump]  # inside the copied body
        if not points:
            return fn
        r, depth, nulls, live, withs = points[len(points) // 2]
        return broken(fn, r, depth, nulls, live, withs)[0]

    names = ("loop_sum", "nested_loops", "closure", "nested_with", "deep_try", "fstrings")
    cases = [(fn, inputs) for fn, inputs in corpus.CASES if fn.__name__ in names]
    assert len(cases) == len(names)
    for fn, inputs in cases:
        points = list(resume_points(fn.__code__))
        r, depth, nulls, live, withs = points[len(points) // 3]
        rf = R.make_resume_function(fn.__code__, r, depth, nulls, live, setup_with_blocks=withs)
        insts = B.decode(fn.__code__)
        call = rf.emit_call(
            wrap_with=lambda k, load: B.emit.call_function(B.emit.load_const(Reenter), [load]),
            wrap=break_again,
        )
        B.insert_before(insts, insts[r], call)
        for inst in call:
            inst.exn_tab_entry = None
        new_fn = with_code(fn, B.encode(insts, like=fn.__code__))
        for args in inputs:
            assert outcome(new_fn, args) == outcome(fn, args), f"nested {fn.__name__}{args}"


def check_resume_at_call_in_try():
    """Note [Bytecode: 3.13 errors from callee frames]: resuming right at a call (or a property
    load) inside a try body, the callee's exception must still reach the handler."""

    def f(g, x):
        try:
            return g(x)
        except KeyError:
            return "caught"

    def h(o):
        try:
            return o.prop
        except KeyError:
            return "caught attr"

    class Obj:
        @property
        def prop(self):
            raise KeyError("p")

    def raiser(x):
        raise KeyError(x)

    insts = B.decode(f.__code__)
    r = next(n for n, i in enumerate(insts) if i.opname == ("PRECALL" if B.PY311 else "CALL"))
    state = A.frame_states(insts, ("g", "x"))[r]
    rf = R.make_resume_function(f.__code__, r, state.depth, state.null_positions, ())
    resumed = types.FunctionType(rf.code, f.__globals__)
    assert resumed(raiser, 1) == "caught" and resumed(len, [1, 2]) == 2

    insts = B.decode(h.__code__)
    r = next(n for n, i in enumerate(insts) if i.opname == "LOAD_ATTR")
    state = A.frame_states(insts, ("o",))[r]
    rf = R.make_resume_function(h.__code__, r, state.depth, state.null_positions, ())
    resumed = types.FunctionType(rf.code, h.__globals__)
    assert resumed(Obj()) == "caught attr"
    assert resumed(types.SimpleNamespace(prop=3)) == 3


def check_resume_after_loop_exit():
    """Where an exhausted loop continues (FOR_ITER's target + FOR_ITER_SKIPS) is a resume point
    on every version; what FOR_ITER skips there (3.12+ END_FOR, 3.13 its POP_TOP) is not."""

    def f(xs):
        total = 0
        for x in xs:
            total += x
        return total * 2

    insts = B.decode(f.__code__)
    for_iter = next(n for n, i in enumerate(insts) if i.opname == "FOR_ITER")
    exit_index = insts.index(insts[for_iter].target) + B.FOR_ITER_SKIPS
    assert insts[exit_index].opname == "LOAD_FAST", insts[exit_index]
    state = A.frame_states(insts, ("xs",))[exit_index]
    rf = R.make_resume_function(f.__code__, exit_index, state.depth, (), ("total",))
    resumed = types.FunctionType(rf.code, f.__globals__)
    assert resumed(5) == 10
    for n in range(len(insts)):
        if B.skipped_at_loop_exit(insts, n):
            try:
                R.make_resume_function(f.__code__, n, 0, (), ("total",))
                raise AssertionError(f"resumed at {insts[n]!r}, which FOR_ITER skips")
            except R.ResumeUnsupported:
                pass


def check_resume_origins_complete():
    """Note [Bytecode: index map]: every instruction of a resume function's copied body maps
    back to the original instruction it copies, also where encode() adds instructions (the
    3.13 NOP in front of a call that starts a try range, split superinstructions)."""

    def f(g, x, y):
        with open(__file__) as fh:  # noqa: F841  (a with block around the calls)
            try:
                a = g(x) + y
                b = g(a, y) + x
            except KeyError:
                return "caught"
        return a + b

    code = f.__code__
    insts = B.decode(code)
    # resume at each call (3.11: at its PRECALL): the copied body then starts with that call
    calls = [n - B.PY311 for n, i in enumerate(insts) if i.opname == "CALL"]
    states = A.frame_states(insts, ("g", "x", "y"))
    checked = 0
    for r in calls:
        s = states[r]
        if s is None or A.MAYBE_NULL in s.stack:
            continue
        live = tuple(sorted(A.livevars(insts, r) & s.assigned - {"fh"}))
        rf = R.make_resume_function(
            code, r, s.depth, s.null_positions, live, setup_with_blocks=s.with_positions
        )
        original, index = R.origin(rf.code)
        assert original is code
        resumed = B.decode(rf.code)
        body = range(next(n for n, i in enumerate(resumed) if i.opname == "JUMP_FORWARD") + 1)
        for n, inst in enumerate(resumed):
            if n in body or inst.opname == "NOP":
                continue
            if n not in index and resumed[n - 1].opname == "LOAD_FAST_CHECK":
                continue  # the second half of a split 3.13 LOAD_FAST_LOAD_FAST
            assert n in index, f"resume at {r}: #{n} {inst!r} has no origin"
            there = insts[index[n]]
            same = there.opname == inst.opname or (inst.is_jump and there.is_jump)
            assert same or there.opname in ("LOAD_FAST", "LOAD_FAST_LOAD_FAST"), (inst, there)
        checked += 1
    assert checked >= 2, checked
