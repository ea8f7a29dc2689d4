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
import emit_checks  # noqa: E402
import roundtrip_checks  # noqa: E402

import kiln.bytecode as B  # noqa: E402
from kiln.bytecode import analysis as A  # noqa: E402

CASES = corpus_funcs.CASES
IDS = [fn.__name__ for fn, _ in CASES]


@pytest.mark.parametrize("fn,inputs", CASES, ids=IDS)
def test_roundtrip(fn, inputs):
    roundtrip_checks.check_roundtrip(fn, inputs, B)


@pytest.mark.parametrize("fn,inputs", CASES, ids=IDS)
def test_edited(fn, inputs):
    roundtrip_checks.check_edits(fn, inputs, B)


def test_stdlib_roundtrip():
    """A few hundred real code objects from the standard library round-trip exactly."""
    assert roundtrip_checks.check_stdlib(B) > 300


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


EMIT_CHECKS = emit_checks.all_checks()


@pytest.mark.parametrize("check", [c for _, c in EMIT_CHECKS], ids=[n for n, _ in EMIT_CHECKS])
def test_emit_and_analysis(check):
    check()


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


def test_other_pythons():
    """The same corpus, stdlib sample, emit and resume checks under pyenv's 3.12 / 3.13 (no
    torch), both interpreters at once."""
    found = _other_pythons()
    if not found:
        pytest.skip("no pyenv 3.12 / 3.13")
    procs = {}
    for minor, exe in found:
        env = dict(os.environ, PYTHONPATH=str(_bytecode_target(minor, exe)))
        procs[minor] = subprocess.Popen(
            [exe, "-X", "faulthandler", str(HERE / "roundtrip_checks.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
    for minor, proc in procs.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and " 0 failures" in out, f"python {minor}:\n{out[-4000:]}"


@pytest.mark.parametrize("fn,inputs", CASES, ids=IDS)
def test_analysis_stack_depth_matches_compiler(fn, inputs):
    code = fn.__code__
    assert A.max_stack_depth(B.decode(code), code.co_flags) == code.co_stacksize
