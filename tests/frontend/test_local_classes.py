"""Classes defined inside compiled functions (Note [Classes: local classes])."""

import gc

import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare


def t(*shape):
    return torch.randn(*shape)


class Base:
    def __init__(self, k):
        self.k = k

    def scale(self, x):
        return x * self.k


def local_class(x):
    class Affine:
        def __init__(self, a, b):
            self.a = a
            self.b = b

        def apply(self, v):
            return v * self.a + self.b

    return Affine(2.0, 1.0).apply(x)


def local_class_features(x):
    class Thing:
        factor = 3
        label: str = "thing"

        @staticmethod
        def twice(v):
            return v * 2

        @classmethod
        def make(cls):
            return cls()

        @property
        def f(self):
            return self.factor + 1

    obj = Thing.make()
    return Thing.twice(x) * obj.f, Thing.label


def local_subclass(x):
    class Child(Base):
        def __init__(self):
            super().__init__(4)

        def scale(self, v):
            return super().scale(v) + 1

    c = Child()
    return c.scale(x), isinstance(c, Base)


def local_class_over_constant(x):
    n = 5

    class Adder:
        def add(self, v):
            return v + n

    return Adder().add(x)


def local_exception_class(x):
    class Stop(Exception):
        pass

    try:
        raise Stop("s")
    except Stop as e:
        return x + len(str(e))


def test_local_class_one_graph():
    for fn in (local_class, local_class_features, local_subclass, local_class_over_constant):
        run_and_compare(fn, t(3), expected_graphs=1, expected_breaks=0)


def test_local_exception_class():
    run_and_compare(local_exception_class, t(3), expected_graphs=1, expected_breaks=0)


def test_escaping_class_is_built_again_per_call():
    """A class (or an instance of it) that leaves the frame: the transformed code runs the
    class statement again, so each call returns a new class, as in eager; one graph."""
    import kiln

    def returns_class(x):
        class K:
            def f(self):
                return 1

        return x + 1, K.__name__, K

    def returns_instance(x):
        class K:
            def __init__(self, v):
                self.v = v

        return K(x + 1)

    kiln.reset()
    f = kiln.compile(returns_class, backend="eager")
    a, b = f(t(2))[2], f(t(2))[2]
    assert (
        a is not b and a.__name__ == "K" and a.__qualname__ == returns_class(t(2))[2].__qualname__
    )
    assert a().f() == 1
    g = kiln.compile(returns_instance, backend="eager")
    x = t(2)
    assert torch.equal(g(x).v, x + 1) and type(g(x)) is not type(g(x))
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 2


class Holder:
    pass


def test_local_classes_stored_on_an_input():
    """Instances of a local subclass of a local class stored on an input, the base class too:
    rebuilt once per call (the instance's class derives from the stored class)."""
    import kiln

    def stored(x, box):
        class A:
            def __init__(self, v):
                self.v = v

        class B(A):
            def g(self):
                return self.v * 2

        box.b = B(x)
        box.cls = A
        return box.b.g(), A(3)

    kiln.reset()
    compiled = kiln.compile(stored, backend="eager")
    boxes = []
    for f in (stored, compiled, compiled):
        box = Holder()
        out, a3 = f(t(2) + 1, box)
        boxes.append(box)
        assert isinstance(box.b, box.cls) and isinstance(a3, box.cls) and a3.v == 3
        assert type(box.b).__qualname__ == "test_local_classes_stored_on_an_input.<locals>." + (
            "stored.<locals>.B"
        )
        torch.testing.assert_close(out, box.b.v * 2)
    assert boxes[1].cls is not boxes[2].cls  # a new class per call, as in eager
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_local_class_live_at_a_graph_break():
    import kiln

    def f(x):
        class K:
            def __init__(self, v):
                self.v = v

        k = K(x * 2)
        kiln.graph_break()
        return k.v + 1, type(k).__name__

    kiln.reset()
    compiled = kiln.compile(f, backend="eager")
    x = t(3)
    for _ in range(2):
        out, name = compiled(x)
        torch.testing.assert_close(out, x * 2 + 1)
        assert name == "K"


def test_class_body_with_side_effect_is_not_traced():
    def f(x, log):
        class K:
            log.append("body")  # runs once per call, in Python

        return x + 1, K.__name__

    # (one call: the resume function after the break would see a new class K on each call)
    run_and_compare(f, t(3), [], calls=1)


def test_class_over_rebound_variable_is_not_traced():
    def f(x):
        n = 1

        class K:
            def get(self):
                return n

        n = 2
        return x + K().get()

    run_and_compare(f, t(3), calls=1)


def method_raises_a_local_exception_class(x):
    class Stop(Exception):
        pass

    class Raises:
        def __eq__(self, other):
            raise Stop

    items = [Raises(), 1]
    kiln.graph_break()  # both classes are built again; Raises's methods see the new Stop
    try:
        items.__contains__(1)
    except Stop:
        return x + 1
    return x - 1


def test_rebuilt_local_class_methods_see_the_rebuilt_classes_they_close_over():
    run_and_compare(method_raises_a_local_exception_class, torch.ones(2))


def method_raises_an_exception_object_of_the_frame(x):
    exc = TypeError("bad")

    class BadIterable:
        def __iter__(self):
            raise exc

    b = BadIterable()
    kiln.graph_break()
    try:
        iter(b)
    except TypeError as e:
        return x + 1, e is exc
    return x - 1, False


def test_local_class_over_an_exception_object_raises_that_object():
    # (a class statement that breaks makes a new class per call: the resume recompiles)
    run_and_compare(method_raises_an_exception_object_of_the_frame, torch.ones(2), calls=1)


class _Registry:
    pass


def _subclasses_listed_at_a_break(x):
    class Child(_Registry):
        pass

    class Other(_Registry):
        pass

    listed = _Registry.__subclasses__()  # (a break: Python lists them)
    return x + 1, listed == [Child, Other], len(listed)


def test_classes_made_in_the_frame_exist_once_when_python_lists_subclasses():
    """(CPython test_descr.test_remove_subclass) the classes the trace built leave their real
    base when the trace is over, and the transformed code builds the frame's own before the
    instruction at the break, in the order eager made them."""
    compiled = kiln.compile(_subclasses_listed_at_a_break, backend="eager")
    for fn in (_subclasses_listed_at_a_break, compiled, compiled):
        gc.collect()  # (classes sit in reference cycles: the last call's are freed here)
        assert fn(t(3))[1:] == (True, 2)


def _subclass_of_a_resume_argument(x):
    class Parent:
        pass

    before = Parent.__subclasses__()  # (a break: Parent is an argument of the resume function)

    class Child(Parent):
        pass

    after = Parent.__subclasses__()
    return x + 1, before == [], after == [Child]


def test_class_made_in_a_resume_function_is_listed_once():
    """The trace of the resume function built Child over the real Parent: without being taken
    off it, Parent listed that Child and the one the program built."""
    compiled = kiln.compile(_subclass_of_a_resume_argument, backend="eager")
    for _ in range(2):
        assert compiled(t(3))[1:] == (True, True)
