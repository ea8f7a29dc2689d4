"""PyTorch's frontend tests (test/dynamo) run on stock torch.compile and on kiln through a shim.

The test files are PyTorch's, not ours: they are never committed. Each run re-creates them in a
scratch folder (default /work/scratch/conf/dynamo_tests) from a git copy of a repository that holds
them, `git show COMMIT:test/dynamo/<file>`. The default source is the `pytorch/torchdynamo`
repository (TorchDynamo's home before it moved into PyTorch; its test/dynamo is PyTorch's
test/dynamo of October 2022, importing `torchdynamo`, which the worker aliases to `torch._dynamo`).
Get it with the search tool's `fetch github:pytorch/torchdynamo` (lands in
/work/.mirror/pytorch+torchdynamo/repo) or `git clone https://github.com/pytorch/torchdynamo`.
`--dir` runs files already present (e.g. newer copies of pytorch/pytorch's test/dynamo files).

    .venv/bin/python benchmarks/dynamo_conformance.py [--git DIR] [--commit 4c2206be]
        [--files test_functions,test_misc] [--dir DIR] [--json PATH] [--test-timeout 60]
        [--only test_a,test_b]  (only the tests whose names contain one of these)

Each file runs in two worker processes: `stock` (the tests as written, torch.compile) and `kiln`
(`benchmarks/dynamo_shim.py` installed first). Printed per file: tests that pass on stock, how many
of those pass under kiln, then each remaining failure classified:
  wrong-result  an assertion on values failed (compiled output differs from eager)
  kiln-crash    an exception raised inside kiln's own code
  graph-break   kiln broke the graph (or raised Unsupported under fullgraph) where torch captures,
                seen as an Unsupported error or as a frame/op count assertion with breaks counted
  graph-count   same results, but another number of frames/graphs/ops than the test expects
                (kiln splits or counts differently with no graph break, e.g. recompiles)
  graph-text    same results; an assertExpectedInline of torch's printed graph differs
  message       the error the test expects was raised, with another text (kiln's reason)
  torch-refuses the test asserts that torch.compile refuses the code (Unsupported under
                fullgraph); kiln compiled it (whether kiln's result equals eager is for a test
                of ours to show: this run only sees that the refusal did not happen)
  shim          a torch._dynamo feature the shim does not map (ShimLimitation, torch internals,
                torch's log records that a LoggingTestCase counts)
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_GIT = "/work/.mirror/pytorch+torchdynamo/repo"
DEFAULT_COMMIT = "4c2206be"
FILES = [
    "test_functions",
    "test_misc",
    "test_repros",
    "test_modules",
    "test_unspec",
    "test_subgraphs",
    "test_global",
    "test_python_autograd",
    "test_skip_non_tensor",
    "test_nops",
    "test_verify_correctness",
    "test_aot_autograd",
]
SUPPORT = [
    "test_global_declaration",
    "mock_modules/__init__",
    "mock_modules/mock_module1",
    "mock_modules/mock_module2",
    "mock_modules/mock_module3",
]

WORKER = r"""
import importlib, importlib.abc, importlib.util, json, os, signal, sys, traceback, unittest, warnings
warnings.filterwarnings("ignore")
folder, module, mode, test_timeout, root = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
folder = os.path.abspath(folder)
sys.path.insert(0, folder)
sys.path.insert(0, os.path.join(root, "benchmarks"))
import torch
import torch._dynamo


class TorchdynamoAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    # `import torchdynamo.x` (the 2022 test files) is `torch._dynamo.x`.
    def find_spec(self, name, path=None, target=None):
        if name == "torchdynamo" or name.startswith("torchdynamo."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("torch._dynamo" + spec.name[len("torchdynamo"):])

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, TorchdynamoAlias())
import torch._dynamo.test_case, torch._dynamo.testing, torch._dynamo.utils
if not hasattr(torch._dynamo.testing, "requires_static_shapes"):  # 2022 name, gone since
    torch._dynamo.testing.requires_static_shapes = lambda fn: fn
import torch.testing._internal.common_utils as common_utils
if not hasattr(common_utils, "disable_translation_validation_if_dynamic_shapes"):  # newer files
    common_utils.disable_translation_validation_if_dynamic_shapes = lambda fn: fn
if mode == "kiln":
    import dynamo_shim
    dynamo_shim.install()
    from kiln import logs


class TestTimeout(BaseException):
    pass


