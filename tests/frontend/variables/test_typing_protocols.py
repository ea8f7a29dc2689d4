"""isinstance/issubclass against typing Protocols, and typing's classes read from a library."""

import unittest
from typing import Protocol, TypeVar, final, runtime_checkable

import torch

import kiln

_NON_METHOD = r"Protocols with non-method members don.t support issubclass\(\)"


class _ProtocolCase(unittest.TestCase):
    __test__ = False  # (run by the test below, plain and compiled)

    def test_checks(self):  # (CPython test_typing's test_protocol_decorated_with_final_...)
        @final
        @runtime_checkable
        class HasX(Protocol):
            x: int

        class Foo:
            x = 42

        with self.assertRaisesRegex(TypeError, _NON_METHOD):
            issubclass(Foo, HasX)
        with self.assertRaisesRegex(TypeError, _NON_METHOD):
            issubclass(int, HasX)
        self.assertIsInstance(Foo(), HasX)
        self.assertNotIsInstance(42, HasX)


def test_protocol_checks_run_from_the_users_frame_in_order():
    """Note [Builtins: checks against a typing Protocol]: folded while tracing, isinstance(42, P)
    put int in P's negative cache before the program ran the second `with` block again at a break
    (the caught exception is rebuilt there), so issubclass(int, P) no longer raised."""
    for compiled in (True, False):  # (compiled first: `re` has not cached the pattern yet)
        case = _ProtocolCase("test_checks")
        if compiled:
            case.test_checks = kiln.compile(case.test_checks, backend="eager")
        result = unittest.TestResult()
        case.run(result)
        assert result.wasSuccessful(), result.failures + result.errors


def _generic_protocol_subclass(x):
    T = TypeVar("T")

    class P(Protocol[T]):
        pass

    class C(P[T]):
        def __new__(cls, *args):
            self = super().__new__(cls, *args)
            self.test = "OK"
            return self

    return x + 1, C[int]().test


def test_generic_protocol_subclass_with_own_new():
    """(CPython test_typing test_new_called) typing's Generic machinery read a mappingproxy from
    a library module: kiln hashed it (an internal error, then the frame ran eagerly)."""
    kiln.config.strict, strict = True, kiln.config.strict
    try:
        x = torch.randn(3)
        out = kiln.compile(_generic_protocol_subclass, backend="eager")(x)
    finally:
        kiln.config.strict = strict
    assert out[1] == "OK"
    torch.testing.assert_close(out[0], x + 1)
