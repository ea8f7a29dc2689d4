"""User guard filters: `kiln.compile(options={"guard_filter_fn": f})` drops the guards `f` rejects.

Note [Guards: user filters]
torch.compile's `guard_filter_fn` option hands the user the guards of each new entry, one
`GuardEntry` per guard (its source's name, its value when the source can be read, the kind, whether
it reads a global), and keeps the ones the function answers True for. It trades safety for guard
time: a model whose modules never change after compiling need not check their attributes on every
call. kiln gives the same entries, in the fields torch's have, so torch's ready-made filters work
unchanged (`torch.compiler.skip_guard_on_globals_unsafe`, `keep_tensor_guards_unsafe`,
`skip_guard_on_inbuilt_nn_modules_unsafe`, `skip_guard_on_all_nn_modules_unsafe`): they read
`entry.orig_guard.source` as a guard origin with `is_unspecialized_nn_module()` and friends, which
`GuardOrigin` answers from the values along the source's chain (a guard reads an nn.Module's state
when a module lies on its way; an inbuilt one when the nearest such module's class is torch.nn's).
A dropped guard is simply not checked: the entry then runs for values it was not traced for, as the
user asked (the `_unsafe` in torch's names). The answer must be one bool per entry, else an error
names the filter.
"""

import dataclasses

import torch

from kiln.exc import KilnError
from kiln.frontend.guards import GuardKind, build_guard_fn, eval_sources
from kiln.frontend.source import ClosureSource, GlobalSource

# kiln's guard kinds by the names torch.compile gives the same checks (others keep kiln's name)
TORCH_GUARD_TYPE = {
    GuardKind.ID_MATCH: "ID_MATCH",
    GuardKind.TYPE_MATCH: "TYPE_MATCH",
    GuardKind.CONSTANT_MATCH: "CONSTANT_MATCH",
    GuardKind.LIST_LENGTH: "LIST_LENGTH",
    GuardKind.DICT_KEYS: "DICT_KEYS_MATCH",
    GuardKind.IN: "DICT_CONTAINS",
    GuardKind.TENSOR_MATCH: "TENSOR_MATCH",
    GuardKind.GLOBAL_STATE: "GLOBAL_STATE",
    GuardKind.SHAPE_ENV: "SHAPE_ENV",
}


@dataclasses.dataclass(frozen=True)
class GuardEntry:
    """One guard as a filter sees it (the fields of torch.compile's GuardFilterEntry)."""

    name: str  # the source's guard expression ("x", "self.norm.eps", "___G['SCALE']"); "" if none
    has_value: bool
    value: object  # the source's value now (None when has_value is False)
    guard_type: str
    derived_guard_types: tuple
    is_global: bool
    orig_guard: object  # a GuardRecord


@dataclasses.dataclass(frozen=True)
class GuardOrigin:
    """Where a guard's source starts and what it passes through (torch's GuardSource questions)."""

    local: bool
    in_module: bool
    in_builtin_module: bool

    def is_local(self):
        return self.local

    def is_unspecialized_nn_module(self):
        return self.in_module

    def is_unspecialized_builtin_nn_module(self):
        return self.in_builtin_module

    def is_specialized_nn_module(self):
        return False  # (kiln inlines every module; none is a specialized constant)

    def is_fsdp_module(self):
        return False


@dataclasses.dataclass(frozen=True)
class GuardRecord:
    """kiln's guard behind an entry: `.guard` itself, `.source` its origin."""

    guard: object
    source: GuardOrigin


def _chain(source):
    """The source and its parents, root first."""
    out = []
    while source is not None:
        out.append(source)
        source = getattr(source, "source", None)
    return out[::-1]


def _is_builtin_module(module):
    return type(module).__module__.startswith(("torch.nn.", "torch.ao.nn."))


def _entry(guard, values):
    """The GuardEntry of one kiln guard, given the values of its source chain by name."""
    kind_name = TORCH_GUARD_TYPE.get(guard.kind, guard.kind.name)
    if guard.source is None:
        origin = GuardOrigin(local=False, in_module=False, in_builtin_module=False)
        return GuardEntry(
            "", False, None, kind_name, (kind_name,), False, GuardRecord(guard, origin)
        )
    chain = _chain(guard.source)
    modules = [values[s.name()] for s in chain if isinstance(values.get(s.name()), torch.nn.Module)]
    root = chain[0]
    is_global = isinstance(root, GlobalSource)
    origin = GuardOrigin(
        local=not is_global and not isinstance(root, ClosureSource),
        in_module=bool(modules),
        in_builtin_module=bool(modules) and _is_builtin_module(modules[-1]),
    )
    name = guard.source.name()
    has_value = name in values
    return GuardEntry(
        name,
        has_value,
        values.get(name),
        kind_name,
        (kind_name,),
        is_global,
        GuardRecord(guard, origin),
    )


def filter_guards(user_filter, fn, guard_set, args, kwargs, **build_kwargs):
    """Drop from `guard_set` the guards `user_filter` rejects (Note [Guards: user filters])."""
    guards = list(guard_set)
    probe = build_guard_fn(fn, guard_set, **build_kwargs)  # (reads the sources' values)
    names = {s.name() for g in guards if g.source is not None for s in _chain(g.source)}
    values = eval_sources(probe, args, kwargs, names)
    entries = [_entry(g, values) for g in guards]
    keep = user_filter(entries)
    try:
        keep = list(keep)
    except TypeError:
        keep = None
    if keep is None or len(keep) != len(entries) or not all(isinstance(k, bool) for k in keep):
        raise KilnError(
            f"guard_filter_fn {getattr(user_filter, '__qualname__', user_filter)!r} must return "
            f"one bool per guard entry ({len(entries)}), got {keep!r:.200}"
        )
    guard_set.retract([g.key() for g, k in zip(guards, keep) if not k])
