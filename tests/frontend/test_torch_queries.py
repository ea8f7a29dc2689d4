"""torch functions answering with Python values fold while tracing (Note [Torch: folded queries])."""

from typing import Any

import pytest
import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend, run_and_compare

X = torch.randn(4, 3)


def test_tracer_queries_fold_to_false():
    def fn(x):
        r = x + 1
        if torch.fx._symbolic_trace.is_fx_tracing():
            r = r * 2
        if torch.onnx.is_in_onnx_export() or torch.jit.is_scripting():
            r = r * 3
        if torch._C._get_tracing_state() is None:
            r = r - 1
        return r

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)


def test_process_query_folds():
    def fn(x):
        return x + 1 if torch.cuda.is_available() else x - 1

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)


def test_deterministic_query_is_guarded():
    def fn(x):
        return x * 2 if torch.are_deterministic_algorithms_enabled() else x * 3

    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(fn, backend=backend, fullgraph=True)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        for flag in (False, True, False, True):
            torch.use_deterministic_algorithms(flag)
            torch.testing.assert_close(f(X), fn(X))
    finally:
        torch.use_deterministic_algorithms(was)
    assert backend.calls == 2  # one entry per answer, each reused


def test_inference_mode_query_is_guarded():
    def fn(x):
        return x + torch.is_inference_mode_enabled()

    kiln.reset()
    f = kiln.compile(fn, backend="eager", fullgraph=True)
    torch.testing.assert_close(f(X), fn(X))
    with torch.inference_mode():
        x = torch.randn(4, 3)
        torch.testing.assert_close(f(x), fn(x))


def test_default_dtype_is_guarded():
    def fn(x):
        return x.to(torch.get_default_dtype()) + 1

    kiln.reset()
    f = kiln.compile(fn, backend="eager", fullgraph=True)
    assert f(X).dtype == torch.float32
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert f(X).dtype == fn(X).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize("hint", [torch.Tensor, Any])
def test_jit_annotate_is_its_value(hint):
    def fn(x):
        y = torch.jit.annotate(hint, x + 1)
        return y * 2

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)


def test_finfo_iinfo_compare_and_attributes():
    def fn(x):
        fi = torch.finfo(x.dtype)
        r = x.clamp(fi.min, fi.max) + fi.eps + fi.tiny + fi.bits
        if fi == torch.finfo(torch.float32) and torch.iinfo(torch.int8) != torch.iinfo(torch.int16):
            r = r + torch.iinfo(torch.int32).max
        return r

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)
    run_and_compare(fn, X.double(), fullgraph=True, expected_graphs=1)


def test_python_value_queries_on_tensors():
    def fn(x):
        d = x.dtype
        r = x + torch.numel(x) + d.itemsize + d.is_floating_point + d.is_signed
        if torch.is_tensor(x) and torch.is_floating_point(x) and not torch.is_complex(x):
            r = r + 1
        if x.device.type == "cpu" and x.device.index is None and x.device == torch.device("cpu"):
            r = r + 2
        s = x.size() + (2,)
        return r.reshape(s[:2]) + s[1:].numel() + s.index(3) + (x.shape == (4, 3))

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)


def test_is_tensor_like():
    def fn(x):
        if torch.overrides.is_tensor_like(x):
            return (x * 2,)
        return (torch.ones(10) + x,)

    run_and_compare(fn, torch.randn(10), fullgraph=True, expected_graphs=1)
    run_and_compare(fn, 4, fullgraph=True, expected_graphs=1)


# --- torch's comptime.force_static / assert_static (Note [Torch: comptime static sizes]) ----------


def test_mark_static_inside_the_frame_specialises_the_size():
    from torch._dynamo.comptime import comptime

    def fn(x):
        torch._dynamo.mark_static(x, 0)
        comptime.assert_static(x.size(0))
        return x * x.size(0)

    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(fn, backend=backend, dynamic=True, fullgraph=True)
    for shape in [(12, 5), (12, 6), (13, 6)]:
        x = torch.randn(shape)
        torch.testing.assert_close(f(x), fn(x))
    # dim 1 stays dynamic (one entry for (12, 5) and (12, 6)); dim 0 is pinned: 13 recompiles
    assert backend.calls == 2
    assert all(isinstance(a, torch.Tensor) for a in backend.example_inputs[1])


def test_assert_static_of_a_dynamic_size_breaks():
    from torch._dynamo.comptime import comptime

    def fn(x):
        comptime.assert_static(x.size(0))
        return x + 1

    kiln.reset()
    x = torch.randn(12, 5)
    with pytest.raises(kiln.exc.Unsupported, match="assert_static"):
        kiln.compile(fn, backend="eager", dynamic=True, fullgraph=True)(x)
    kiln.reset()
    torch.testing.assert_close(kiln.compile(fn, backend="eager", dynamic=True)(x), fn(x))


# --- torch._check of a Python condition (Note [Torch: torch._check of a Python condition]) -------


