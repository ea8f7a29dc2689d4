"""kiln.mark_dynamic as a promise (Note [Shapes: marked dims are a promise]): a trace that
specialises a marked dim raises ConstraintViolation, ranges are checked and guarded; eager is the
oracle wherever the compile goes through."""

import pytest
import torch
from frontend_helpers import CountingBackend, assert_same

import kiln
from kiln.exc import ConstraintViolation, ForbiddenInTrace


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    yield
    kiln.reset()


def _pins_three(x):
    if x.shape[0] == 3:
        return x.sin()
    return x.cos()


def _pins_indirectly(x):
    if x.shape[0] > 3:
        return x.cos()
    if x.shape[0] < 3:
        return x * 2
    return x.sin()


def _bounds_below(x):
    if x.shape[0] > 3:
        return x.cos()
    return x.sin()


def _marked(n, **bounds):
    x = torch.randn(n, 2)
    kiln.mark_dynamic(x, 0, **bounds)
    return x


@pytest.mark.parametrize("fn", [_pins_three, _pins_indirectly])
def test_specialising_a_marked_dim_raises(fn):
    compiled = kiln.compile(fn, backend="eager")
    x = _marked(3)
    for _ in range(2):  # no entry was kept: the second call raises too
        with pytest.raises(ConstraintViolation, match=r"x\.size\(\)\[0\] was marked dynamic.*to 3"):
            compiled(x)


def test_specialising_through_an_intermediate_raises():
    def fn(x, y):
        z = x * y
        if z.shape[0] == 3:
            return z.cos()
        return x.cos()

    y = _marked(3)
    with pytest.raises(ConstraintViolation, match="specialised it to 3"):
        kiln.compile(fn, backend="eager")(y, y)


def test_a_size_outside_the_marked_range_raises():
    with pytest.raises(ConstraintViolation, match=r"size is 8, not in that range"):
        kiln.compile(_pins_three, backend="eager")(_marked(8, min=2, max=5))


def test_a_fact_that_not_every_size_in_the_range_satisfies_raises():
    # x.size()[0] != 3 holds for 4, not for 3 in [2, 5]
    with pytest.raises(ConstraintViolation, match=r"x\.size\(\)\[0\] != 3.*\[2, 5\]"):
        kiln.compile(_pins_three, backend="eager")(_marked(4, min=2, max=5))
    kiln.reset()
    with pytest.raises(ConstraintViolation, match=r"x\.size\(\)\[0\] > 3"):
        kiln.compile(_bounds_below, backend="eager")(_marked(4, min=2, max=5))


def test_a_range_the_facts_hold_on_compiles_and_is_guarded():
    backend = CountingBackend()
    compiled = kiln.compile(_bounds_below, backend=backend, fullgraph=True)
    x = _marked(5, min=4, max=9)
    assert_same(_bounds_below(x), compiled(x))
    for n in (4, 9):  # in the range: the entry
        x = torch.randn(n, 2)
        assert_same(_bounds_below(x), compiled(x))
    assert backend.calls == 1
    x = torch.randn(10, 2)  # beyond max: the range is a guard, another entry
    assert_same(_bounds_below(x), compiled(x))
    assert backend.calls == 2
    kiln.reset()
    backend = CountingBackend()  # without a range: a bound is no specialisation
    compiled = kiln.compile(_bounds_below, backend=backend, fullgraph=True)
    for x in (_marked(3), torch.randn(2, 2)):
        assert_same(_bounds_below(x), compiled(x))
    assert backend.calls == 1


def test_bad_bounds_are_refused():
    x = torch.randn(4, 2)
    with pytest.raises(ValueError, match="min 5 > max 3"):
        kiln.mark_dynamic(x, 0, min=5, max=3)
    with pytest.raises(TypeError, match="min and max are sizes"):
        kiln.mark_dynamic(x, 0, min=2.5)


@pytest.mark.parametrize("fullgraph", [False, True])
def test_mark_dynamic_in_compiled_code_raises(fullgraph):
    def helper(x):
        kiln.mark_dynamic(x, 0)

    def fn(x):
        helper(x)  # (inlined: the call is in compiled code all the same)
        return x * x

    x = torch.randn(3, 3)
    with pytest.raises(ForbiddenInTrace, match="forbidden") as info:
        kiln.compile(fn, backend="eager", fullgraph=fullgraph)(x)
    assert isinstance(info.value, AssertionError)  # (torch raises an AssertionError there)
    assert not getattr(x, "_kiln_dynamic_dims", None)  # nothing ran
