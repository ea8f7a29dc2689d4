"""A recompile reason on a tensor's sizes names the dimension that differs."""

import torch

import kiln
from kiln import hooks


def reasons_for(fn, calls, **options):
    seen = []

    def on_failure(compiled_fn, reason):
        seen.append(reason)

    hooks.register("guard_failure", on_failure)
    try:
        kiln.reset()
        compiled = kiln.compile(fn, backend="eager", **options)
        for args in calls:
            compiled(*args)
    finally:
        hooks.unregister("guard_failure", on_failure)
    return seen


def double(x):
    return x * 2


def test_static_shape_names_the_dimension():
    (reason,) = reasons_for(double, [(torch.randn(2, 3),), (torch.randn(2, 7),)])
    assert reason.startswith("x.shape == (2, 3)")
    assert "tensor 'x' size mismatch at index 1. expected 3, actual 7" in reason


def test_rank_change():
    (reason,) = reasons_for(double, [(torch.randn(2, 3),), (torch.randn(2, 3, 1),)])
    assert "tensor 'x' rank mismatch. expected 2, actual 3" in reason


def test_size_part_of_a_symbolic_frame():
    def first_dim(x):
        return x.sin(), f"{x.shape[0]}"  # (the text specialises dim 0)

    calls = [(torch.randn(10, 11),), (torch.randn(9, 11),)]
    (reason,) = reasons_for(first_dim, calls, dynamic=True)
    assert "tensor 'x' size mismatch at index 0. expected 10, actual 9" in reason
