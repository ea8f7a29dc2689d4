"""A store that may drop the last reference to an object whose class has a Python __del__ breaks
before the store, so the finalizer runs where Python runs it (Note [Finalizers: a store that may
run __del__], Note [Finalizers: locals]); a dict's iterator live at a break stays a real one
(Note [Dicts: iterators at a break])."""

import collections

import torch

import kiln


class Noted:
    """Appends ("del", name) to its log when it is finalized."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def __del__(self):
        self.log.append(("del", self.name))


class Plain:
    def __init__(self, name):
        self.name = name


def _outcome(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # compared between eager and compiled
        return None, (type(e), str(e))


def _same(a, b):
    if isinstance(a, tuple):
        assert type(b) is tuple and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        assert torch.equal(a, b) if torch.is_tensor(a) else a == b


def check(fn, make, breaks=None):
    """fn(*make()) eagerly and compiled: the same result, exception and log (make() returns the
    arguments, the log last: fresh objects for each run, no other reference kept to them)."""
    kiln.reset()
    args = make()
    expected = _outcome(fn, args)
    expected_log = list(args[-1])
    del args
    args = make()
    got = _outcome(kiln.compile(fn, backend="eager"), args)
    assert got[1] == expected[1]
    if expected[1] is None:
        _same(got[0], expected[0])
    assert list(args[-1]) == expected_log
    if breaks is not None:
        assert sum(kiln.counters["graph_break"].values()) == breaks, kiln.counters["graph_break"]
    return [msg for msg in kiln.counters["graph_break"]]


# --- a dict whose iterator a finalizer breaks --------------------------------------------------


class Clears(int):
    """An int whose finalizer empties the dict `table` it is a value of."""

    def __del__(self):
        self.table.clear()


def replace_while_iterating(x, table, log):
    for pair in table.items():
        log.append(pair[0])
        if pair[0] == 1:
            table[1] = None  # drops Clears(1): its __del__ clears the dict being iterated
        x = x + 1
    return x


def make_clearing_table():
    table = {}
    for k in range(5):
        v = Clears(k)
        v.table = table
        table[k] = v
    del v
    return torch.ones(2), table, []


def test_a_store_whose_finalizer_clears_the_iterated_dict_raises_as_in_python():
    msgs = check(replace_while_iterating, make_clearing_table)
    assert any("may run Clears.__del__" in m for m in msgs), msgs


# --- order of finalizers against the frame's own effects ----------------------------------------


def dict_store(x, d, log):
    log.append("before")
    d["a"] = None
    log.append("after")
    return x + 1


def test_dict_store_runs_the_finalizer_at_the_store():
    def make():
        log = []
        return torch.ones(2), {"a": Noted("a", log), "b": 1}, log

    msgs = check(dict_store, make)
    assert msgs == ["dict.__setitem__ may run Noted.__del__ (Python runs it at the store)"]


def dict_pop_clear_del(x, d, e, od, log):
    log.append(1)
    d.pop("a")  # its result dropped at once: Noted.__del__ runs here
    log.append(2)
    del e["k"]
    log.append(3)
    od.clear()
    log.append(4)
    return x * 2


def test_dict_pop_del_and_ordered_dict_clear():
    def make():
        log = []
        od = collections.OrderedDict(p=Noted("od", log))
        return torch.ones(2), {"a": Noted("a", log)}, {"k": Noted("k", log)}, od, log

    check(dict_pop_clear_del, make)


def list_and_deque_stores(x, xs, dq, log):
    log.append(1)
    xs[0] = 5
    log.append(2)
    xs.pop()
    log.append(3)
    del xs[0]
    log.append(4)
    dq.popleft()
    log.append(5)
    dq.append(7)  # a full deque (maxlen 2) drops its leftmost item
    log.append(6)
    return x - 1


def test_list_and_deque_stores():
    def make():
        log = []
        xs = [Noted("x0", log), Noted("x1", log), Noted("x2", log)]
        dq = collections.deque([Noted("d0", log), Noted("d1", log)], maxlen=2)
        return torch.ones(2), xs, dq, log

    check(list_and_deque_stores, make)


def attribute_stores(x, obj, log):
    log.append("set")
    obj.child = None
    log.append("del")
    del obj.other
    log.append("end")
    return x + 2


def test_attribute_assignment_and_deletion():
    def make():
        log = []
        obj = Plain("holder")
        obj.child, obj.other = Noted("child", log), Noted("other", log)
        return torch.ones(2), obj, log

    check(attribute_stores, make)


def pop_then_rebind(x, d, log):
    v = d.pop("a")  # breaks; the resume function then holds v alone
    log.append("popped")
    v = None  # Python runs Noted.__del__ here
    log.append("rebound")
    return x + 3, v


def test_a_local_holding_the_last_reference_after_a_break():
    def make():
        log = []
        return torch.ones(2), {"a": Noted("a", log)}, log

    msgs = check(pop_then_rebind, make)
    assert any(m.startswith("rebinding the local 'v' may run Noted.__del__") for m in msgs), msgs


def clear_in_loop_then_continue(x, d, log):
    for k in d:
        v = d[k]
        if k == "b":
            d[k] = None
            log.append("stored")
        log.append(k)
    del v
    return x


def test_a_loop_local_keeps_the_value_until_rebound():
    def make():
        log = []
        return torch.ones(2), {"a": Noted("a", log), "b": Noted("b", log), "c": 3}, log

    check(clear_in_loop_then_continue, make)


# --- no finalizer: traced as before ------------------------------------------------------------


def plain_stores(x, d, xs, obj, log):
    d["a"] = Plain("new")
    xs.pop()
    obj.child = None
    for item in xs:
        log.append(item.name)
    item = None  # a loop variable rebound: held by xs too
    log.append(len(xs))
    return x + 1


def test_objects_without_a_python_del_do_not_break():
    def make():
        obj = Plain("o")
        obj.child = Plain("c")
        return torch.ones(2), {"a": Plain("a")}, [Plain("p"), Plain("q")], obj, []

    assert check(plain_stores, make, breaks=0) == []


class DelOnInstanceOnly:
    pass


def test_a_del_set_on_the_instance_is_not_a_finalizer():
    def make():
        log = []
        o = DelOnInstanceOnly()
        o.__del__ = lambda: log.append("never")  # Python looks __del__ up on the type
        return torch.ones(2), {"a": o}, [Plain("p"), Plain("q")], Plain("o"), log

    assert check(plain_stores, make, breaks=0) == []


# --- a dict's iterator across a graph break -----------------------------------------------------


def grow_after_a_break(x, d, log):
    for k in d:
        kiln.graph_break()
        if k == 1:
            d[10] = 0  # Python's iterator raises at its next step
        x = x + k
    return x


def test_a_dict_grown_after_a_break_raises_at_the_next_step():
    def make():
        return torch.ones(2), {0: 0, 1: 1, 2: 2}, []

    check(grow_after_a_break, make)


def break_once_then_loop(x, d, log):
    total = x
    for k, v in d.items():
        if k == "b":
            kiln.graph_break()
        total = total + v
    return total


def test_a_dict_loop_that_breaks_once_is_traced_after_the_break():
    def make():
        return torch.ones(2), {"a": 1, "b": 2, "c": 3, "d": 4}, []

    check(break_once_then_loop, make)
    # the resume function traced the rest of the loop over the real iterator: no break there
    assert kiln.counters["graph_break"].total() == 1, kiln.counters["graph_break"]


def loop_over_finalized(x, xs, log):
    for item in xs:  # each rebinding of item: xs still holds the old one
        log.append(item.name)
        x = x + 1
    return x


def test_a_loop_over_an_argument_list_of_finalized_objects_does_not_break():
    def make():
        log = []
        return torch.ones(2), [Noted("a", log), Noted("b", log)], log

    assert check(loop_over_finalized, make, breaks=0) == []


class NotedDict(dict):
    """A dict that appends "dict freed" to the log it holds when it is finalized."""

    def __del__(self):
        self["log"].append("dict freed")


def exhaust_then_break(x, make_iter, log):
    it = make_iter(NotedDict(log=log))  # made in Python (a class with __del__): a break
    for _ in it:
        pass  # the iterator ran out: it lets go of the dict here
    kiln.graph_break()
    log.append("after")
    return x + 1


def test_an_exhausted_dict_iterator_rebuilt_at_a_break_lets_go_of_its_dict():
    for make_iter in (iter, lambda d: iter(d.items())):

        def make(make_iter=make_iter):
            return torch.ones(2), make_iter, []

        check(exhaust_then_break, make)


def test_an_object_made_in_the_frame_is_finalized_when_python_drops_it():
    """Note [Finalizers: objects made in the frame]: `iter(A())` run to its end frees the A (its
    __del__ runs at the StopIteration), and a later read sees what __del__ did."""

    class Items(list):
        def __del__(self):
            self.log.append(("del", "items"))

    def run_out(x, log):
        items = Items([x])
        items.log = log
        it = iter(items)
        del items
        total = next(it)
        for _ in it:
            pass
        return total + len(log), list(log)

    def made_and_dropped(x, log):
        Noted("b", log)
        return x * 2, len(log)

    check(run_out, lambda: (torch.ones(2), []))
    check(made_and_dropped, lambda: (torch.ones(2), []))
    msgs = check(
        lambda x, log: (x + 1, Noted("c", log).name, list(log)), lambda: (torch.ones(2), [])
    )
    assert any("has a Python __del__" in m for m in msgs), msgs


def test_free_after_iterating():
    """CPython's support.check_free_after_iterating, compiled: the list subclass made in the frame
    is freed when its iterator ends, so its __del__ has run before gc.collect returns."""
    import gc

    def check_free(iter_fn):
        class A(list):
            def __del__(self):
                nonlocal done
                done = True
                try:
                    next(it)
                except StopIteration:
                    pass

        done = False
        it = iter_fn(A())
        try:
            next(it)
        except StopIteration:
            pass
        gc.collect()
        return done

    for iter_fn in (iter, reversed):  # (3.13's reversed list iterator keeps its list: False)
        kiln.reset()
        assert kiln.compile(check_free, backend="eager")(iter_fn) is check_free(iter_fn)


def test_a_value_a_broken_call_returned_is_dropped_where_python_drops_it():
    """Note [Finalizers: values on a resume's stack]: `Noted(...).name` breaks at the call; the
    attribute read that drops the object breaks too, so __del__ runs before `list(log)`."""

    def fn(x, log):
        return x + 1, Noted("c", log).name, list(log)

    msgs = check(fn, lambda: (torch.ones(2), []))
    assert any(m.startswith("dropping a value a broken call returned") for m in msgs), msgs

    def kept(x, log):
        v = Noted("d", log)  # stored: held by the local until the return
        log.append(v.name)
        return x + 1, list(log)

    msgs = check(kept, lambda: (torch.ones(2), []))
    assert not any(m.startswith("dropping") for m in msgs), msgs


class _Finalized(list):
    """A list subclass whose __del__ logs (traced as a list where it is plain otherwise)."""

    def __del__(self):
        _deleted.append("del")


_deleted = []


def _iterated_to_the_end(iter_fn):
    gc_collect = __import__("gc").collect
    gc_collect()  # a break: what follows runs in a resume function
    it = iter_fn(_Finalized())
    try:
        next(it)
    except StopIteration:
        pass
    seen = len(_deleted)  # iter(): freed at the StopIteration; 3.13's reversed(): still held
    gc_collect()
    return seen, it is not None


def test_an_iterator_holds_its_object_as_pythons_does():
    for iter_fn in (iter, reversed):
        _deleted.clear()
        expected = _iterated_to_the_end(iter_fn)
        _deleted.clear()
        kiln.reset()
        assert kiln.compile(_iterated_to_the_end, backend="eager")(iter_fn) == expected


def test_only_a_python_del_counts():
    """A C class's finalizer slot is no Python __del__ (3.12 made _io's classes heap types, whose
    `_IOBase.__del__` is a slot wrapper): a StringIO made in the frame does not break."""
    import io

    from kiln.frontend.source import finalizer_class

    assert finalizer_class(io.StringIO) is None
    assert finalizer_class(type("Own", (io.StringIO,), {})) is None
    assert finalizer_class(Noted) is Noted
