"""CPython conformance: the interpreter's own test modules run plain and with every test compiled.

Each chosen module of the running interpreter's `test` package (`lib/pythonX.Y/test`, shipped with
every CPython, so the corpus is not ours) runs twice, each time in a worker process: plain, and with
every unittest test method wrapped by `kiln.compile(backend="eager")` (the wrapper replaces the
bound method on the TestCase instance, so setUp/tearDown stay plain). A per-test alarm turns a hang
into a failure of that test, and a per-module timeout bounds the worker.

    .venv/bin/python benchmarks/cpython_conformance.py [--modules test_scope,test_with]
        [--timeout 600] [--test-timeout 20] [--json PATH] [--breaks]

Printed per module: tests, passed plain, passed compiled, and each test that passes plain and fails
compiled with the first line of its error. A difference is a kiln bug: a compiled test must behave
as the plain one, graph breaks included (`--breaks` also prints the graph-break reasons counted).
"""

import argparse
import json
import os
import subprocess
import sys
import time

# Modules of CPython's test package that exercise the language and the builtin types, chosen to run
# in a few minutes each on one core (both modes).
MODULES = [
    "test_grammar",
    "test_scope",
    "test_exceptions",
    "test_raise",
    "test_with",
    "test_contextlib",
    "test_class",
    "test_descr",
    "test_super",
    "test_dataclasses",
    "test_functools",
    "test_itertools",
    "test_enum",
    "test_collections",
    "test_dict",
    "test_dictviews",
    "test_list",
    "test_tuple",
    "test_set",
    "test_string",
    "test_unpack",
    "test_unpack_ex",
    "test_generators",
    "test_listcomps",
    "test_setcomps",
    "test_dictcomps",
    "test_genexps",
    "test_opcodes",
    "test_augassign",
    "test_keywordonlyarg",
    "test_positional_only_arg",
    "test_named_expressions",
    "test_extcall",
    "test_funcattrs",
    "test_decorators",
    "test_property",
    "test_operator",
    "test_copy",
    "test_defaultdict",
    "test_ordered_dict",
    "test_deque",
    "test_userdict",
    "test_userlist",
    "test_bool",
    "test_unary",
    "test_compare",
    "test_richcmp",
    "test_slice",
    "test_range",
    "test_sort",
    "test_math",
    "test_patma",
    "test_global",
    "test_types",
    "test_weakref",
]

WORKER = r"""
import json, os, signal, sys, traceback, unittest, warnings
warnings.filterwarnings("ignore")
module, mode, test_timeout, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
compiled = mode == "compiled"
# both modes import kiln (and so torch): what differs between them is compilation alone (torch's
# import of typing_extensions replaces typing._collect_parameters, whose doctest then is not found)
import kiln
from kiln import logs
# what the imports made (torch's and kiln's objects) is left out of every collection: a test that
# calls gc.collect() a hundred times (test_tuple test_bug7466) walks only its own objects
import gc
gc.freeze()


class TestTimeout(BaseException):
    pass


def on_alarm(signum, frame):
    raise TestTimeout(f"test ran past {test_timeout}s")


signal.signal(signal.SIGALRM, on_alarm)


def tests_of(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from tests_of(t)
        else:
            yield t


def first_line(err):
    text = "".join(traceback.format_exception_only(err[0], err[1])).strip().splitlines()
    return text[-1][:240] if text else err[0].__name__


class Result(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.status = {}

    def addError(self, test, err):
        self.status.setdefault(test.id(), ("error", first_line(err)))

    def addFailure(self, test, err):
        self.status.setdefault(test.id(), ("fail", first_line(err)))

    def addSubTest(self, test, subtest, err):
        if err is not None:
            kind = "fail" if issubclass(err[0], test.failureException) else "error"
            self.status.setdefault(test.id(), (kind, first_line(err)))

    def addSkip(self, test, reason):
        self.status[test.id()] = ("skip", str(reason)[:120])

    def addExpectedFailure(self, test, err):
        self.status[test.id()] = ("ok", "expected failure")

    def addUnexpectedSuccess(self, test):
        self.status[test.id()] = ("fail", "unexpected success")


loader = unittest.TestLoader()
suite = loader.loadTestsFromName("test." + module)
tests = list(tests_of(suite))
result = Result()
out = {}
import builtins
saved_builtins = dict(vars(builtins))
for index, test in enumerate(tests):
    if index < start:  # run by an earlier worker that crashed after them
        continue
    tid = test.id()
    print("@@START@@" + json.dumps([index, tid]), flush=True)
    if os.environ.get("KILN_CPYCONF_PROGRESS"):  # watch a long module midway
        with open(os.environ["KILN_CPYCONF_PROGRESS"], "a") as f:
            f.write(f"{module} {mode} {index} {tid}\n")
    name = getattr(test, "_testMethodName", None)
    if compiled and name and hasattr(test, name):
        method = getattr(test, name)
        if getattr(method, "__unittest_skip__", False) is False and hasattr(method, "__func__"):
            try:
                setattr(test, name, kiln.compile(method, backend="eager"))
            except Exception as e:
                result.status[tid] = ("error", f"kiln.compile: {type(e).__name__}: {e}"[:240])
                out[tid] = result.status[tid]
                continue
    before = dict(logs.counters["graph_break"]) if compiled else {}
    signal.alarm(test_timeout)
    try:
        test.run(result)
    except TestTimeout as e:
        result.status.setdefault(tid, ("error", f"timeout: {e}"))
    finally:
        signal.alarm(0)
    status = result.status.get(tid, ("ok", ""))
    if compiled:
        after = logs.counters["graph_break"]
        breaks = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        status = (*status, breaks)
    out[tid] = status
    print("@@DONE@@" + json.dumps([tid, status], default=str), flush=True)
    # a test that replaced a builtin and did not get to restore it (test_lru_reentrancy_with_len
    # sets builtins.len; kiln's own Python code then calls it) must not fail the tests after it
    for name in set(vars(builtins)) - set(saved_builtins):
        delattr(builtins, name)
    for name, value in saved_builtins.items():
        if vars(builtins).get(name) is not value:
            setattr(builtins, name, value)
print("@@END@@", flush=True)
"""


