"""Library helpers called by user code: torch._prims_common's size arithmetic traced like user code
(its lazy import loaded while tracing), torch.sym_max / sym_min on ints and size symbols."""

import sys
import textwrap

import pytest
import torch
from torch._prims_common import make_contiguous_strides_for

import kiln
from tests.frontend.frontend_helpers import CountingBackend


def as_contiguous_view(x):
    strides = make_contiguous_strides_for(x.shape)
    return x.as_strided(x.shape, strides)


@pytest.mark.parametrize("dynamic", [False, True])
def test_make_contiguous_strides_for_is_traced(dynamic):
    backend = CountingBackend()
    compiled = kiln.compile(as_contiguous_view, backend=backend, fullgraph=True, dynamic=dynamic)
    for shape in [(4, 8), (7, 8), (1, 8), (5, 1)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), as_contiguous_view(x))
    # dynamic: sizes of 1 are specialised (as torch does), so (1, 8) and (5, 1) get their own
    assert backend.calls == (3 if dynamic else 4)


def grows_by_sym_max(x, n):
    return x * torch.sym_max(x.size(0), n) + torch.sym_min(n, 3)


@pytest.mark.parametrize("dynamic", [False, True])
def test_sym_max_and_sym_min_of_sizes_and_ints(dynamic):
    compiled = kiln.compile(grows_by_sym_max, backend="eager", fullgraph=True, dynamic=dynamic)
    for size, n in [(4, 2), (6, 9), (2, 2), (5, 1)]:
        x = torch.randn(size)
        torch.testing.assert_close(compiled(x, n), grows_by_sym_max(x, n))


@pytest.fixture
def lazy_library(tmp_path, monkeypatch):
    """A package `kiln_lazy_lib` on sys.path that kiln treats as a library, not imported yet."""
    pkg = tmp_path / "kiln_lazy_lib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text(
        textwrap.dedent(
            """
            def twice(x):
                return x * 2
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(kiln.config, "skip_modules", (*kiln.config.skip_modules, "kiln_lazy_lib"))
    monkeypatch.setattr(
        kiln.config, "traced_modules", (*kiln.config.traced_modules, "kiln_lazy_lib")
    )
    yield "kiln_lazy_lib.helpers"
    for name in ["kiln_lazy_lib.helpers", "kiln_lazy_lib"]:
        sys.modules.pop(name, None)


def test_a_library_module_imported_inside_the_frame_is_loaded_while_tracing(lazy_library):
    import kiln_lazy_lib  # noqa: F401  (the package is loaded; its submodule is not)

    assert lazy_library not in sys.modules

    def fn(x):
        from kiln_lazy_lib.helpers import twice

        return twice(x) + 1

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2 + 1)
    assert lazy_library in sys.modules


def test_a_user_module_not_imported_yet_stays_a_break(tmp_path, monkeypatch):
    (tmp_path / "kiln_lazy_user_mod.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def fn(x):
        import kiln_lazy_user_mod

        return x + kiln_lazy_user_mod.VALUE

    try:
        with pytest.raises(kiln.exc.Unsupported, match="not imported yet"):
            kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
        assert "kiln_lazy_user_mod" not in sys.modules  # tracing ran none of the user's module
        x = torch.randn(3)
        torch.testing.assert_close(kiln.compile(fn, backend="eager")(x), x + 3)
    finally:
        sys.modules.pop("kiln_lazy_user_mod", None)


def strided_window(x):
    n = x.size(0)
    return x.as_strided((n - 1, 2), (1, 1), 1).sum(1) + 1


@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_as_strided_with_symbolic_sizes_compiles_once(backend):
    counting = CountingBackend()
    compiled = kiln.compile(strided_window, backend=backend, fullgraph=True, dynamic=True)
    for shape in [(4, 8), (7, 8), (9, 3)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(compiled(x), strided_window(x))
    counted = kiln.compile(strided_window, backend=counting, fullgraph=True, dynamic=True)
    for shape in [(4, 8), (7, 8), (9, 3)]:
        counted(torch.randn(*shape))
    assert counting.calls == 1
