"""Side effects keep eager's order: reads before the replay's writes, stores in program order,
printing around them (Note [Side effects: replay order])."""

import torch
from frontend_helpers import run_and_compare

import kiln


class Box:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __eq__(self, other):
        return type(other) is Box and _same(vars(self), vars(other))


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def run_both(fn, make_args):
    """Eager and compiled (twice) on fresh arguments; returns the argument sets to compare."""
    eager_args = make_args()
    expected = fn(*eager_args)
    kiln.reset()
    compiled = kiln.compile(fn, backend="eager")
    for _ in range(2):
        args = make_args()
        got = compiled(*args)
        assert _same(expected, got)
        assert _same(list(map(_state, eager_args)), list(map(_state, args)))
    return compiled


def _state(obj):
    return vars(obj) if isinstance(obj, Box) else obj


def old_value_appended(box, xs, x):
    old = box.a
    box.a = x * 2
    xs.append(old)
    return x + 1


def test_replay_reads_values_before_writing():
    run_both(old_value_appended, lambda: (Box(a=torch.ones(2)), [], torch.zeros(2)))
    assert kiln.counters["stats"]["graph_breaks"] == 0


def store_through_old_path(box, x):
    inner = box.sub
    box.sub = Box(k=0)
    inner.k = x * 3  # the object that was box.sub, not the new one
    return x


def test_replay_stores_into_the_objects_read_before():
    run_both(store_through_old_path, lambda: (Box(sub=Box(k=1)), torch.ones(2)))


SEEN = None


def global_alias_then_append(xs, x):
    global SEEN
    SEEN = xs
    xs.append(x + 1)
    SEEN = [SEEN, len(xs)]
    return x


def test_global_and_list_stores_in_order():
    global SEEN
    run_both(global_alias_then_append, lambda: ([torch.zeros(1)], torch.ones(1)))
    assert len(SEEN) == 2 and SEEN[1] == 2


def prints_between_mutations(xs, d, x):
    xs.append(1)
    y = x * 2
    print("after append", len(xs), sorted(d))
    d["k"] = y
    xs.append(2)
    print("after store", len(xs), sorted(d))
    d.pop("k")
    return y + 1


def test_prints_see_mutations_in_eager_order(capsys):
    run_both(prints_between_mutations, lambda: ([], {"a": 0}, torch.ones(2)))
    text = capsys.readouterr().out
    once = "after append 1 ['a']\nafter store 2 ['a', 'k']\n"
    assert text == once * 3


def cell_and_list(x):
    total = 0
    log = []

    def bump(v):
        nonlocal total
        total = total + v
        log.append(total)

    bump(1)
    y = x * 2
    print("total", total, log)
    bump(2)
    return y, total, log


def test_closure_cells_and_lists_across_a_break(capsys):
    # the nonlocal store in the inlined bump() is a store into the frame's cell
    run_and_compare(cell_and_list, torch.ones(2), expected_breaks=1)
    assert capsys.readouterr().out == "total 1 [1]\n" * 3


class Loud:
    def __init__(self):
        object.__setattr__(self, "events", [])

    def __setattr__(self, name, value):
        print("set", name)
        self.events.append(name)
        object.__setattr__(self, name, value * 2 if isinstance(value, int) else value)


def loud_stores(obj, x):
    obj.a = 1
    y = x + obj.a  # reads what __setattr__ stored (2), in eager
    print("between")
    obj.b = 3
    return y * obj.b


def test_custom_setattr_runs_in_python_in_order(capsys):
    kiln.reset()
    o1, o2 = Loud(), Loud()
    expected = loud_stores(o1, torch.ones(1))
    got = kiln.compile(loud_stores, backend="eager")(o2, torch.ones(1))
    torch.testing.assert_close(got, expected)
    assert o1.events == o2.events == ["a", "b"]
    out = capsys.readouterr().out
    assert out == "set a\nbetween\nset b\n" * 2


class Steps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.history = []
        self.count = 0

    def forward(self, x):
        self.count += 1
        self.history.append(self.count)
        y = x * self.count
        self.last = y
        return y


def test_module_state_stores_in_order():
    kiln.reset()
    m1, m2 = Steps(), Steps()
    opt = kiln.compile(m2, backend="eager")
    for _ in range(3):
        torch.testing.assert_close(opt(torch.ones(2)), m1(torch.ones(2)))
    assert m1.history == m2.history == [1, 2, 3]
    torch.testing.assert_close(m2.last, m1.last)


def make_accumulator():
    total = 0

    def add(v):
        nonlocal total
        total = total + v
        return total

    return add


ACC = make_accumulator()


def calls_closure_from_outside(x):
    a = ACC(1)
    b = ACC(2)
    return x * a + b


def test_nonlocal_store_in_an_inlined_closure_from_a_global():
    # the cell of a closure reached from a global: cell_contents stored through
    # ___G['ACC'].__closure__[0]; each call sees the previous total (a guard on it)
    global ACC
    ACC = make_accumulator()
    kiln.reset()
    f = kiln.compile(calls_closure_from_outside, backend="eager")
    x = torch.ones(1)
    torch.testing.assert_close(f(x), x * 1 + 3)
    torch.testing.assert_close(f(x), x * 4 + 6)
    assert ACC.__closure__[0].cell_contents == 6
    assert kiln.counters["stats"]["graph_breaks"] == 0
