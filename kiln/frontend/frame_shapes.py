"""The frontend's sizes: the static view of a tensor's sizes and the automatic-dynamic policy.

`static_size`/`static_sizes`/`static_strides`/`static_numel` give the frontend's static view
(Python ints, pinned by the TENSOR_MATCH guard); `FrameShapes` decides which dimensions become
dynamic (symbols of a `kiln.symbolic.shape_env.ShapeEnv`).
"""

import dataclasses
import functools
import math
import re

from kiln import config, logs
from kiln.symbolic import marked_dims
from kiln.symbolic.shape_env import MIN_SYMBOL_VALUE


@dataclasses.dataclass(frozen=True)
class SymSize:
    """One size of one traced tensor: where it came from and its concrete value (hint)."""

    hint: int
    tensor_source: object = None
    dim: int = 0

    def specialize(self):
        """The concrete int; the tensor's TENSOR_MATCH guard already pins it."""
        return self.hint


def static_size(example, dim, source=None):
    """The traced value of `example.size(dim)` (an int while every size is static)."""
    return SymSize(int(example.shape[dim]), source, dim).specialize()


def static_sizes(example, source=None):
    """The traced value of `example.shape` as a tuple."""
    return tuple(static_size(example, d, source) for d in range(example.dim()))


def static_strides(example):
    """The traced value of `example.stride()` as a tuple."""
    return tuple(int(s) for s in example.stride())


def static_numel(example):
    """The traced value of `example.numel()`."""
    n = 1
    for s in static_sizes(example):
        n *= s
    return n


# ---------------------------------------------------------------------------------------------
# Which dimensions are dynamic


def mark_dynamic(t, dim, min=None, max=None, promise=True):  # noqa: A002 (torch's names)
    """Mark dimension(s) of tensor `t` dynamic for the next compilation, within [min, max];
    `promise`: a trace that specialises it raises (Note [Shapes: marked dims are a promise]),
    not so for kiln.export's marks (it names the Dim that cannot vary itself)."""
    dims = [dim] if isinstance(dim, int) else list(dim)
    for bound in (min, max):
        if bound is not None and (type(bound) is not int or bound < 0):
            raise TypeError(f"kiln.mark_dynamic: min and max are sizes (ints >= 0), got {bound!r}")
    if min is not None and max is not None and min > max:
        raise ValueError(f"kiln.mark_dynamic: min {min} > max {max}")
    marked = set(getattr(t, "_kiln_dynamic_dims", ()))
    ranges = dict(getattr(t, "_kiln_dim_ranges", {}))
    for d in dims:
        marked.add(d % t.dim())
        if promise:
            ranges[d % t.dim()] = (min, max)
    t._kiln_dynamic_dims = marked
    t._kiln_dim_ranges = ranges


def note_marks(env, t, sizes, source_name):
    """Tell the frame's ShapeEnv which traced sizes of input `t` the user marked dynamic, with
    their ranges (Note [Shapes: marked dims are a promise])."""
    for d, (lo, hi) in getattr(t, "_kiln_dim_ranges", {}).items():
        if d < len(sizes) and not isinstance(sizes[d], int):
            marked_dims.mark(env, sizes[d], f"{source_name}.size()[{d}]", lo, hi)


def mark_static(t, dim):
    """Mark dimension(s) of tensor `t` static (never made dynamic); every one when dim is None."""
    dims = range(t.dim()) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(t, "_kiln_static_dims", ()))
    marked.update(d % t.dim() for d in dims)
    t._kiln_static_dims = marked


def mark_static_module(m):
    """Keep the ints read from the attributes of module `m` (or of every instance of the module
    class `m`) constants: never size symbols, whatever values they take."""
    m._kiln_static_module = True


def is_static_module(m):
    """Whether mark_static_module marked module `m` or its class."""
    return bool(
        getattr(type(m), "_kiln_static_module", False) or vars(m).get("_kiln_static_module")
    )


