"""`Cls(value)` of an enum: the member, as Python's lookup finds it (a class's own `_missing_`
only asked when no member has the value), compared with eager."""

import enum

import pytest
import torch

import kiln


class ExplicitEnum(str, enum.Enum):  # noqa: UP042 (the str mixin, as transformers writes it)
    @classmethod
    def _missing_(cls, value):
        raise ValueError(f"{value} is not a valid {cls.__name__}, pick one of {list(cls)}")


class Padding(ExplicitEnum):
    LONGEST = "longest"
    MAX_LENGTH = "max_length"


class Color(enum.Enum):
    RED = 1
    GREEN = 2


def by_value(x, name):
    a = Padding(name)
    if a == Padding.LONGEST:
        return torch.sin(x)
    return torch.cos(x) + Color(2).value


@pytest.mark.parametrize("name", ["longest", "max_length"])
def test_lookup_of_a_member_with_a_custom_missing(name):
    x = torch.randn(3)
    compiled = kiln.compile(by_value, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, name), by_value(x, name))


def test_no_member_with_a_custom_missing_runs_it_as_eagerly():
    x = torch.randn(3)
    with pytest.raises(ValueError, match="pick one of") as eager:
        by_value(x, "nope")
    with pytest.raises(ValueError, match="pick one of") as compiled:
        kiln.compile(by_value, backend="eager")(x, "nope")
    assert str(compiled.value) == str(eager.value)


def test_no_member_without_missing_raises_value_error():
    def fn(x):
        return x + Color(3).value

    with pytest.raises(ValueError, match="3 is not a valid Color"):
        kiln.compile(fn, backend="eager")(torch.ones(1))