def run_module(module, mode, timeout, test_timeout, python):
    """Run one module in one mode in workers; returns {test id: [status, message(, breaks)]}.

    A worker that dies (a segfault, a C stack overflow) costs the test it was running: the next
    worker starts after it."""
    env = dict(os.environ)
    env.setdefault("KILN_CACHE_DIR", "/tmp/kiln-cache-cpython-conformance")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    out, start = {}, 0
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            out["<module>"] = ["error", f"module ran past {timeout}s"]
            return out
        try:
            proc = subprocess.run(
                [python, "-c", WORKER, module, mode, str(test_timeout), str(start)],
                capture_output=True,
                text=True,
                timeout=left,
                env=env,
                cwd="/tmp",
            )
            stdout, rc, stderr = proc.stdout, proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as e:
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc, stderr = "timeout", ""
        current, ended = None, False
        for line in stdout.splitlines():
            if line.startswith("@@START@@"):
                current = json.loads(line[len("@@START@@") :])
            elif line.startswith("@@DONE@@"):
                tid, status = json.loads(line[len("@@DONE@@") :])
                out[tid] = status
                current = None
            elif line.startswith("@@END@@"):
                ended = True
        if ended:
            return out
        if current is None:  # died before (or between) tests
            tail = (stderr.strip().splitlines() or ["no output"])[-1]
            out["<module>"] = ["error", f"worker died (rc {rc}): {tail[:200]}"]
            return out
        index, tid = current
        out[tid] = ["error", f"worker died in this test (rc {rc})"]
        start = index + 1


def compare(plain, compiled):
    """Counts and the tests that pass plain but not compiled."""
    passed_plain = {t for t, s in plain.items() if s[0] == "ok"}
    passed_compiled = {t for t, s in compiled.items() if s[0] == "ok"}
    diffs = {
        t: (compiled.get(t) or ["missing", "not run compiled"])[1]
        for t in sorted(passed_plain - passed_compiled)
    }
    breaks = {}
    for s in compiled.values():
        for reason, n in (s[2] if len(s) > 2 else {}).items():
            breaks[reason] = breaks.get(reason, 0) + n
    return {
        "tests": len(plain),
        "passed_plain": len(passed_plain),
        "passed_compiled": len(passed_compiled & passed_plain),
        "differences": diffs,
        "graph_breaks": breaks,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--modules", default=",".join(MODULES))
    ap.add_argument("--timeout", type=int, default=900, help="seconds per module and mode")
    ap.add_argument("--test-timeout", type=int, default=30, help="seconds per test")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", help="write the full results here")
    ap.add_argument("--breaks", action="store_true", help="print graph-break reasons per module")
    ap.add_argument("--progress", help="append each test's name here as it starts")
    args = ap.parse_args()
    if args.progress:
        os.environ["KILN_CPYCONF_PROGRESS"] = os.path.abspath(args.progress)
    report = {"python": sys.version.split()[0], "modules": {}}
    total = [0, 0, 0]
    for module in args.modules.split(","):
        plain = run_module(module, "plain", args.timeout, args.test_timeout, args.python)
        compiled = run_module(module, "compiled", args.timeout, args.test_timeout, args.python)
        row = compare(plain, compiled)
        report["modules"][module] = row
        total = [
            total[0] + row["tests"],
            total[1] + row["passed_plain"],
            total[2] + row["passed_compiled"],
        ]
        print(
            f"{module:28s} tests {row['tests']:4d}  passed plain {row['passed_plain']:4d}"
            f"  passed compiled {row['passed_compiled']:4d}",
            flush=True,
        )
        for test, msg in [*plain.items(), *compiled.items()]:
            if test == "<module>":
                print(f"    MODULE ERROR: {msg[1]}", flush=True)
        if "<module>" in compiled:
            continue
        for test, msg in row["differences"].items():
            print(f"    DIFF {test}: {msg}", flush=True)
        if args.breaks:
            for reason, n in sorted(row["graph_breaks"].items(), key=lambda kv: -kv[1])[:10]:
                print(f"    break x{n}: {reason[:160]}")
    print(
        f"{'TOTAL':28s} tests {total[0]:4d}  passed plain {total[1]:4d}  passed compiled {total[2]:4d}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
