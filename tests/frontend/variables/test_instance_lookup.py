"""Instance attribute lookup as Python does it: only the class's MRO (not its metaclass), no
__dict__ on `object()` or slotted objects, `__class__` proxies in isinstance, `__del__`, and
kiln's own inspection of values never running the user's hooks."""

import gc

import torch
from frontend_helpers import run_and_compare

import kiln


class Slotted:
    __slots__ = ("a",)


class Proxy:
    """Answers every attribute (`__class__` included) from the object it wraps."""

    def __init__(self, target):
        object.__setattr__(self, "_target", target)

    def __getattribute__(self, name):
        return getattr(object.__getattribute__(self, "_target"), name)


class FakeStr:
    __class__ = str


def instance_attrs_are_not_class_attrs(x):
    obj = Slotted()
    plain = Proxy  # (a class: has __name__ and mro; its instances do not)
    return (
        x + 1,
        hasattr(obj, "__dict__"),
        hasattr(obj, "__name__"),
        hasattr(obj, "mro"),
        hasattr(object(), "__dict__"),
        hasattr((1, 2), "__name__"),
        hasattr(plain, "__name__"),
    )


def test_hasattr_sees_the_class_mro_only():
    run_and_compare(instance_attrs_are_not_class_attrs, torch.ones(2))


def store_into_object_without_dict(x, make):
    obj = make()
    try:
        obj.extra = 1
    except AttributeError as e:
        return x - 1, str(e)
    return x + 1, obj.extra


def test_store_into_object_without_a_dict_raises():
    run_and_compare(store_into_object_without_dict, torch.ones(2), object)
    run_and_compare(store_into_object_without_dict, torch.ones(2), Slotted)


class Plain:
    pass


def isinstance_through_class_attr(x, obj):
    return x + 1, isinstance(obj, str), isinstance(obj, FakeStr), isinstance(obj, Plain)


def test_isinstance_asks_the_class_attribute():
    run_and_compare(isinstance_through_class_attr, torch.ones(2), FakeStr())
    run_and_compare(isinstance_through_class_attr, torch.ones(2), Proxy(Plain()))


log = []


class Finalized:
    def __del__(self):
        log.append("deleted")


def made_and_dropped(x):
    obj = Finalized()
    del obj
    return x + 1


def test_object_with_del_made_and_dropped_is_finalized():
    # an object made in the graph and dropped there was never made at all: its __del__ never ran
    compiled = kiln.compile(made_and_dropped, backend="eager")
    for _ in range(2):
        del log[:]
        compiled(torch.ones(2))
        gc.collect()
        assert log == ["deleted"]


calls = []


class Logged:
    """Every hash, comparison and missing-attribute lookup is recorded."""

    def __hash__(self):
        calls.append("hash")
        return 1

    def __eq__(self, other):
        calls.append("eq")
        return True

    def __getattr__(self, name):
        calls.append(("getattr", name))
        raise AttributeError(name)


held = [Logged()]


def reads_a_list_of_hooked_objects(x):
    n = len(calls)
    items = list(held)  # kiln wraps the list: it must not call the hooks itself
    return x + len(items), len(calls) - n


def test_wrapping_objects_runs_none_of_their_hooks():
    run_and_compare(reads_a_list_of_hooked_objects, torch.ones(2))


class Twice(int):
    __eq__ = str.__eq__  # a slot wrapper of another class: Python raises TypeError


def equal_to_itself(x, make):
    obj = make()
    try:
        same = obj == obj  # asks __eq__ (no identity shortcut outside containers)
    except TypeError:
        return x - 1
    return x + int(same)


class NeverEqual:
    def __eq__(self, other):
        return False


def test_eq_of_an_object_with_itself_asks_eq():
    run_and_compare(equal_to_itself, torch.ones(2), lambda: Twice(3))
    run_and_compare(equal_to_itself, torch.ones(2), NeverEqual)


class BadInit:
    def __init__(self):
        return 10


def init_returning_a_value(x):
    try:
        BadInit()
    except TypeError as e:
        return x - 1, str(e)
    return x + 1, ""


def test_init_returning_a_value_raises():
    run_and_compare(init_returning_a_value, torch.ones(2))


class Counter:
    count = 0

    def __get__(self, obj, objtype=None):
        def lookup(name):
            Counter.count += 1
            raise AttributeError(name)

        return lookup


class HookedByDescriptor:
    __getattribute__ = Counter()  # not a function: not inlined, and never run by kiln itself


def attribute_through_descriptor_hook(x, obj):
    before = Counter.count
    try:
        _ = obj.attr
    except AttributeError:
        pass
    return x + (Counter.count - before)


def test_getattribute_that_is_no_function_runs_once():
    run_and_compare(attribute_through_descriptor_hook, torch.ones(2), HookedByDescriptor())


def store_into_input_without_dict(x, obj):
    try:
        obj.extra = 1
    except AttributeError:
        return x - 1
    return x + 1


def test_store_into_an_input_object_without_a_dict_raises():
    run_and_compare(store_into_input_without_dict, torch.ones(2), Slotted())