def test_torch_check_of_a_size_is_a_guard_not_a_break():
    def fn(x):
        torch._check(x.size(0) != 3)
        torch._check(x.size(0) != 4, lambda: "not four")
        torch._check(True)
        return x + 2

    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(fn, backend=backend, dynamic=True, fullgraph=True)
    for n in (12, 13, 14):
        x = torch.randn(n)
        torch.testing.assert_close(f(x), fn(x))
    assert backend.calls == 1
    # the guard Ne(s0, 3) fails for size 3: the new trace breaks and the call raises as eager
    g = kiln.compile(fn, backend="eager", dynamic=True)
    g(torch.randn(12))
    for n in (3, 4):
        with pytest.raises(RuntimeError) as compiled:
            g(torch.randn(n))
        with pytest.raises(RuntimeError) as eager:
            fn(torch.randn(n))
        assert str(compiled.value) == str(eager.value)


def test_torch_check_false_constant_raises_as_eager():
    """Eager's RuntimeError, raised in the traced frame; uncaught under fullgraph, the Unsupported
    names it and its message (the message function traced)."""

    def fn(x):
        torch._check(x.dim() == 3, lambda: "three dims")
        return x + 1

    kiln.reset()
    f = kiln.compile(fn, backend="eager")
    with pytest.raises(RuntimeError, match="three dims"):
        f(torch.randn(2))
    with pytest.raises(kiln.exc.Unsupported, match="RuntimeError raised .*: three dims"):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.randn(2))


LIMIT = 3


def _checked_in_a_try(x):
    try:
        torch._check(x.size(0) > LIMIT, lambda: f"the size is not greater than {LIMIT}")
    except RuntimeError as e:
        return x + 1, str(e)
    try:
        torch._check(x.size(0) > 100)
    except RuntimeError as e:
        return x - 1, str(e)
    return x, ""


@pytest.mark.parametrize("n", [2, 5])
def test_torch_check_false_size_condition_is_caught_in_the_frame(n):
    """A false check on a dynamic size raises in the frame: its handler sees eager's message (the
    message function traced, reading a global), the default message without one."""
    x = torch.randn(n)
    kiln.mark_dynamic(x, 0)
    got = kiln.compile(_checked_in_a_try, backend="eager", fullgraph=True)(x)
    expected = _checked_in_a_try(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1] != ""


def test_accelerator_and_backend_queries_fold():
    def fn(x):
        r = x + torch.accelerator.device_count() + torch.cuda.device_count()
        if torch.accelerator.is_available() or torch.xpu.is_available():
            r = r * 2
        if torch.accelerator.current_accelerator() is None and not torch.mtia.is_available():
            r = r - 1
        if torch.backends.cuda.is_built():
            r = r + 3
        return r, torch.backends.cpu.get_cpu_capability()

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)


def test_thread_and_precision_settings_are_guarded():
    def fn(x):
        n = torch.get_num_threads() + torch.get_num_interop_threads()
        if torch.get_float32_matmul_precision() == "highest" and not torch.is_warn_always_enabled():
            return x + n
        return x * n + torch.get_deterministic_debug_mode()

    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(fn, backend=backend, fullgraph=True)
    threads, precision = torch.get_num_threads(), torch.get_float32_matmul_precision()
    try:
        for n, p in ((1, "highest"), (2, "highest"), (2, "high"), (1, "highest")):
            torch.set_num_threads(n)
            torch.set_float32_matmul_precision(p)
            torch.testing.assert_close(f(X), fn(X))
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(precision)
    assert backend.calls == 3  # one entry per setting, the first reused


def test_default_device_query_is_guarded_and_follows_the_frame():
    def fn(x):
        before = torch.get_default_device()
        torch.set_default_device("meta")
        after = torch.get_default_device()
        torch.set_default_device(None)
        return x + 1, before, after, torch.get_default_device()

    kiln.reset()
    f = kiln.compile(fn, backend="eager", fullgraph=True)
    try:
        for device in (None, "cpu", "meta", None):
            runs = []
            for g in (f, fn):
                torch.set_default_device(device)
                x = torch.ones(2)  # (made on the default device, as the caller's tensors are)
                runs.append(g(x))
            got, want = runs
            assert got[1:] == want[1:] and got[0].device == want[0].device
            if want[0].device.type != "meta":
                torch.testing.assert_close(got[0], want[0])
            assert torch.get_default_device() == torch.device("cpu")
    finally:
        torch.set_default_device(None)


def test_torch_version_comparisons_fold():
    def fn(x):
        r = x + 1
        if torch.__version__ >= "2.0" and torch.__version__ < (99, 0):
            r = r * 2
        major, minor = torch.__version__.split(".")[:2]
        if int(major) >= 2 and torch.__version__.startswith(major):
            r = r - int(minor)
        return r, str(torch.__version__), torch.__version__

    kiln.reset()
    backend = CountingBackend()
    got = kiln.compile(fn, backend=backend, fullgraph=True)(X)
    want = fn(X)
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:] and got[2] is torch.__version__
    assert backend.calls == 1


def test_packaging_parse_of_torch_version_folds():
    version = pytest.importorskip("packaging.version")

    def fn(x):
        if version.parse(torch.__version__) >= version.parse("2.0.0"):
            return x + 1
        return x - 1

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)


def test_knob_reads_fold_to_their_constant():
    def fn(x):
        r = x + 1 if torch._utils_internal.justknobs_check("kiln_test", True) else x - 1
        return r * torch._utils_internal.justknobs_getval_int("kiln_test_int")

    run_and_compare(fn, X, fullgraph=True, expected_graphs=1)