def on_alarm(signum, frame):
    raise TestTimeout(f"test ran past {test_timeout}s")


signal.signal(signal.SIGALRM, on_alarm)
KILN_DIR = os.path.join(root, "kiln") + os.sep


def describe(err):
    etype, value, tb = err
    # the first non-empty line (torch's TestCase appends "To execute this test, run ..." lines)
    text = [l for l in "".join(traceback.format_exception_only(etype, value)).splitlines() if l.strip()]
    if etype.__name__ == "Unsupported":  # kiln's message: the reason, then "at <user line>"
        text = [" | ".join(l.strip() for l in text)]
    frames = traceback.extract_tb(tb)
    in_kiln = bool(frames) and frames[-1].filename.startswith(KILN_DIR)
    where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    # the line of the test file that failed (an assertion on counts, or on values)
    own = [f for f in frames if os.path.abspath(f.filename).startswith(folder)]
    line = (own[-1].line or "") if own else ""
    last = frames[-1].filename if frames else ""
    in_dynamo = "/torch/_dynamo/" in last and not last.endswith(("testing.py", "test_case.py"))
    return {"type": etype.__name__, "msg": (text[0] if text else etype.__name__)[:300],
            "in_kiln": in_kiln, "in_dynamo": in_dynamo, "where": where, "line": line[:200]}


