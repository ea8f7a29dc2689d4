"""Methods, static/class methods and property getters replaced on a class after compiling
recompile (Note [Guards: methods read from a class]); each call is compared with eager."""

import torch

import kiln


def check_calls(fn, x, change):
    """Compiled vs eager before and after `change()` (which edits a class)."""
    compiled = kiln.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(x), fn(x))
    change()
    torch.testing.assert_close(compiled(x), fn(x))


def test_method_replaced_on_a_plain_class():
    class Plain:
        def apply(self, x):
            return x + 1

    p = Plain()

    def change():
        Plain.apply = lambda self, x: x - 1

    check_calls(lambda x: p.apply(x) * 2, torch.ones(3), change)


def test_method_replaced_on_a_module_class():
    class M(torch.nn.Module):
        def helper(self, x):
            return x.sin()

        def forward(self, x):
            return self.helper(x)

    def change():
        M.helper = lambda self, x: x.cos()

    check_calls(M(), torch.randn(3), change)


def test_subclass_shadows_a_base_method_after_compiling():
    class Base:
        def scale(self):
            return 2.0

    class Child(Base):
        pass

    c = Child()

    def change():
        Child.scale = lambda self: 3.0

    check_calls(lambda x: x * c.scale(), torch.ones(2), change)


def test_static_and_class_methods_and_properties_replaced():
    class K:
        factor = 2.0

        @staticmethod
        def s(x):
            return x + 1

        @classmethod
        def c(cls, x):
            return x * cls.factor

        @property
        def p(self):
            return 5.0

    k = K()

    def change():
        K.s = staticmethod(lambda x: x - 1)
        K.c = classmethod(lambda cls, x: x / cls.factor)
        K.p = property(lambda self: 7.0)

    check_calls(lambda x: k.s(x) + k.c(x) + k.p, torch.ones(2), change)
