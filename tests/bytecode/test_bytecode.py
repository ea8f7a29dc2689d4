"""kiln.bytecode: round trip and edits over a corpus, on this Python and on pyenv's 3.12/3.13."""

import glob
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import corpus_funcs  # noqa: E402
import roundtrip_checks  # noqa: E402

import kiln.bytecode as B  # noqa: E402
from kiln.bytecode import analysis as A  # noqa: E402
from kiln.bytecode import emit  # noqa: E402

CASES = corpus_funcs.CASES
IDS = [fn.__name__ for fn, _ in CASES]


@pytest.mark.parametrize("fn,inputs", CASES, ids=IDS)
def test_roundtrip(fn, inputs):
    roundtrip_checks.check_roundtrip(fn, inputs, B)


@pytest.mark.parametrize("fn,inputs", CASES, ids=IDS)
def test_edited(fn, inputs):
    roundtrip_checks.check_edits(fn, inputs, B)


def test_decode_view():
    insts = B.decode(corpus_funcs.try_except.__code__)
    assert all(i.opname not in ("CACHE", "EXTENDED_ARG") for i in insts)
    jumps = [i for i in insts if i.is_jump]
    assert jumps and all(j.target in insts for j in jumps)
    covered = [i for i in insts if i.exn_tab_entry is not None]
    assert covered and all(i.exn_tab_entry.target in insts for i in covered)
    assert insts[0].offset == 0 and all(i.lineno is None or i.lineno > 0 for i in insts)
    text = B.format(insts, title="try_except")
    assert "ExceptionTable:" in text and "to #" in text


def test_extended_arg_folded():
    big = corpus_funcs.build_big()
    insts = B.decode(big.__code__)
    assert max(i.arg or 0 for i in insts if i.opname == "LOAD_CONST") > 255
    assert any(i.opname == "EXTENDED_ARG" for i in __import__("dis").get_instructions(big.__code__))


def test_build_function_from_scratch():
    """A new code object built only from emit sequences: a closure-making function and a call."""

    def template(x):
        y = x * 2

        def inner(z):
            return y + z

        return inner

    inner_code = next(c for c in template.__code__.co_consts if hasattr(c, "co_code"))
    insts = B.decode(template.__code__)
    # replace everything after the prologue with: return (lambda via closure)(x) + len([x])
    keep = insts[: B.first_resume(insts) + 1]
    store_y = [i for i in insts if i.opname == "STORE_DEREF"][:1]
    body = (
        emit.load_fast("x")
        + emit.load_const(2)
        + emit.binary_op("*")
        + store_y
        + emit.make_closure(inner_code, ["y"])
        + emit.store_fast("f")
        + emit.with_null(emit.load_fast("f"))
        + emit.load_fast("x")
        + emit.call(1)
        + emit.load_global("len", push_null=True)
        + emit.load_fast("x")
        + emit.build_list(1)
        + emit.call(1)
        + emit.binary_op("+")
        + emit.load_const(1)
        + emit.load_const(2)
        + emit.build_tuple(2)
        + emit.unpack_sequence(2)
        + emit.swap(2)
        + emit.binary_op("-")  # 2 - 1
        + emit.binary_op("+")
        + emit.return_value()
    )
    code = B.encode(keep + body, like=template.__code__, co_varnames=("x", "f"))
    fn = roundtrip_checks.with_code(template, code)
    assert fn(5) == (10 + 5) + 1 + (1 - 2)


def test_emit_calls_and_methods():
    def template(s, k):
        return s

    insts = B.decode(template.__code__)
    keep = insts[: B.first_resume(insts) + 1]
    body = (
        emit.load_fast("s")
        + emit.load_method("split")
        + emit.load_const(",")
        + emit.call(1)
        + emit.store_fast("parts")
        + emit.with_null(emit.load_const(dict))
        + emit.load_fast("k")
        + emit.load_fast("parts")
        + emit.call_kw(2, ["a", "b"])
        + emit.store_fast("d")
        + emit.with_null(emit.load_const(sorted))
        + emit.load_fast("parts")
        + emit.build_tuple(1)
        + emit.load_const("reverse")
        + emit.load_const(True)
        + emit.build_map(1)
        + emit.call_function_ex(True)
        + emit.load_fast("d")
        + emit.load_attr("__len__")
        + emit.push_null()
        + (emit.swap(2) if not B.PY313_PLUS else [])
        + emit.call(0)
        + emit.build_const_key_map(["sorted", "n"])
        + emit.dup_top()
        + emit.pop_top()
        + emit.return_value()
    )
    code = B.encode(keep + body, like=template.__code__, co_varnames=("s", "k"))
    fn = roundtrip_checks.with_code(template, code)
    assert fn("x,y", 1) == {"sorted": ["y", "x"], "n": 2}


