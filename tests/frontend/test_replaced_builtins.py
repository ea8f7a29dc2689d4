"""A program that replaces a builtin for a while (Note [Frames: builtins the program replaced])."""

import builtins
import functools

import torch
from frontend_helpers import run_and_compare


def with_cached_len(x):
    original = builtins.len
    try:
        builtins.len = functools.lru_cache(4)(original)  # (a list given to it raises TypeError)
        sizes = [len("abcdef"[:i]) for i in (0, 2, 2, 5)]
        y = x * 2
    finally:
        builtins.len = original
    return y + 1, sizes


def test_frames_compiled_while_len_is_replaced_run_in_python():
    run_and_compare(with_cached_len, torch.randn(3))
    assert builtins.len is len
