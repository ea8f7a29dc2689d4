"""Classes defined inside compiled functions (Note [Classes: local classes])."""

import torch

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


def test_escaping_class_runs_eagerly():
    def returns_class(x):
        class K:
            pass

        return x + 1, K.__name__, K

    def returns_instance(x):
        class K:
            def __init__(self, v):
                self.v = v

        return K(x + 1)

    # a new class per call, as in eager (the frame runs eagerly)
    f = run_and_compare.__globals__["kiln"].compile(returns_class, backend="eager")
    a, b = f(t(2))[2], f(t(2))[2]
    assert a is not b and a.__name__ == "K"
    g = run_and_compare.__globals__["kiln"].compile(returns_instance, backend="eager")
    x = t(2)
    assert torch.equal(g(x).v, x + 1) and type(g(x)) is not type(g(x))


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