def test_jump_direction_and_conditionals():
    def template(n):
        return n

    insts = B.decode(template.__code__)
    keep = insts[: B.first_resume(insts) + 1]
    ret = emit.load_fast("acc")
    head = emit.load_fast("n")
    body = (
        emit.load_const(0)
        + emit.store_fast("acc")
        + emit.jump_forward(head[0])  # a forward jump to the loop test
        + emit.load_fast("acc")
        + emit.load_fast("n")
        + emit.binary_op("+")
        + emit.store_fast("acc")
        + emit.load_fast("n")
        + emit.load_const(1)
        + emit.binary_op("-")
        + emit.store_fast("n")
        + head
        + emit.load_const(0)
        + emit.compare_op(">")
        + emit.pop_jump_if_false(ret[0])
    )
    loop_start = body[3]
    body += emit.jump_forward(loop_start)  # written as "forward"; encode makes it backward
    body += ret + emit.return_value()
    code = B.encode(keep + body, like=template.__code__)
    fn = roundtrip_checks.with_code(template, code)
    assert [fn(k) for k in range(5)] == [0, 1, 3, 6, 10]


def test_rot_n():
    def template(a, b, c, d):
        return a

    insts = B.decode(template.__code__)
    keep = insts[: B.first_resume(insts) + 1]
    body = [*emit.load_fast("a"), *emit.load_fast("b"), *emit.load_fast("c"), *emit.load_fast("d")]
    body += emit.rot_n(4) + emit.build_tuple(4) + emit.return_value()
    fn = roundtrip_checks.with_code(template, B.encode(keep + body, like=template.__code__))
    assert fn(1, 2, 3, 4) == (4, 1, 2, 3)


def test_encode_errors():
    def template(x):
        return x

    insts = B.decode(template.__code__)
    with pytest.raises(B.BytecodeError):
        B.encode(insts, like=template.__code__, co_nonsense=1)
    dangling = emit.jump_forward(B.Inst("NOP"))
    with pytest.raises(B.BytecodeError):
        B.encode(insts[:1] + dangling + insts[1:], like=template.__code__)


def test_import_boundary():
    """kiln.bytecode imports neither torch nor any other part of kiln."""
    for path in (ROOT / "kiln" / "bytecode").glob("*.py"):
        text = path.read_text()
        assert "import torch" not in text and "from torch" not in text, path
        for line in text.splitlines():
            s = line.strip()
            if s.startswith(("import kiln", "from kiln")):
                assert s.startswith(("from kiln.bytecode", "import kiln.bytecode")), (path, s)


def _other_pythons():
    found = []
    for minor in ("3.12", "3.13"):
        exes = sorted(glob.glob(f"/root/.pyenv/versions/{minor}*/bin/python"))
        if exes:
            found.append((minor, exes[-1]))
    return found


def _bytecode_target(minor, exe):
    """A cached `pip install --target` folder with the `bytecode` package for that Python."""
    target = ROOT / ".venv" / f"bytecode-py{minor.replace('.', '')}"
    if not (target / "bytecode").is_dir():
        version = B.codec.bc.__version__
        r = subprocess.run(
            [exe, "-m", "pip", "install", "-q", "--target", str(target), f"bytecode=={version}"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if r.returncode:
            pytest.skip(f"cannot install bytecode for {exe}: {r.stderr[-500:]}")
    return target


@pytest.mark.parametrize("minor,exe", _other_pythons(), ids=lambda v: str(v))
def test_other_python(minor, exe):
    """The same corpus (and the resume checks) under pyenv's 3.12 / 3.13, without torch."""
    target = _bytecode_target(minor, exe)
    env = dict(os.environ, PYTHONPATH=str(target))
    r = subprocess.run(
        [exe, str(HERE / "roundtrip_checks.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert " 0 failures" in r.stdout


@pytest.mark.parametrize("fn,inputs", CASES, ids=IDS)
def test_analysis_stack_depth_matches_compiler(fn, inputs):
    code = fn.__code__
    assert A.max_stack_depth(B.decode(code), code.co_flags) == code.co_stacksize


def test_analysis_states_and_liveness():
    def f(a, b):
        with open(__file__) as fh:
            c = len(fh.read(1)) + a
        print(c, b)  # noqa: T201 (never called)
        return a

    insts = B.decode(f.__code__)
    states = A.frame_states(insts, ("a", "b"))
    inside = next(n for n, i in enumerate(insts) if i.opname == "STORE_FAST" and i.argval == "c")
    assert states[inside].with_positions == (0,)
    assert "fh" in states[inside].assigned and "c" not in states[inside].assigned
    assert A.livevars(insts, inside) == {"a", "b"}
    call = next(n for n, i in enumerate(insts) if i.opname == "LOAD_GLOBAL" and i.argval == "print")
    assert states[call + 1].null_positions == ((1,) if B.PY313_PLUS else (0,))
    assert A.livevars(insts, call) == {"a", "b", "c"}
