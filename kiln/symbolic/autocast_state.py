"""The autocast state changes that compiled graphs record (Note [Autocast: traced under its state]).

Every stage runs these as plain Python while it executes a torch-level graph's nodes; none of
them is an ATen op.
"""

import contextlib

import torch

__all__ = [
    "enter_autocast",
    "exit_autocast",
    "state_of",
    "settings",
    "snapshot",
    "restore",
    "restore_after",
]

_DEVICES = ("cpu", "cuda")


def enter_autocast(device, dtype, enabled, cache):
    """The state changes of autocast.__enter__ (a graph node; also run while tracing)."""
    torch.set_autocast_enabled(device, enabled)
    torch.set_autocast_dtype(device, dtype)
    torch.autocast_increment_nesting()
    torch.set_autocast_cache_enabled(cache)


def exit_autocast(device, prev_enabled, prev_dtype, prev_cache):
    """The state changes of autocast.__exit__ (a graph node; also run while tracing)."""
    if torch.autocast_decrement_nesting() == 0:
        torch.clear_autocast_cache()
    torch.set_autocast_enabled(device, prev_enabled)
    torch.set_autocast_dtype(device, prev_dtype)
    torch.set_autocast_cache_enabled(prev_cache)


STATE_NODES = (enter_autocast, exit_autocast)


def state_of(device):
    return (
        torch.is_autocast_enabled(device),
        torch.get_autocast_dtype(device),
        torch.is_autocast_cache_enabled(),
    )


def settings():
    """Every device's autocast settings: what a frame compiled under autocast is guarded on."""
    return tuple((d, *state_of(d)) for d in _DEVICES)


def _depth():
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return depth


def snapshot():
    """The autocast state of every device, and the nesting depth."""
    return {d: state_of(d) for d in _DEVICES}, _depth()


def restore(saved):
    """Put back a snapshot() (a trace that stopped between an enter and its exit)."""
    states, depth = saved
    if all(state_of(d) == states[d] for d in _DEVICES) and _depth() == depth:
        return
    now = _depth()
    while now > depth:
        now = torch.autocast_decrement_nesting()
    if now == 0:
        torch.clear_autocast_cache()
    for d, (on, dtype, cache) in states.items():
        torch.set_autocast_enabled(d, on)
        torch.set_autocast_dtype(d, dtype)
        torch.set_autocast_cache_enabled(cache)


@contextlib.contextmanager
def restore_after():
    """Put the autocast state back as it was when the block raises between an enter and an exit."""
    saved = snapshot()
    try:
        yield
    except BaseException:
        restore(saved)
        raise
