"""Guards' tensor checks in C++ (Note [Guards: tensor checks in C++]): the same answers as the
Python conditions they replace, on tensors that differ in each fact; the fallback; the build."""

import threading

import pytest
import torch

import kiln
from kiln import config
from kiln.frontend import tensor_match

needs_module = pytest.mark.skipif(
    tensor_match.module(wait=True) is None, reason="kiln_tensor_match cannot be built here"
)


def _python_check(example, candidate, keys):
    """The Python conditions of a TENSOR_MATCH guard (guards.py), evaluated directly."""
    return (
        type(candidate) is type(example)
        and candidate.dtype is example.dtype
        and candidate.shape == example.shape
        and candidate.stride() == example.stride()
        and candidate.requires_grad is example.requires_grad
        and candidate.device == example.device
        and (not keys or torch._C._dispatch_keys(candidate) == torch._C._dispatch_keys(example))
    )


def _tensors():
    base = torch.randn(3, 4)
    with torch.inference_mode():
        inference = torch.randn(3, 4)
    return {
        "base": base,
        "same facts": torch.randn(3, 4),
        "float64": base.double(),
        "other shape": torch.randn(4, 3),
        "more dims": torch.randn(3, 4, 1),
        "transposed": torch.randn(4, 3).t(),
        "sliced": torch.randn(3, 8)[:, ::2],
        "requires grad": torch.randn(3, 4, requires_grad=True),
        "parameter": torch.nn.Parameter(torch.randn(3, 4)),
        "frozen parameter": torch.nn.Parameter(torch.randn(3, 4), requires_grad=False),
        "meta": torch.empty(3, 4, device="meta"),
        "inference": inference,
        "negative bit": torch.randn(3, 4)._neg_view(),
        "complex": torch.randn(3, 4, dtype=torch.cfloat),
        "conjugate": torch.randn(3, 4, dtype=torch.cfloat).conj(),
        "0-d": torch.tensor(1.0),
        "empty": torch.empty(0, 4),
    }


@needs_module
@pytest.mark.parametrize("keys", [True, False])
def test_agrees_with_the_python_conditions_on_every_pair(keys):
    tensors = _tensors()
    module = tensor_match.module()
    for name, example in tensors.items():
        match = module.TensorMatch(example, keys, tensor_match.describe(example, keys))
        for other, candidate in tensors.items():
            expected = _python_check(example, candidate, keys)
            assert match(candidate) is expected, (name, other, keys)
        assert match(example) is True
        assert match(torch.zeros(1).numpy()) is False  # not a tensor: False, no error
        assert match(None) is False


def _python_check_symbolic(example, candidate, keys, symbolic):
    """The Python conditions of a TENSOR_MATCH with symbolic dims and a contiguous layout."""
    return (
        type(candidate) is type(example)
        and candidate.dtype is example.dtype
        and candidate.dim() == example.dim()
        and all(candidate.size()[d] == n for d, n in enumerate(example.shape) if d not in symbolic)
        and candidate.is_contiguous()
        and candidate.requires_grad is example.requires_grad
        and candidate.device == example.device
        and (not keys or torch._C._dispatch_keys(candidate) == torch._C._dispatch_keys(example))
    )


@needs_module
@pytest.mark.parametrize("symbolic", [(0,), (1,), (0, 1)])
def test_symbolic_sizes_agree_with_the_python_conditions(symbolic):
    tensors = {
        **_tensors(),
        "longer": torch.randn(7, 4),
        "wider": torch.randn(3, 9),
        "both": torch.randn(7, 9),
        "wider, sliced": torch.randn(3, 18)[:, ::2],
    }
    module = tensor_match.module()
    for keys in (True, False):
        example = tensors["base"]
        text = tensor_match.describe(example, keys, symbolic)
        match = module.TensorMatch(example, keys, text, symbolic)
        for other, candidate in tensors.items():
            expected = _python_check_symbolic(example, candidate, keys, symbolic)
            assert match(candidate) is expected, (other, keys, symbolic)


