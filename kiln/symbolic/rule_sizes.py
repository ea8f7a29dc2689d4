"""Sizes of tensor arguments as shape rules see them, and the helpers every rule uses."""

from kiln.symbolic.shape_env import SymNode


class Sizes(tuple):
    """The sizes of one tensor argument (ints and SymNodes)."""


def _is_size(x):
    return isinstance(x, int | SymNode) and not isinstance(x, bool)


def _norm_dim(dim, rank):
    """A dim in [0, rank) (rank 0 accepts -1/0 like torch)."""
    r = max(rank, 1)
    if not -r <= dim < r:
        raise IndexError(f"dim {dim} out of range for rank {rank}")
    return dim % r


def _dims(dim, rank):
    """A sorted tuple of dims; None or [] means all."""
    if dim is None or (isinstance(dim, list | tuple) and len(dim) == 0):
        return tuple(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    return tuple(sorted({_norm_dim(d, rank) for d in dim}))


def _check_equal(a, b, what):
    """Require two sizes equal (a guard for symbolic ones)."""
    if not a == b:
        raise RuntimeError(f"{what}: size mismatch {a} vs {b}")
    return a


def numel(sizes):
    """Product of the sizes."""
    n = 1
    for s in sizes:
        n = n * s
    return n


def broadcast_shapes(*shapes):
    """Broadcast sizes: size 1 stretches (guarded when symbolic), equal sizes unify."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        sizes = [shape[i - (rank - len(shape))] for shape in shapes if i >= rank - len(shape)]
        sizes = [s for s in sizes if not (isinstance(s, int) and s == 1)] or [1]
        if all(same_size(sizes[0], s) for s in sizes[1:]):
            out.append(sizes[0])  # (one size besides 1s, whether or not it is 1: nothing asked)
            continue
        cur = 1
        for shape in shapes:
            j = i - (rank - len(shape))
            if j < 0:
                continue
            s = shape[j]
            if s == 1:
                continue
            cur = s if cur == 1 else _check_equal(cur, s, "broadcast")
        out.append(cur)
    return Sizes(out)


def same_size(a, b):
    """Whether two sizes are the same expression (an unbacked size is then never asked `== 1`)."""
    if isinstance(a, SymNode) and isinstance(b, SymNode):
        return a.expr == b.expr
    return isinstance(a, int) and isinstance(b, int) and a == b


def same_as_first(x, *args, **kwargs):
    """The first argument's sizes; any other tensor argument must have the same sizes."""
    for other in (*args, *kwargs.values()):
        if isinstance(other, Sizes):
            if len(other) != len(x):
                raise RuntimeError(f"rank mismatch {len(other)} vs {len(x)}")
            for a, b in zip(x, other):
                _check_equal(a, b, "same-shape op")
    return Sizes(x)
