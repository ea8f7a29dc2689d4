"""Round-trip and edit checks for kiln.bytecode; needs neither torch nor pytest.

Run directly (any Python 3.11-3.13 with `bytecode` importable): `python roundtrip_checks.py`.
kiln/__init__.py imports torch, so bootstrap() registers bare `kiln` / `kiln.frontend` package
modules first and only kiln.bytecode (and kiln.frontend.resume) are executed.
"""

import copy
import dis
import importlib
import importlib.util
import inspect
import pathlib
import sys
import types

HERE = pathlib.Path(__file__).resolve().parent
GENERATOR_LIKE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
ROOT = HERE.parents[1]


def bootstrap():
    """Make kiln.bytecode / kiln.frontend.resume importable. With torch the real kiln package is
    imported (so later tests in the same process see it whole); without torch (pyenv 3.12/3.13)
    bare `kiln` / `kiln.frontend` package modules are registered instead, so that
    kiln/__init__.py (which imports torch) never runs."""
    if importlib.util.find_spec("torch") is not None:
        import kiln  # noqa: F401
        import kiln.frontend  # noqa: F401

        return
    for name, path in (("kiln", ROOT / "kiln"), ("kiln.frontend", ROOT / "kiln" / "frontend")):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [str(path)]
            sys.modules[name] = mod


