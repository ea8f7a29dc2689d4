"""Classes with their own Python __new__, instantiated in the compiled frame (Note [Objects: a
class's own __new__]): __new__ then __init__ as type.__call__ runs them, compared with eager."""

import torch
from frontend_helpers import assert_same, run_and_compare

import kiln


class Counted:
    def __new__(cls, *args, **kwargs):
        inst = object.__new__(cls)
        inst.made_by_new = True  # (then __init__ overwrites `scale`)
        inst.scale = -1.0
        return inst

    def __init__(self, scale):
        self.scale = scale


class Doubled(Counted):
    def __new__(cls, *args, **kwargs):
        return super(Doubled, cls).__new__(cls)  # noqa: UP008 (the explicit form)

    def __init__(self, scale):
        super().__init__(scale * 2)


class Left:
    def __new__(cls):
        return super().__new__(cls)

    def __init__(self):
        super().__init__()
        self.left = hasattr(self, "right")  # (True: Right.__init__ ran first via super())


class Right:
    def __new__(cls):
        return super().__new__(cls)

    def __init__(self):
        super().__init__()
        self.right = 2.0


class Both(Left, Right):
    def __new__(cls):
        return super().__new__(cls)


class Impostor:
    """__new__ makes an instance of another class: Impostor.__init__ must not run."""

    def __new__(cls, value):
        other = object.__new__(Counted)
        other.scale = value
        return other

    def __init__(self, value):
        self.scale = 1000.0


def test_new_then_init():
    def fn(x):
        c = Counted(3.0)
        return x * c.scale, c.made_by_new

    run_and_compare(fn, torch.randn(4), fullgraph=True, expected_graphs=1)


def test_super_new_with_arguments_dropped():
    def fn(x):
        d = Doubled(1.5)
        return x + d.scale, type(d).__name__

    run_and_compare(fn, torch.randn(4), fullgraph=True)


def test_multiple_bases():
    def fn(x):
        b = Both()
        return x * b.right, b.left

    run_and_compare(fn, torch.randn(3), fullgraph=True)


def test_new_returning_another_class_skips_init():
    def fn(x):
        obj = Impostor(0.5)
        return x * obj.scale, type(obj).__name__

    run_and_compare(fn, torch.randn(3), fullgraph=True)


def test_object_leaves_the_frame():
    def fn(x):
        return Doubled(x.sum())

    x = torch.randn(3)
    got = kiln.compile(fn, backend="eager", fullgraph=True)(x)
    assert type(got) is Doubled and got.made_by_new
    assert_same(fn(x).scale, got.scale)
