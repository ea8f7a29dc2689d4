"""Breaks inside functions an instruction calls for its operand's type (Note [Nested breaks:
implicit calls]): `__setattr__`, property getters and setters, `__getitem__`, `__setitem__`,
`__delitem__`, `__getattr__`. Eager results, the break placed in the callee (two graphs), and
placed at the call where the instruction is more than the call."""

import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


def t(*shape):
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape) + 1


class AddsOnSet:
    def __setattr__(self, name, value):
        print("break")
        super().__setattr__(name, value + 1)  # (zero-argument super() in the resume function)


def sets_an_attribute(obj, x):
    obj.attr = x + 2
    return x + 4


def test_a_break_inside_setattr(capsys):
    # (torch's test_nested_store_attr_graph_break: the setter's rest is traced)
    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(sets_an_attribute, backend=backend)
    obj, x = AddsOnSet(), t(3)
    torch.testing.assert_close(f(obj, x), x + 4)
    torch.testing.assert_close(obj.attr, x + 3)
    assert capsys.readouterr().out == "break\n"
    assert backend.calls == 2
    assert kiln.counters["stats"]["graph_breaks"] == 1


class Bag:
    def __init__(self):
        self.d = {}

    def __setitem__(self, k, v):
        print("set")
        self.d[k] = v * 2

    def __getitem__(self, k):
        y = self.d[k] + 1
        print("get")
        return y * 3

    def __delitem__(self, k):
        print("del")
        del self.d[k]


def subscripts(x):
    b = Bag()
    b["k"] = x + 1
    b["j"] = x * 5
    y = b["k"] + 1
    del b["k"]
    return y, list(b.d), b.d["j"] * 7


def test_breaks_inside_setitem_getitem_delitem(capsys):
    run_and_compare(subscripts, t(3), expected_graphs=5)
    assert capsys.readouterr().out == "set\nset\nget\ndel\n" * 3


class Weighted:
    def __init__(self, w):
        self._w = w

    @property
    def w(self):
        print("get")
        return self._w.sin()

    @w.setter
    def w(self, v):
        print("set")
        self._w = v.cos()


def properties(x):
    p = Weighted(x * 2)
    y = p.w + x
    p.w = y * 2
    return p.w + 1, p._w


def test_breaks_inside_a_property_getter_and_setter(capsys):
    run_and_compare(properties, t(4), expected_graphs=4)
    assert capsys.readouterr().out == "get\nset\nget\n" * 3


class Lazy:
    def __init__(self, x):
        self.x = x

    def __getattr__(self, name):
        print("getattr", name)
        return self.x * len(name)


def through_getattr(x):
    return Lazy(x + 1).abc + x


def test_a_break_inside_getattr(capsys):
    run_and_compare(through_getattr, t(3), expected_graphs=2)
    assert capsys.readouterr().out == "getattr abc\n" * 3


class PropertyAndGetattr:
    @property
    def p(self):
        print("break")
        raise AttributeError("p")

    def __getattr__(self, name):
        return 7


def property_falling_back(x):
    return x + PropertyAndGetattr().p


def test_a_getter_that_may_fall_back_to_getattr_keeps_the_break_at_the_load(capsys):
    # (after the break the getter raises AttributeError: eager goes on into __getattr__)
    run_and_compare(property_falling_back, t(3))
    assert capsys.readouterr().out == "break\n" * 3


class Base:
    def value(self, x):
        return x * 2


class Derived(Base):
    def value(self, x):
        print("break")
        return super().value(x) + 1


def zero_argument_super_after_a_break(x):
    return Derived().value(x + 1) * 3


def test_zero_argument_super_in_a_callees_resume_function(capsys):
    # (the boxed resume function's first local is the method's self again after unpacking)
    run_and_compare(zero_argument_super_after_a_break, t(3), expected_graphs=2)
    assert capsys.readouterr().out == "break\n" * 3


class TwoBreaks:
    def __init__(self):
        self.log = []

    def __setitem__(self, k, v):
        print("one")
        v = v + 1
        print("two")
        self.log.append((k, v * 2))


def setitem_breaking_twice(x):
    b = TwoBreaks()
    b[0] = x * 3
    return b.log[0][1] + 1, len(b.log)


def test_a_second_break_in_the_chain_of_a_dropped_result(capsys):
    # (the second break is inside the resumed __setitem__: the chain's prologue drops it again)
    run_and_compare(setitem_breaking_twice, t(3), expected_graphs=3)
    assert capsys.readouterr().out == "one\ntwo\n" * 3


class TryInside:
    def __setitem__(self, k, v):
        print("one")
        try:
            print("two")  # (a break inside a try block: placed at the resume function's call)
        finally:
            self.v = v * 2


def setitem_then_a_break_at_the_prologue(x):
    b = TryInside()
    b[0] = x + 1
    return b.v + 1


def test_a_break_at_the_prologue_call_of_a_dropped_result(capsys):
    run_and_compare(setitem_then_a_break_at_the_prologue, t(3))
    assert capsys.readouterr().out == "one\ntwo\n" * 3


def reads_through_a_call(p, x):
    return p.w * x


def property_two_levels_down(x):
    p = Weighted(x)
    return reads_through_a_call(p, x + 1) - 1


def test_a_property_below_a_call(capsys):
    run_and_compare(property_two_levels_down, t(3), expected_graphs=2)
    assert capsys.readouterr().out == "get\n" * 3


def setitem_in_a_loop(x):
    b = TwoBreaks()
    for v in [x, x + 1, x * 2]:
        b["k"] = v  # (the loop's iterator lies below the store's operands)
    return [v for _, v in b.log], len(b.log)


def test_a_dropped_result_with_a_stack_below_it(capsys):
    # (the second break stops the caller's resume function at its prologue call: the stack it
    # keeps is the iterator alone, the call's result dropped; a NULL was left there, a crash)
    run_and_compare(setitem_in_a_loop, t(3))
    assert capsys.readouterr().out == "one\ntwo\n" * 9
