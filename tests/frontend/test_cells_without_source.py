"""Free variables of methods reached through super() (no source): read and guarded."""

import torch

import kiln


def _family():
    class Base:
        @classmethod
        def factor(cls):
            if cls is Leaf:
                return 5
            return 2

        @staticmethod
        def unit():
            return 7

    class Mid(Base):
        def scale(self, x):
            return x * super().factor()

        @staticmethod
        def shifted(x):
            return x + super(Mid, Mid).unit()

    class Leaf(Mid):
        pass

    def rebind_leaf(new):
        nonlocal Leaf
        Leaf = new

    return Leaf, Mid, rebind_leaf


def test_classmethod_through_super_reads_a_local_class():
    leaf_cls, mid_cls, _ = _family()
    obj = leaf_cls()

    def f(x):
        return obj.scale(x)

    out = kiln.compile(f, fullgraph=True)(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 5.0))


def test_staticmethod_through_two_argument_super():
    _, mid_cls, _ = _family()

    def f(x):
        return mid_cls.shifted(x)

    torch.testing.assert_close(
        kiln.compile(f, fullgraph=True)(torch.ones(2)), torch.full((2,), 8.0)
    )


def test_rebinding_the_free_variable_is_seen():
    leaf_cls, _, rebind = _family()
    obj = leaf_cls()

    def f(x):
        return obj.scale(x)

    compiled = kiln.compile(f, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 5.0))
    rebind(object)  # `cls is Leaf` is False from now on
    torch.testing.assert_close(compiled(torch.ones(2)), f(torch.ones(2)))
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