@needs_module
def test_the_dispatch_keys_it_reads_are_pythons():
    for name, t in _tensors().items():
        assert tensor_match.module().tensor_keys(t) == torch._C._dispatch_keys(t).raw_repr(), name


@needs_module
def test_only_exact_tensor_and_parameter_types_with_strided_layout():
    class Sub(torch.Tensor):
        pass

    assert tensor_match.matcher(torch.randn(2).as_subclass(Sub), True) is None
    assert tensor_match.matcher(torch.randn(2, 2).to_sparse(), True) is None
    assert tensor_match.matcher(torch.randn(2), True) is not None
    assert tensor_match.matcher(torch.nn.Parameter(torch.randn(2)), False) is not None


@needs_module
def test_guard_uses_it_and_recompiles_on_each_changed_fact():
    def f(x):
        return x * 2

    compiled = kiln.compile(f, backend="eager")
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), f(x))
    source = compiled._kiln_cache.entry_info[0].guard_source
    assert "if not (___tensor_match(x)): return False  # TensorMatch(Tensor float32 cpu" in source
    for changed in (x.double(), torch.randn(4, 3), torch.randn(4, 3).t(), x[:, :2]):
        torch.testing.assert_close(compiled(changed), f(changed))
    with torch.inference_mode():
        y = torch.randn(3, 4)
        torch.testing.assert_close(compiled(y), f(y))
    assert len(compiled._kiln_cache.entries) == 6
    g = torch.randn(3, 4, requires_grad=True)
    out = compiled(g)
    out.sum().backward()
    torch.testing.assert_close(g.grad, torch.full((3, 4), 2.0))


@needs_module
def test_parameter_data_swapped_in_place_fails_the_check():
    lin = torch.nn.Linear(4, 4)
    compiled = kiln.compile(lin, backend="eager")
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), lin(x))
    lin.weight.data = torch.randn(4, 4).t()  # the same Parameter object, other strides
    torch.testing.assert_close(compiled(x), lin(x))
    lin.weight.requires_grad_(False)
    torch.testing.assert_close(compiled(x), lin(x))
    assert len(compiled._kiln_cache.entries) == 3


def test_with_the_setting_off_the_guard_is_python(monkeypatch):
    monkeypatch.setattr(config, "cpp_guards", False)
    compiled = kiln.compile(lambda x: x + 1, backend="eager")
    compiled(torch.randn(2))
    source = compiled._kiln_cache.entry_info[0].guard_source
    assert "___tensor_match" not in source and "x.shape == (2,)" in source


def test_built_in_the_background_and_guards_made_before_stay_python(monkeypatch):
    release = threading.Event()
    fake = type("FakeModule", (), {})

    def slow_compile(*args):
        release.wait(10)
        return "built.so"

    monkeypatch.setattr(tensor_match, "_state", {"module": None, "thread": None, "failed": None})
    monkeypatch.setattr(tensor_match.toolchain, "compile_cpp", slow_compile)
    monkeypatch.setattr(tensor_match.toolchain, "_load_extension", lambda name, so: fake)
    monkeypatch.setattr(tensor_match.toolchain, "cpp_key", lambda *a: "not-on-disk")
    assert tensor_match.module() is None  # started, not ready
    compiled = kiln.compile(lambda x: x - 1, backend="eager")
    compiled(torch.randn(2))
    assert "___tensor_match" not in compiled._kiln_cache.entry_info[0].guard_source
    release.set()
    assert tensor_match.module(wait=True) is fake


def test_a_failed_build_leaves_python_checks(monkeypatch):
    def no_headers():
        raise tensor_match.toolchain.CompilerError("PyTorch's C++ headers not found")

    monkeypatch.setattr(tensor_match, "_state", {"module": None, "thread": None, "failed": None})
    monkeypatch.setattr(tensor_match, "_flags", no_headers)
    assert tensor_match.module(wait=True) is None
    assert "headers not found" in tensor_match._state["failed"]
    assert tensor_match.matcher(torch.randn(2), True) is None
