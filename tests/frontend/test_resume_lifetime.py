"""Locals die where eager's do, across graph breaks (Note [Resume: arguments moved, not held]).

The first call traces: objects the trace saw live on in reference cycles until a collection.
"""

import collections
import gc
import os
import pathlib
import subprocess
import sys
import types
import weakref

import torch

import kiln
from kiln.frontend.resume import call_moving
from tests.frontend.frontend_helpers import run_and_compare

# The first op run on meta tensors in a process imports torch._dynamo lazily (torch's
# `_disable_dynamo`), and that import's frames sit in a reference cycle with the frames that
# called it, kiln's trace among them, until a collection: do it once, outside any test.
torch.empty(1, device="meta") + 1


class Obj:
    pass


@torch.compiler.disable
def collect():
    """gc.collect(), returning None (its count would differ per call: a recompile)."""
    gc.collect()


def deleted_after_break(x):
    o = Obj()
    w = weakref.ref(o)  # (a break: weak references are made in Python)
    y = x + 1
    kiln.graph_break()
    del o
    collect()
    return y * 2, w() is None


def checked_right_after_del(x):
    o = Obj()
    w = weakref.ref(o)
    del o
    return x + 1, w() is None  # traced: the answer must not be the trace's


def run_fresh(code):
    """Run `code` in a new Python process with the repository importable; it must succeed."""
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests" / "frontend")]),
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_weak_reference_called_after_the_frame_let_go():
    # No collection here: the tracing call's cycles may hold o, so the call that counts is the
    # third. In a fresh process: an eager torch.cond whose branch raised (tests/frontend/
    # test_cond.py) leaves torch's frame-evaluation hook installed, and under such a hook
    # CPython's callers hold their arguments (Note [Resume: arguments moved, not held]).
    code = (
        "import torch, kiln\n"
        "from tests.frontend.test_resume_lifetime import checked_right_after_del as f\n"
        "x = torch.randn(3)\n"
        "compiled = kiln.compile(f, backend='eager')\n"
        "compiled(x); compiled(x)\n"
        "expected, got = f(x), compiled(x)\n"
        "assert kiln.counters['stats']['recompiles'] == 0\n"
        "assert got[1] is expected[1] is True, (got, expected)\n"
        "torch.testing.assert_close(got[0], expected[0])\n"
    )
    run_fresh(code)


def test_local_deleted_after_a_break_is_freed():
    run_and_compare(deleted_after_break, torch.randn(3))


def dropped_in_loop(x):
    dead = []
    for i in range(3):
        o = Obj()
        w = weakref.ref(o)
        x = x + i
        kiln.graph_break()  # every iteration: resume functions as tail calls
        o = None
        collect()
        dead.append(w() is None)
    return x, dead


def test_local_dropped_in_a_loop_that_breaks_every_iteration_is_freed():
    # (the loop's int is specialised per iteration: recompiles, so not run_and_compare)
    x = torch.randn(3)
    expected = dropped_in_loop(x)
    got = kiln.compile(dropped_in_loop, backend="eager")(x)
    assert got[1] == expected[1] == [True, True, True]
    torch.testing.assert_close(got[0], expected[0])


def closure_after_break(x):
    o = Obj()
    w = weakref.ref(o)
    scale = 3

    def f(t):
        return t * scale  # a cell: the resume function is made with this frame's cells

    y = f(x)
    kiln.graph_break()
    del o
    collect()
    return f(y), w() is None


def test_local_freed_in_resume_function_with_cells():
    run_and_compare(closure_after_break, torch.randn(3))


def tensor_freed_after_break(x, freed):
    big = x * 2
    ref = weakref.ref(big)
    out = big.sum()
    kiln.graph_break()
    del big
    collect()
    freed.append(ref() is None)
    return out


def test_graph_output_freed_after_a_break():
    # a graph's outputs are not kept alive by the transformed frame past its resume call
    # (the counting test backend keeps its example inputs: a real backend)
    for backend in ("aot_eager", "kiln"):
        run_and_compare(tensor_freed_after_break, torch.randn(3), [], backend=backend)


def test_call_moving_empties_the_box_before_the_call():
    def f(a, b):
        seen.append(list(box))
        return a + b

    seen = []
    box = [1, 2]
    assert call_moving(f, box) == 3
    assert seen == [[]] and box == []
    assert call_moving(lambda: "none", []) == "none"