def load(name, path):
    """Import a helper module of the tests by file path (the tests folder is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def drive(result):
    """Run a generator / coroutine to the end: (yielded values, return value)."""
    if inspect.isgenerator(result):
        out = []
        try:
            value = next(result)
            while True:
                out.append(value)
                value = result.send(len(out) if len(out) % 2 else None)
        except StopIteration as stop:
            return ("generator", out, stop.value)
    if inspect.iscoroutine(result):
        try:
            result.send(None)
        except StopIteration as stop:
            return ("coroutine", stop.value)
        raise AssertionError("coroutine did not finish")
    return result


def outcome(fn, args):
    """What a call does: ("ok", value) or ("raise", type, args); arguments are copied first."""
    args = copy.deepcopy(args)
    try:
        return ("ok", drive(fn(*args)), args)
    except Exception as e:  # noqa: BLE001 - any exception is an outcome to compare
        return ("raise", type(e), str(e.args))


def with_code(fn, code):
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def merged_lines(code):
    out = []
    for start, end, line in code.co_lines():
        if out and out[-1][2] == line and out[-1][1] == start:
            out[-1] = (out[-1][0], end, line)
        else:
            out.append((start, end, line))
    return out


def roundtrip(code, B):
    """decode/encode a code object and, recursively, the code objects among its constants."""
    insts = B.decode(code)
    for inst in insts:
        if isinstance(inst.argval, types.CodeType):
            inst.argval = roundtrip(inst.argval, B)
    return B.encode(insts, like=code)


def check_roundtrip(fn, inputs, B):
    old = fn.__code__
    new = B.encode(B.decode(old), like=old)
    assert new.co_code == old.co_code, f"{fn.__name__}: co_code differs"
    # (the compiler may let an entry start at an EXTENDED_ARG, which never raises)
    assert exception_semantics(new) == exception_semantics(old), f"{fn.__name__}: exceptions"
    assert list(new.co_positions()) == list(old.co_positions()), f"{fn.__name__}: positions"
    assert merged_lines(new) == merged_lines(old), f"{fn.__name__}: co_lines"
    assert new.co_linetable == old.co_linetable, f"{fn.__name__}: co_linetable"
    assert new.co_stacksize == old.co_stacksize, f"{fn.__name__}: stacksize"
    for field in ("co_varnames", "co_names", "co_cellvars", "co_freevars", "co_flags"):
        assert getattr(new, field) == getattr(old, field), f"{fn.__name__}: {field}"
    new_fn = with_code(fn, roundtrip(old, B))  # nested code objects round-tripped too
    for args in inputs:
        assert outcome(new_fn, args) == outcome(fn, args), f"{fn.__name__}{args}"
    # the printer covers every instruction
    text = B.format(B.decode(old))
    assert len(text.splitlines()) >= len(B.decode(old))


def edit_prologue_and_returns(fn, B):
    """Edited code: a prologue storing a constant in a new local and looping 3 times with a
    backward conditional jump, and a recorder call inserted before every return."""
    E = B.emit
    record = []
    insts = B.decode(fn.__code__)
    loop_head = E.load_fast("__kiln_k")
    prologue = (
        E.load_const(0)
        + E.store_fast("__kiln_k")
        + loop_head
        + E.load_const(1)
        + E.binary_op("+")
        + E.store_fast("__kiln_k")
        + E.load_fast("__kiln_k")
        + E.load_const(3)
        + E.compare_op("<")
        + E.pop_jump_if_true(loop_head[0])
        + E.call_function(E.load_const(record.append), [E.load_fast("__kiln_k")])
        + E.pop_top()
    )
    B.insert_after(insts, insts[B.first_resume(insts)], prologue)
    for inst in list(insts):
        if inst.opname == "RETURN_VALUE":
            seq = E.with_null(E.load_const(record.append)) + E.copy(3) + E.call(1) + E.pop_top()
        elif inst.opname == "RETURN_CONST":
            seq = E.call_function(E.load_const(record.append), [E.load_const(inst.argval)])
            seq += E.pop_top()
        else:
            continue
        B.insert_before(insts, inst, seq)
    code = B.encode(insts, like=fn.__code__)
    assert "__kiln_k" in code.co_varnames
    return with_code(fn, code), record


def check_edits(fn, inputs, B):
    new_fn, record = edit_prologue_and_returns(fn, B)
    for args in inputs:
        record.clear()
        got = outcome(new_fn, args)
        assert got == outcome(fn, args), f"edited {fn.__name__}{args}"
        if got[0] == "ok" or record:  # (a bad call raises before the prologue runs)
            assert record[0] == 3, f"edited {fn.__name__}{args}: prologue loop ran {record[:1]}"
        if got[0] == "ok" and not fn.__code__.co_flags & GENERATOR_LIKE:
            assert record[-1] is got[1] or record[-1] == got[1], f"edited {fn.__name__}{args}"
            assert len(record) == 2


# Standard-library modules whose every code object must round-trip exactly (a few hundred real
# code objects per Python: big functions, async, generators, nested try/with, match ...).
STDLIB_MODULES = ("argparse", "dataclasses", "json.decoder", "textwrap", "difflib", "asyncio.tasks")


def exception_semantics(code):
    """offset -> (handler, depth, lasti) for every covered code unit."""
    table = {}
    for e in dis._parse_exception_table(code):
        for offset in range(e.start, e.end, 2):
            table[offset] = (e.target, e.depth, e.lasti)
    real = {i.offset for i in dis.get_instructions(code) if i.opname != "EXTENDED_ARG"}
    return {k: v for k, v in table.items() if k in real}  # EXTENDED_ARG units never raise


def stdlib_codes():
    codes = []

    def walk(c):
        codes.append(c)
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                walk(k)

    for name in STDLIB_MODULES:
        module = importlib.import_module(name)
        walk(module.__loader__.get_code(name))
    return codes


def check_stdlib(B):
    """Every code object of STDLIB_MODULES: encode(decode(c)) equals c."""
    codes = stdlib_codes()
    assert len(codes) > 300
    for c in codes:
        n = B.encode(B.decode(c), like=c)
        where = f"{c.co_qualname} ({c.co_filename}:{c.co_firstlineno})"
        assert n.co_code == c.co_code, where
        assert exception_semantics(n) == exception_semantics(c), where
        assert list(n.co_positions()) == list(c.co_positions()), where
        assert n.co_linetable == c.co_linetable, where
        assert (n.co_stacksize, n.co_varnames, n.co_names) == (
            c.co_stacksize,
            c.co_varnames,
            c.co_names,
        ), where
    return len(codes)


def main():
    bootstrap()
    import kiln.bytecode as B

    corpus = load("kiln_bytecode_corpus", HERE / "corpus_funcs.py")
    failures = 0
    for fn, inputs in corpus.CASES:
        for check in (check_roundtrip, check_edits):
            try:
                check(fn, inputs, B)
            except Exception as e:  # noqa: BLE001 - report every failing case
                failures += 1
                print(f"FAIL {check.__name__} {fn.__name__}: {type(e).__name__}: {e}")
    n_stdlib = 0
    try:
        n_stdlib = check_stdlib(B)
    except Exception as e:  # noqa: BLE001
        failures += 1
        print(f"FAIL stdlib round trip: {type(e).__name__}: {e}")
    sys.path.insert(0, str(HERE))
    n_resume = 0
    for module in ("emit_checks", "resume_checks"):
        mod = __import__(module)
        for name, check in mod.all_checks():
            n_resume += 1
            try:
                check()
            except Exception as e:  # noqa: BLE001
                failures += 1
                print(f"FAIL {module} {name}: {type(e).__name__}: {e}")
    v = ".".join(map(str, sys.version_info[:3]))
    print(
        f"python {v}: {len(corpus.CASES)} corpus functions, {n_stdlib} stdlib code objects, "
        f"{n_resume} emit/resume checks, {failures} failures"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
