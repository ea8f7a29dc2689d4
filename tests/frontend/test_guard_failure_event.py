"""kiln.hooks' guard_failure event: on a recompile, the compiled function and the failed guard."""

import pytest
import torch

import kiln
from kiln import hooks


@pytest.fixture
def failures():
    kiln.reset()
    seen = []

    def listen(root_fn, reason):
        seen.append((root_fn, reason))

    hooks.register("guard_failure", listen)
    yield seen
    hooks.unregister("guard_failure", listen)


class Scaled(torch.nn.Module):
    def forward(self, x):
        return x * 3


def test_removed_module_hook_names_the_hooks(failures):
    mod = Scaled()
    handle = mod.register_forward_hook(lambda m, i, o: o + 1)

    def run(x):
        return mod(x) - 1

    compiled = kiln.compile(run, backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), run(x))
    torch.testing.assert_close(compiled(x), run(x))
    assert failures == []  # guards held: no event
    handle.remove()
    torch.testing.assert_close(compiled(x), run(x))
    assert len(failures) == 1
    root_fn, reason = failures[0]
    assert root_fn is run
    assert "_forward_hooks" in reason


def test_shape_change_reports_the_input(failures):
    def double(t):
        return t * 2

    compiled = kiln.compile(double, backend="eager", dynamic=False)
    compiled(torch.randn(2))
    compiled(torch.randn(5))
    assert [fn for fn, _ in failures] == [double]
    assert "t" in failures[0][1]


def test_no_listener_no_event():
    assert not hooks.listening("guard_failure")