def class_made_and_deleted(x):
    class Local:
        @staticmethod
        def scale(t):
            return t * 3

    w_class, w_static = weakref.ref(Local), weakref.ref(Local.scale)
    y = Local.scale(x)
    del Local
    collect()
    return y, w_class() is None, w_static() is None


def test_class_made_in_the_frame_dies_at_del():
    # Note [Guards: identity without ownership]: the resume function's guards pin the class and
    # its static function by identity, weakly; the static function is reloaded from the class.
    # (A new class per call: each call recompiles, as under torch.compile. In a fresh process,
    # as test_weak_reference_called_after_the_frame_let_go, for the same reason.)
    code = (
        "import torch, kiln\n"
        "from tests.frontend.test_resume_lifetime import class_made_and_deleted as f\n"
        "x = torch.randn(3)\n"
        "expected = f(x)\n"
        "assert expected[1:] == (True, True)\n"
        "got = kiln.compile(f, backend='eager')(x)\n"
        "assert got[1:] == expected[1:], got\n"
        "torch.testing.assert_close(got[0], expected[0])\n"
    )
    run_fresh(code)


def test_identity_guard_on_a_dead_class_fails_and_recompiles():
    def f(x, obj):
        return x + obj.k

    def make():
        class Local:
            k = 2

        return Local()

    counts = []
    cf = kiln.compile(f, backend=lambda gm, ex: counts.append(1) or gm.forward)
    x = torch.randn(3)
    first = make()
    w = weakref.ref(type(first))
    torch.testing.assert_close(cf(x, first), x + 2)
    del first
    gc.collect()
    assert w() is None  # the entry's TYPE_MATCH guard does not keep the class alive
    torch.testing.assert_close(cf(x, make()), x + 2)  # a new class: the guard fails, recompiles
    assert len(counts) == 2


_SCRATCH = types.ModuleType("kiln_test_scratch")
_MADE = []


class Finalized:
    """An object with __del__: making one breaks the graph, so it reaches the resume function as
    a stack value (`__stack0`)."""

    def __init__(self):
        _MADE.append(weakref.ref(self))

    def __del__(self):
        pass


class SetsModuleAttr:
    """A context manager whose __enter__ cannot be traced after a side effect: the resume
    function that enters it runs eagerly, as written."""

    def __enter__(self):
        self.entered = True
        _SCRATCH.flag = True
        return self

    def __exit__(self, *exc):
        _SCRATCH.flag = False


def deleted_in_an_eager_resume_function(x):
    o = Finalized()
    with SetsModuleAttr():
        del o
        collect()
        freed = _MADE[-1]() is None
    return x + 1, freed


def test_stack_value_deleted_in_a_resume_function_that_runs_eagerly_is_freed():
    # In a fresh process, and from the second call on: the tracing call's cycles may hold the
    # object (see test_weak_reference_called_after_the_frame_let_go).
    code = (
        "import torch, kiln\n"
        "from tests.frontend.test_resume_lifetime import deleted_in_an_eager_resume_function as f\n"
        "x = torch.randn(2)\n"
        "expected = f(x)\n"
        "compiled = kiln.compile(f, backend='eager')\n"
        "compiled(x)\n"
        "for _ in range(2):\n"
        "    got = compiled(x)\n"
        "    assert got[1] is expected[1] is True, (got, expected)\n"
        "    torch.testing.assert_close(got[0], expected[0])\n"
    )
    run_fresh(code)


def cycle_dropped_before_a_break(x):
    o = Obj()
    w = weakref.ref(o)
    kiln.graph_break()
    o.me = [o]  # a store the transformed code replays at the next break: a reference cycle
    y = x + 1
    del o
    collect()  # (a break: the cycle is collected there in eager)
    return y, w() is None


def test_object_stored_to_at_a_break_is_not_held_by_kiln_temps():
    # Note [Resume: temps released before the break]: the object the replayed store writes to is
    # rebuilt into a temp of the transformed code, which must not hold it through the collection.
    code = (
        "import torch, kiln\n"
        "from tests.frontend.test_resume_lifetime import cycle_dropped_before_a_break as f\n"
        "x = torch.randn(2)\n"
        "expected = f(x)\n"
        "assert expected[1] is True\n"
        "compiled = kiln.compile(f, backend='eager')\n"
        "for _ in range(2):\n"
        "    got = compiled(x)\n"
        "    assert got[1] is True, got\n"
        "    torch.testing.assert_close(got[0], expected[0])\n"
    )
    run_fresh(code)


