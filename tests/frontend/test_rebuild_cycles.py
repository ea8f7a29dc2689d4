"""Objects made in the frame that reach each other, rebuilt at a graph break (Note [Rebuilding:
objects in a cycle]) and what kiln holds while it falls back."""

import collections
import gc
import subprocess
import sys
import weakref

import torch
from frontend_helpers import run_and_compare

import kiln


class Node:
    def __init__(self, value, parent=None):
        self.value = value
        self.parent = parent
        self.children = []
        if parent is not None:
            parent.children.append(self)


def tree_with_parent_links(x):
    root = Node(x)
    a, b = Node(x + 1, root), Node(x * 2, root)
    b.value = b.value + 1
    leaf = Node(x - 1, a)
    kiln.graph_break()  # root, a, b, leaf are rebuilt: each reaches the others
    same = [leaf.parent.parent is root, root.children[0] is a, a.children[0] is leaf]
    return leaf.parent.parent.children[1].value + leaf.value, same, len(root.children)


def test_tree_with_parent_links_rebuilt_at_a_break():
    run_and_compare(tree_with_parent_links, torch.randn(3), expected_graphs=2)


class Peer:
    pass


def two_peers(x):
    p, q = Peer(), Peer()
    p.other, q.other = q, p
    p.me = p  # (an object holding itself)
    p.t = x + 1
    kiln.graph_break()
    return p.other.other is p, q.other.other is q, p.me is p, p.other.other.t * 2


def test_objects_holding_each_other_and_themselves():
    run_and_compare(two_peers, torch.randn(2), expected_graphs=2)


def callbacks_in_a_dead_cycle(check):
    alist = []

    class C:
        def acallback(self, ignore):
            alist.append(self.c)

    c1, c2 = C(), C()
    c1.c, c2.c = c2, c1
    c1.wr = weakref.ref(c2, c1.acallback)
    c2.wr = weakref.ref(c1, c2.acallback)

    def went_away(ignore):
        alist.append("C went away")

    wr = weakref.ref(C, went_away)
    del c1, c2, C
    check(list(alist))  # (CPython's test_weakref test_callback_in_cycle_resurrection)
    gc.collect()
    check(list(alist))
    check(wr())


def test_weakref_callbacks_of_a_dead_cycle_run_where_eager_runs_them():
    seen_eager, seen_compiled = [], []
    callbacks_in_a_dead_cycle(seen_eager.append)
    kiln.reset()
    kiln.compile(callbacks_in_a_dead_cycle, backend="eager")(seen_compiled.append)
    assert seen_compiled == seen_eager == [[], ["C went away"], None]


_FAILED_COMPILE = """
import gc, weakref, kiln
from kiln import config, faults

@kiln.disable
def arm():
    faults._armed = "bytecode"

def dies_after_a_failed_compile(check):
    class C:
        pass

    obj = C()
    wr = weakref.ref(C)
    arm()  # a break: the resume function's compile then fails
    faults._armed = None
    del obj, C
    gc.collect()
    check(wr())

config.strict = False  # (kiln's failure: the frame runs eagerly)
seen = []
kiln.compile(dies_after_a_failed_compile, backend="eager")(seen.append)
print(seen == [None], gc.isenabled())
"""


def test_a_failed_compile_keeps_nothing_of_the_frame_alive():
    """The error of a compile that failed inside kiln holds the trace (frames, values): dropped
    before the frame runs eagerly. (In a fresh interpreter: torch.compile run inside an earlier
    test's eager higher-order op keeps frames' values of its own.)"""
    out = subprocess.run(
        [sys.executable, "-c", _FAILED_COMPILE], capture_output=True, text=True, timeout=300
    )
    assert out.stdout.split() == ["True", "True"], out.stdout + out.stderr


class Holder:
    def cb(self, ignore):
        pass


def weakref_to_a_bound_method_argument(callback, check):
    kiln.graph_break()  # `callback` is an input of the resume function from here on
    wr = weakref.ref(callback)  # (a break: the stack's `callback` rebuilt)
    check((wr() is callback, callback.__self__ is not None))
    del callback
    gc.collect()
    check(wr())  # the argument's object: alive in the caller, so not None


def test_bound_method_reaching_the_frame_keeps_its_identity_at_a_break():
    """A bound method the frame received was rebuilt as a new method object at a break, so a
    weak reference made there pointed at a temporary that died at once (None, a callback run)."""
    runs = []
    for fn in (
        weakref_to_a_bound_method_argument,
        kiln.compile(weakref_to_a_bound_method_argument),
    ):
        h = Holder()
        callback, seen = h.cb, []
        fn(callback, seen.append)
        runs.append([s if isinstance(s, tuple) else s is callback for s in seen])
    assert runs[1] == runs[0] == [(True, True), True]


class ClearsOnCompare:
    def __init__(self, items):
        self.items = items

    def __eq__(self, other):
        self.items.clear()
        return False


def deque_holding_an_object_that_holds_it(n):
    d = collections.deque(range(n))
    d[n // 2] = ClearsOnCompare(d)
    found = n in d  # (a break: the comparison clears the deque being searched: RuntimeError)
    return found, len(d)


def list_holding_an_object_that_holds_it(x):
    items = [x + 1]
    node = Node(items)
    items.append(node)
    kiln.graph_break()
    return items[1].value is items, node.value[1] is node, items[0] * 2


def test_a_container_in_a_cycle_is_one_object_after_a_break():
    """The deque that an object made in the frame holds, and that holds the object, was rebuilt
    twice (the object's copy emptied by the comparison: no 'mutated during iteration')."""
    run_and_compare(deque_holding_an_object_that_holds_it, 8)
    run_and_compare(list_holding_an_object_that_holds_it, torch.randn(2))