class Result(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.status = {}

    def addError(self, test, err):
        self.status.setdefault(test.id(), ("error", describe(err)))

    def addFailure(self, test, err):
        self.status.setdefault(test.id(), ("fail", describe(err)))

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self.status.setdefault(test.id(), ("fail", describe(err)))

    def addSkip(self, test, reason):
        self.status[test.id()] = ("skip", {"msg": str(reason)[:120]})

    def addExpectedFailure(self, test, err):
        self.status[test.id()] = ("xfail", describe(err))

    def addUnexpectedSuccess(self, test):
        self.status[test.id()] = ("ok", {"msg": "unexpected success"})


def tests_of(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from tests_of(t)
        else:
            yield t


out = {}
try:
    mod = importlib.import_module(module)
except BaseException as e:
    print("@@RESULT@@" + json.dumps({"<import>": ("error", {"msg": f"{type(e).__name__}: {e}"[:300]})}))
    sys.exit(0)
result = Result()
only = [n for n in os.environ.get("KILN_CONFORMANCE_ONLY", "").split(",") if n]
for test in tests_of(unittest.TestLoader().loadTestsFromModule(mod)):
    tid = test.id().split(".", 1)[-1]
    if only and not any(n in tid for n in only):
        continue
    before = logs.counters["stats"]["graph_breaks"] if mode == "kiln" else 0
    signal.alarm(test_timeout)
    try:
        test.run(result)
    except TestTimeout as e:
        result.status.setdefault(test.id(), ("error", {"type": "Timeout", "msg": str(e)}))
    finally:
        signal.alarm(0)
    status, info = result.status.get(test.id(), ("ok", {}))
    if mode == "kiln":
        info = dict(info, breaks=logs.counters["stats"]["graph_breaks"] - before)
    out[tid] = (status, info)
print("@@RESULT@@" + json.dumps(out, default=str))
"""


def recreate(git_dir, commit, folder, names):
    """Write each test file (and its helpers) from the git copy into the scratch folder."""
    os.makedirs(os.path.join(folder, "mock_modules"), exist_ok=True)
    for name in names + SUPPORT:
        text = subprocess.run(
            ["git", "-C", git_dir, "show", f"{commit}:test/dynamo/{name}.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        with open(os.path.join(folder, name + ".py"), "w") as f:
            f.write(text)


def run_file(folder, module, mode, args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("KILN_CACHE_DIR", "/tmp/kiln-cache-dynamo-conformance")
    cmd = [args.python, "-c", WORKER, folder, module, mode, str(args.test_timeout), ROOT]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=folder
        )
    except subprocess.TimeoutExpired:
        return {"<file>": ["error", {"msg": f"file ran past {args.timeout}s"}]}
    for line in proc.stdout.splitlines()[::-1]:
        if line.startswith("@@RESULT@@"):
            return json.loads(line[len("@@RESULT@@") :])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"<file>": ["error", {"msg": f"worker died (rc {proc.returncode}): {tail[:200]}"}]}


COUNT_WORDS = (
    "graphs)",  # len(eager.graphs), len(backend.graphs)
    "counters[",  # counters["graph_break"] / ["unimplemented"]: breaks counted as torch counts
    "frame_count",
    "op_count",
    "unique_graphs",
    "calls_captured",
    "frames",
    "!= 1",
    "!= 2",
)


REFUSAL_WORDS = ("Unsupported not raised", "expected side effect error; not found")


def classify(info):
    """The reason a test that passes on stock torch.compile fails under kiln."""
    msg, etype = info.get("msg", ""), info.get("type", "")
    if etype == "ShimLimitation" or "ShimLimitation" in msg:
        return "shim"
    if etype == "Unsupported" or "kiln.exc.Unsupported" in msg:
        return "graph-break"
    if info.get("in_kiln"):
        return "kiln-crash"
    if info.get("in_dynamo") and etype != "Unsupported":
        return "shim"  # torch's own dynamo machinery (export, its checks) run under the shim
    if etype == "AssertionError" and "records" in info.get("line", ""):
        # a LoggingTestCase counting torch's own log records (recompiles, graph breaks): kiln
        # logs through its own channels, which the shim does not map
        return "shim"
    if etype == "AssertionError" and any(w in info.get("line", "") for w in COUNT_WORDS):
        # kiln made another number of graphs/frames/ops than torch: a break where torch
        # captures ("graph-break"), or a graph cut or counted differently ("graph-count")
        return "graph-break" if info.get("breaks") else "graph-count"
    if etype == "AssertionError" and "ExpectedInline" in info.get("line", ""):
        return "graph-text"  # same values; the graph prints differently (names, layout)
    if etype == "AssertionError" and any(w in msg for w in REFUSAL_WORDS):
        return "torch-refuses"  # the test asserts torch's own limit: kiln compiled it instead
    if etype == "AssertionError" and "does not match" in msg:
        return "message"  # the expected error was raised, its text differs (kiln's reason)
    if etype in ("AssertionError", "Timeout"):
        return "wrong-result" if etype == "AssertionError" else "timeout"
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--git", default=DEFAULT_GIT, help="git dir holding test/dynamo")
    ap.add_argument("--commit", default=DEFAULT_COMMIT)
    ap.add_argument("--dir", help="run the files already in this folder (no re-creation)")
    ap.add_argument("--folder", default="/work/scratch/conf/dynamo_tests")
    ap.add_argument("--files", default=",".join(FILES))
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per file and mode")
    ap.add_argument("--test-timeout", type=int, default=60)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json")
    ap.add_argument("--only", help="run only the tests whose names contain one of these (a,b,c)")
    args = ap.parse_args()
    if args.only:
        os.environ["KILN_CONFORMANCE_ONLY"] = args.only
    names = args.files.split(",")
    folder = args.dir or args.folder
    if not args.dir:
        recreate(args.git, args.commit, folder, names)
    report = {}
    totals = [0, 0]
    for name in names:
        stock = run_file(folder, name, "stock", args)
        kiln = run_file(folder, name, "kiln", args)
        passing = sorted(t for t, (s, _) in stock.items() if s == "ok")
        ok = [t for t in passing if kiln.get(t, ["missing"])[0] == "ok"]
        failures = {}
        for t in passing:
            if t in ok:
                continue
            status, info = kiln.get(t, ["missing", {"msg": "not run under kiln"}])
            failures[t] = dict(info, reason=classify(info))
        report[name] = {
            "tests": len(stock),
            "stock": len(passing),
            "kiln": len(ok),
            "failures": failures,
        }
        totals = [totals[0] + len(passing), totals[1] + len(ok)]
        pct = 100.0 * len(ok) / len(passing) if passing else 100.0
        refused = sum(f["reason"] == "torch-refuses" for f in failures.values())
        counted = len(passing) - refused  # (tests asserting torch's own refusal left out)
        without = 100.0 * len(ok) / counted if counted else 100.0
        print(
            f"{name:26s} tests {len(stock):4d}  pass stock {len(passing):4d}  pass kiln {len(ok):4d}  ({pct:5.1f}%; {without:5.1f}% without torch-refuses)",
            flush=True,
        )
        for t, f in failures.items():
            print(
                f"    [{f['reason']}] {t}: {f.get('type', '')}: {f.get('msg', '')[:200]} @{f.get('where', '')}",
                flush=True,
            )
    pct = 100.0 * totals[1] / totals[0] if totals[0] else 100.0
    print(f"{'TOTAL':26s} pass stock {totals[0]:4d}  pass kiln {totals[1]:4d}  ({pct:5.1f}%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
