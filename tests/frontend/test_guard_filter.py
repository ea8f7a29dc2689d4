"""`options={"guard_filter_fn": f}`: the guards of a new entry a user filter keeps (torch's API)."""

import pytest
import torch

import kiln
from kiln.exc import KilnError
from tests.frontend.frontend_helpers import CountingBackend

SCALE = 1


def add_scale(x):
    return x + SCALE


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = 2.0
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(x) + self.c


def _compiled(fn, guard_filter_fn, **kw):
    backend = CountingBackend()
    opts = {"guard_filter_fn": guard_filter_fn}
    return kiln.compile(fn, backend=backend, options=opts, **kw), backend


@pytest.fixture
def restore_scale():
    yield
    globals()["SCALE"] = 1


def test_skipping_global_guards_keeps_the_entry_when_a_global_changes(restore_scale):
    opt, backend = _compiled(add_scale, torch.compiler.skip_guard_on_globals_unsafe, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), x + 1)
    globals()["SCALE"] = 2
    # the entry was traced with SCALE == 1 and nothing checks it now: as torch.compile does
    torch.testing.assert_close(opt(x), x + 1)
    assert backend.calls == 1


def test_a_filter_keeping_every_guard_changes_nothing(restore_scale):
    opt, backend = _compiled(add_scale, lambda entries: [True] * len(entries), fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), x + 1)
    globals()["SCALE"] = 2
    torch.testing.assert_close(opt(x), x + 2)
    assert backend.calls == 2


def test_entries_name_their_sources_values_and_kinds(restore_scale):
    seen = []

    def keep_all(entries):
        seen.extend(entries)
        return [True for _ in entries]

    opt, _ = _compiled(add_scale, keep_all, fullgraph=True)
    x = torch.randn(3)
    opt(x)
    by_name = {e.name: e for e in seen}
    assert by_name["x"].guard_type == "TENSOR_MATCH"
    assert by_name["x"].has_value and by_name["x"].value is x and not by_name["x"].is_global
    assert by_name["x"].orig_guard.source.is_local()
    scale = by_name["___G['SCALE']"]
    assert scale.is_global and scale.has_value and scale.value == 1
    assert scale.guard_type == "CONSTANT_MATCH"


def test_a_filter_by_name_and_value_drops_the_none_check():
    def fn(x, y):
        if y is not None:
            x = x + y
        return x * 2

    def drop_y_none(entries):
        return [not (e.name == "y" and e.value is None) for e in entries]

    opt, backend = _compiled(fn, drop_y_none, fullgraph=True)
    x = torch.randn(3, 2)
    torch.testing.assert_close(opt(x, None), x * 2)
    # the entry traced for y=None runs for a tensor y too (the user dropped the guard)
    torch.testing.assert_close(opt(x, torch.tensor(1.0)), x * 2)
    assert backend.calls == 1


def test_keeping_tensor_guards_only_ignores_a_module_attribute():
    mod = Net()
    opt, backend = _compiled(mod, torch.compiler.keep_tensor_guards_unsafe)
    x = torch.rand(4, 8)
    torch.testing.assert_close(opt(x), mod(x))
    mod.c = 3.0
    torch.testing.assert_close(opt(x), mod.norm(x) + 2.0)
    assert backend.calls == 1
    # a new input shape still fails the tensor guard
    y = torch.rand(2, 8)
    torch.testing.assert_close(opt(y), mod.norm(y) + 3.0)
    assert backend.calls == 2


def test_skipping_inbuilt_module_guards_keeps_the_users_own():
    mod = Net()
    opt, backend = _compiled(mod, torch.compiler.skip_guard_on_inbuilt_nn_modules_unsafe)
    x = torch.rand(4, 8)
    torch.testing.assert_close(opt(x), mod(x))
    mod.norm.eps = 1e-2  # an inbuilt module's attribute: not checked
    opt(x)
    assert backend.calls == 1
    mod.c = 3.0  # the user's module: still checked, recompiles, right result
    torch.testing.assert_close(opt(x), mod(x))
    assert backend.calls == 2


def test_skipping_all_module_guards_ignores_the_users_module_too():
    mod = Net()
    opt, backend = _compiled(mod, torch.compiler.skip_guard_on_all_nn_modules_unsafe)
    x = torch.rand(4, 8)
    torch.testing.assert_close(opt(x), mod(x))
    mod.c = 3.0
    torch.testing.assert_close(opt(x), mod.norm(x) + 2.0)
    assert backend.calls == 1


def test_a_filter_answering_the_wrong_length_is_an_error_naming_it():
    def bad_filter(entries):
        return [True]

    opt = kiln.compile(
        add_scale, backend="eager", options={"guard_filter_fn": bad_filter}, fullgraph=True
    )
    with pytest.raises(KilnError, match="bad_filter.*one bool per guard"):
        opt(torch.randn(3))


def test_the_option_takes_a_function_and_is_listed_among_valid_options():
    with pytest.raises(KilnError, match="guard_filter_fn.*takes a function"):
        kiln.compile(add_scale, options={"guard_filter_fn": 3})
    with pytest.raises(KilnError, match="valid options:.*guard_filter_fn"):
        kiln.compile(add_scale, options={"no_such_option": 1})


def test_the_filter_works_beside_backend_options():
    opt = kiln.compile(
        add_scale,
        backend="kiln",
        options={"guard_filter_fn": torch.compiler.skip_guard_on_globals_unsafe, "strict": True},
    )
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), x + 1)