def class_keyed_after_break(x):
    class Key:
        table = collections.OrderedDict()  # (a call in the body: the class statement breaks)

    Key.table[Key] = x.sum()  # a store replayed by the resume function's transformed code
    y = x + 1
    return y, weakref.ref(Key)


def test_class_made_per_call_used_as_a_dict_key_dies_after_the_call():
    # Note [Bytecode: classes loaded weakly]: the replayed `table[Key] = ...` loads Key weakly, so
    # neither the code nor its module's globals keep the class of each call alive
    compiled = kiln.compile(class_keyed_after_break, backend="eager")
    x = torch.randn(3)
    refs = []
    for _ in range(3):
        y, ref = compiled(x)
        torch.testing.assert_close(y, x + 1)
        refs.append(ref)
        del y, ref
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


class Tracked:
    pass


@torch.compiler.disable
def live_tracked():
    """How many Tracked objects exist now (the instruction Python runs at the break)."""
    return sum(type(o) is Tracked for o in gc.get_objects())


def two_objects_then_a_break(x):
    first, second = Tracked(), Tracked()
    first.v, second.v = 1, 2
    n = live_tracked()
    return x + first.v + second.v, n


def test_objects_made_in_the_frame_exist_when_python_runs_the_break():
    # Note [Graph breaks: objects made in the frame exist at the break]
    run_and_compare(two_objects_then_a_break, torch.randn(2))


def _fresh_calls(name, check):
    """Code for run_fresh: eager and three compiled calls of `name`, each result `check`ed. In a
    fresh process: in the suite's, a frame-evaluation hook torch left installed keeps them alive
    (see test_weak_reference_called_after_the_frame_let_go)."""
    return (
        "import torch, kiln\n"
        f"from tests.frontend.test_resume_lifetime import {name} as f\n"
        "compiled = kiln.compile(f, backend='eager')\n"
        "for fn in (f, compiled, compiled, compiled):\n"
        f"    got = fn(torch.randn(3)){check}\n"
        "    assert got, fn\n"
    )


def _builtin_method_dropped(x):
    f = {}.get  # a C function no module holds: an argument of the resume function
    kiln.graph_break()
    w = weakref.ref(f)
    same = w() is f
    del f
    return x + 1, same, w() is None


def test_builtin_function_an_argument_of_a_resume_function_dies_at_del():
    """(CPython test_weakref.test_cfunction) the resume function's guard on the C function's
    identity holds it by a weak reference: a strong one kept it alive after `del f`."""
    run_fresh(_fresh_calls("_builtin_method_dropped", "[1:] == (True, True)"))


class _Method:
    def m(self):
        return 1


def _made_ref_of_a_dropped_stack_value(x):
    r = weakref.WeakMethod(_Method().m)  # (a break: made by Python, passed on the stack)
    wr = weakref.ref(r)  # made in the resume function's trace
    del r
    return x * 2, wr() is None


def test_ref_made_in_a_resume_function_does_not_hold_its_referent():
    """(CPython test_weakref.test_no_cycles) `weakref.ref(r)` of a value the resume function got
    on its stack is made before the instruction at the next break: made after it, the stack
    argument it read kept `r` alive through the call (`del r` then freed nothing)."""
    run_fresh(_fresh_calls("_made_ref_of_a_dropped_stack_value", "[1] is True"))


class _MyRef(weakref.ref):
    pass


def _subclass_refs_listed(x):
    o = Obj()
    r1 = _MyRef(o)  # (a break: weakref subclasses are made by Python)
    r2 = weakref.ref(o)  # made in the resume function's trace
    refs = weakref.getweakrefs(o)  # (a break)
    return x + 1, refs == [r2, r1], weakref.getweakrefcount(o)


def test_ref_made_in_the_frame_exists_when_python_lists_the_referents_refs():
    """(CPython test_weakref.test_subclass_refs_dont_replace_standard_refs) a weak reference made
    in the trace exists when Python runs the instruction at the next break."""
    assert _subclass_refs_listed(torch.randn(3))[1:] == (True, 2)
    compiled = kiln.compile(_subclass_refs_listed, backend="eager")
    compiled(torch.randn(3))  # (traces: what the trace saw may live on until a collection)
    for _ in range(2):
        assert compiled(torch.randn(3))[1:] == (True, 2)
