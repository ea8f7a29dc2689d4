"""kiln.frontend.resume: resume functions on plain Python functions (no torch needed).

The checks live in tests/bytecode/resume_checks.py so that the torch-free runner
(tests/bytecode/roundtrip_checks.py) also runs them under pyenv's 3.12 / 3.13; this file runs
them under the current Python (test_bytecode.py::test_other_python covers the other versions).
"""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bytecode"))

import resume_checks  # noqa: E402

import kiln.bytecode as B  # noqa: E402
from kiln.bytecode import analysis as A  # noqa: E402
from kiln.frontend import resume as R  # noqa: E402

CHECKS = resume_checks.all_checks()


@pytest.mark.parametrize("check", [c for _, c in CHECKS], ids=[n for n, _ in CHECKS])
def test_resume(check):
    check()


def test_break_in_loop_runs_in_own_copy():
    """A break inside a loop body: the loop's back jump stays inside the resume function."""
    calls = []

    def f(n):
        acc = []
        for i in range(n):
            calls.append(i)  # the break goes right after this call
            acc.append(i * i)
        return acc

    insts = B.decode(f.__code__)
    states = A.frame_states(insts, ("n",))
    # the POP_TOP after calls.append(i): resume there, stack = [iterator]
    r = (
        next(
            n
            for n, i in enumerate(insts)
            if i.opname == "POP_TOP" and insts[n - 1].opname == "CALL" and states[n].depth == 2
        )
        + 1
    )
    live = tuple(sorted(A.livevars(insts, r)))
    rf = R.make_resume_function(f.__code__, r, states[r].depth, states[r].null_positions, live)
    assert rf.stack_args == (0,) and {"acc", "i"} <= set(live)
    import types

    resumed = types.FunctionType(rf.code, f.__globals__, closure=resume_checks.closure_for(f, rf))
    it = iter(range(1, 4))  # as if iteration 0 ran before the break
    args = {"acc": [], "i": 0, "n": 4}
    out = resumed(it, *(args[name] for name in rf.live_locals))
    assert out == [0, 1, 4, 9]


def test_refuses():
    def g(x):
        return len(x, k=1)

    insts = B.decode(g.__code__)
    if B.PY311 or B.PY312:
        r = next(n for n, i in enumerate(insts) if i.opname == "KW_NAMES") + 1
        with pytest.raises(R.ResumeUnsupported):
            R.make_resume_function(g.__code__, r, 4, (0,))
    with pytest.raises(R.ResumeUnsupported):
        R.make_resume_function(g.__code__, 0, 0)
    with pytest.raises(R.ResumeUnsupported):
        R.make_resume_function(g.__code__, 2, 1, null_positions=(3,))


def test_wrong_depth_is_an_error():
    def f(x):
        y = x + 1
        return y

    insts = B.decode(f.__code__)
    r = next(n for n, i in enumerate(insts) if i.opname == "STORE_FAST")
    with pytest.raises(R.ResumeUnsupported, match="a stack of 0 where f has 1"):
        R.make_resume_function(f.__code__, r, 0, (), ("x",))  # STORE_FAST needs one item
