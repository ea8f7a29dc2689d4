"""User nn.Module classes built inside the frame: an __init__ that only stores constants into self
runs while tracing (Note [Modules: an __init__ that only stores]); a __new__ that gives another
module is traced; any other __init__ stays eager's (a graph break)."""

import pytest
import torch
from frontend_helpers import run_and_compare
from torch import nn

import kiln


class GELUActivation(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.functional.gelu

    def forward(self, x):
        return self.act(x)


class Affine(nn.Module):
    def __init__(self, shift, scale=2.0):
        super(Affine, self).__init__()  # noqa: UP008  (the two-argument form)
        self.shift = shift
        self.scale = -scale * 2

    def forward(self, x):
        return x * self.scale + self.shift


def built_and_called(x):
    return GELUActivation()(x), Affine(3, scale=0.5)(x), Affine(1)(x)


def test_init_that_stores_constants_runs_while_tracing():
    run_and_compare(built_and_called, torch.randn(5), fullgraph=True, expected_graphs=1)


def returned(x):
    return GELUActivation(), Affine(2), x + 1


def test_returned_module_is_built_by_its_init():
    kiln.reset()
    act, affine, _ = kiln.compile(returned, backend="eager", fullgraph=True)(torch.randn(3))
    assert type(act) is GELUActivation and act.act is nn.functional.gelu
    assert hasattr(act, "_buffers")  # (nn.Module's __init__ ran)
    assert type(affine) is Affine and (affine.shift, affine.scale) == (2, -4.0)


made = []
GLOBAL_SCALE = 3.0


class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        made.append(1)  # a call: eager's to run

    def forward(self, x):
        return x + 1


class ReadsAGlobal(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = GLOBAL_SCALE  # (not a module: it could change between calls)

    def forward(self, x):
        return x * self.scale


class ReadsSelf(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = 2
        self.b = self.a * 3  # (reads self: __getattr__ or a property could run)

    def forward(self, x):
        return x * self.b


@pytest.mark.parametrize("cls", [Counted, ReadsAGlobal, ReadsSelf])
def test_other_init_is_a_break(cls):
    made.clear()

    def fn(x):
        return cls()(x)

    run_and_compare(fn, torch.randn(3), expected_breaks=1)
    if cls is Counted:
        assert len(made) == 3  # (eager once, compiled twice: each ran its __init__)


class Plain(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x + 1)


class GivesPlain(nn.Module):
    def __new__(cls):
        return Plain()


class GivesItself(nn.Module):
    def __new__(cls):
        return super().__new__(cls)

    def forward(self, x):
        return x * 2


def with_new(x):
    other = GivesPlain()
    return other(x), type(other) is Plain


def test_new_that_gives_another_module_is_traced():
    run_and_compare(with_new, torch.randn(3), fullgraph=True, expected_graphs=1)


def gives_itself(x):
    return GivesItself()(x)


def test_new_that_gives_an_instance_of_its_class_breaks():
    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported, match="__new__"):
        kiln.compile(gives_itself, fullgraph=True)(torch.randn(3))
    run_and_compare(gives_itself, torch.randn(3), expected_breaks=1)
