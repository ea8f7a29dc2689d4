"""kiln.set_stance: force_eager, eager_on_recompile, fail_on_recompile and force_backend
(Note [Stance: what each one does]); every result equals eager's."""

import pytest
import torch
from frontend_helpers import CountingBackend

import kiln


def _shifted(x, n):
    return torch.cos(x) * n + 1


@pytest.fixture(autouse=True)
def _default_stance():
    yield
    kiln.set_stance("default")


def test_force_eager_runs_the_plain_function():
    be = CountingBackend()
    f = kiln.compile(_shifted, backend=be)
    x = torch.randn(5)
    torch.testing.assert_close(f(x, 2), _shifted(x, 2))
    with kiln.set_stance("force_eager"):
        torch.testing.assert_close(f(x, 3), _shifted(x, 3))
        torch.testing.assert_close(f(x, 2), _shifted(x, 2))
    assert be.calls == 1  # n=3 was not compiled
    kiln.set_stance("force_eager")  # as a plain call, until set back
    torch.testing.assert_close(f(x, 4), _shifted(x, 4))
    kiln.set_stance("default")
    assert be.calls == 1
    torch.testing.assert_close(f(x, 4), _shifted(x, 4))
    assert be.calls == 2


def test_force_eager_as_a_decorator_holds_only_during_calls():
    be = CountingBackend()
    f = kiln.compile(_shifted, backend=be)

    @kiln.set_stance("force_eager")
    def outer(x):
        return f(x, 5)

    x = torch.randn(3)
    torch.testing.assert_close(f(x, 1), _shifted(x, 1))  # decorating changed nothing
    assert be.calls == 1
    torch.testing.assert_close(outer(x), _shifted(x, 5))
    assert be.calls == 1
    torch.testing.assert_close(f(x, 7), _shifted(x, 7))  # default again after the call
    assert be.calls == 2


def test_eager_on_recompile_keeps_hits_and_runs_misses_in_python():
    be = CountingBackend()
    f = kiln.compile(_shifted, backend=be, dynamic=False)
    x = torch.randn(4)
    f(x, 1)
    with kiln.set_stance("eager_on_recompile"):
        torch.testing.assert_close(f(x, 1), _shifted(x, 1))
        torch.testing.assert_close(f(x, 2), _shifted(x, 2))
        y = torch.randn(6)
        torch.testing.assert_close(f(y, 1), _shifted(y, 1))
    assert be.calls == 1


def test_fail_on_recompile_raises_on_a_miss_only():
    be = CountingBackend()
    f = kiln.compile(_shifted, backend=be, dynamic=False)
    x = torch.randn(4)
    f(x, 1)
    with kiln.set_stance("fail_on_recompile"):
        y = torch.randn(4)
        torch.testing.assert_close(f(y, 1), _shifted(y, 1))  # a hit runs
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            f(x, 2)
    assert be.calls == 1
    torch.testing.assert_close(f(x, 2), _shifted(x, 2))


def test_error_on_recompile_raises_naming_the_failed_guard(monkeypatch):
    be = CountingBackend()
    f = kiln.compile(_shifted, backend=be, dynamic=False)
    x = torch.randn(4)
    monkeypatch.setattr(kiln.config, "error_on_recompile", True)
    torch.testing.assert_close(f(x, 1), _shifted(x, 1))  # the first compile is no recompile
    y = torch.randn(4)
    torch.testing.assert_close(f(y, 1), _shifted(y, 1))  # a hit runs
    with pytest.raises(kiln.exc.RecompileError, match="error_on_recompile.*guards failed"):
        f(x, 2)
    assert be.calls == 1
    monkeypatch.setattr(kiln.config, "error_on_recompile", False)
    torch.testing.assert_close(f(x, 2), _shifted(x, 2))
    assert be.calls == 2


def test_force_backend_compiles_apart_from_the_compile_backend():
    own, forced = CountingBackend(), CountingBackend()
    f = kiln.compile(_shifted, backend=own)
    x = torch.randn(4)
    f(x, 1)
    with kiln.set_stance("default", force_backend=forced):
        torch.testing.assert_close(f(x, 1), _shifted(x, 1))
        torch.testing.assert_close(f(x, 1), _shifted(x, 1))
    assert (own.calls, forced.calls) == (1, 1)  # the forced backend's own entry, made once
    f(x, 1)
    assert own.calls == 1
    with pytest.raises(RuntimeError, match="force_backend"):
        kiln.set_stance("force_eager", force_backend=forced)
    with pytest.raises(ValueError, match="unknown stance"):
        kiln.set_stance("sometimes")


def test_stance_decorated_function_called_from_compiled_code():
    be = CountingBackend()
    inner = kiln.compile(_shifted, backend=be)

    @kiln.set_stance("force_eager")
    def eager_part(x):
        return inner(x, 3)

    def outer(x):
        return eager_part(x.sin()) + 1

    x = torch.randn(4)
    torch.testing.assert_close(kiln.compile(outer, backend="eager")(x), outer(x))
    assert be.calls == 0  # inner ran under force_eager


class Hooked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x).relu()


def test_stances_on_a_compiled_module_with_hooks():
    torch.manual_seed(0)
    m = Hooked()
    seen = []
    m.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    own, forced = CountingBackend(), CountingBackend()
    cm = kiln.compile(m, backend=own)
    x = torch.randn(2, 3)
    torch.testing.assert_close(cm(x), m(x))
    with kiln.set_stance("force_eager"):
        torch.testing.assert_close(cm(x), m(x))
    with kiln.set_stance(force_backend=forced):
        torch.testing.assert_close(cm(x), m(x))
    with kiln.set_stance("fail_on_recompile"):
        torch.testing.assert_close(cm(x), m(x))  # a hit (the hooks run around it)
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            cm(torch.randn(4, 2, 3))
    with kiln.set_stance("eager_on_recompile"):
        y = torch.randn(4, 2, 3)
        torch.testing.assert_close(cm(y), m(y))
    assert (own.calls, forced.calls) == (1, 1)
    assert len(seen) == 10  # every call ran the hook once


def test_stance_set_inside_compiled_code_breaks_there_and_holds():
    be = CountingBackend()
    inner = kiln.compile(_shifted, backend=be)

    def outer(x):
        y = x * 2
        with kiln.set_stance("force_eager"):
            z = inner(y, 4)  # runs as plain Python: the stance holds here
        return z - 1

    x = torch.randn(5)
    got = kiln.compile(outer, backend="eager")(x)
    torch.testing.assert_close(got, outer(x))
    assert be.calls == 0
    torch.testing.assert_close(inner(x, 4), _shifted(x, 4))  # default again after the block
    assert be.calls == 1


def test_stance_inside_compiled_code_names_itself_under_fullgraph():
    def sets_it(x):
        with kiln.set_stance("force_eager"):
            return x + 1

    @kiln.set_stance("eager_on_recompile")
    def decorated(x):
        return x - 1

    def calls_it(x):
        return decorated(x) * 2

    x = torch.randn(3)
    with pytest.raises(kiln.exc.Unsupported, match="kiln.set_stance inside compiled code") as e:
        kiln.compile(sets_it, backend="eager", fullgraph=True)(x)
    assert "outside the compiled function" in str(e.value)  # the hint
    with pytest.raises(
        kiln.exc.Unsupported, match=r"decorated, which runs in Python under @kiln.set_stance"
    ):
        kiln.compile(calls_it, backend="eager", fullgraph=True)(x)
    assert kiln.frontend.stance.state.name == "default"
    torch.testing.assert_close(kiln.compile(calls_it, backend="eager")(x), calls_it(x))