def changed_dims(old_shapes, new_shapes):
    """The automatic-dynamic policy: `{source: {dim}}` of dims whose size changed to a size a
    symbol can have (>= 2), from any size: torch's (1 -> 2 too, or a third compile follows).

    A source whose rank changed, or that is new, gets no dims (it recompiles static).
    """
    out = {}
    for source, new in new_shapes.items():
        old = old_shapes.get(source)
        if old is None or len(old) != len(new):
            continue
        dims = {
            d
            for d, (a, b) in enumerate(zip(old, new))
            if a != b and a is not None and b >= MIN_SYMBOL_VALUE
        }
        if dims:
            out[source] = dims
    return out


def changed_values(old, new):
    """The scalar (int or float) sources whose value changed; NaN == NaN."""
    out = []
    for name, value in new.items():
        prev = old.get(name)
        if prev is None or len(prev) != 1:
            continue  # (not seen, or a 0-d tensor's sizes `()` before: a change of kind)
        prev = prev[0]
        if not (prev == value or (math.isnan(prev) and math.isnan(value))):
            out.append(name)
    return out


changed_floats = changed_values  # Note [Shapes: unspecialised floats]


# Note [Shapes: dynamic sources]
# config.dynamic_sources (torch's `torch.compiler.config.dynamic_sources`) names inputs that are
# symbolic from their first compile: a comma list of source names as kiln's guards spell them
# (`x`, `self._modules['inner'].n`, `self._modules['lin']._parameters['weight']`), each matched
# exactly or as a regex matching the whole name (`x.*`: `x1`, `x2`). A tensor gets a symbol for every dim (sizes 0 and 1 still specialise), a parameter too
# (no static parameter sizes for it); an int input is an int symbol (any int), an int attribute of
# a module too. It takes precedence over dynamic=False and over the constants of module ints.


@functools.lru_cache(8)
def _source_patterns(text):
    """(name, compiled regex or None where the name is no regex) per item of the list."""
    out = []
    for item in (p.strip() for p in text.split(",")):
        if item:
            try:
                out.append((item, re.compile(item)))
            except re.error:
                out.append((item, None))
    return tuple(out)


def is_dynamic_source(name):
    """Whether config.dynamic_sources names the source `name` (Note [Shapes: dynamic sources])."""
    text = config.dynamic_sources
    if not text:
        return False
    return any(
        item == name or (regex is not None and regex.fullmatch(name))
        for item, regex in _source_patterns(text)
    )


class FrameShapes:
    """Per-frame automatic-dynamic state: last sizes seen and the dims already made dynamic."""

    def __init__(self):
        self.sizes = {}  # source -> tuple of last sizes
        self.dynamic = {}  # source -> set of dims made dynamic

    def update(self, new_shapes):
        """Record one call's shapes; returns `{source: {dim}}` newly made dynamic (for logs)."""
        newly = {}
        for source, dims in changed_dims(self.sizes, new_shapes).items():
            fresh = dims - self.dynamic.get(source, set())
            if fresh:
                newly[source] = fresh
                self.dynamic.setdefault(source, set()).update(fresh)
                for d in sorted(fresh):
                    old, new = self.sizes[source][d], new_shapes[source][d]
                    logs.log("recompiles", f"{source} dim {d} became dynamic: size {old} -> {new}")
        self.sizes.update({s: tuple(v) for s, v in new_shapes.items()})
        return newly

    def dynamic_dims(self, source, t, dynamic=None):
        """The dims of tensor `t` (at `source`) to trace symbolically under `dynamic=` (torch's)."""
        static = getattr(t, "_kiln_static_dims", set())
        if is_dynamic_source(source):
            dynamic = True
        if dynamic is False:
            return set()
        if dynamic is True:
            dims = set(range(t.dim()))
        else:
            dims = set(self.dynamic.get(source, ())) | set(getattr(t, "_kiln_dynamic_dims", ()))
        # (a source that held a tensor of another rank before, e.g. a resume function's stack
        # slot in a loop over parameters: its recorded dims may not exist in this one)
        return {d for d in dims if d not in static and d < t.dim()}
