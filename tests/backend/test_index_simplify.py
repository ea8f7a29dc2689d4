"""Range-aware index simplification (kiln/backend/ir.py Ix): every rewrite checked by brute force."""

import itertools
import random

import torch

from kiln.backend.ir import Ix, set_range
from tests.backend.helpers import check


class _CInt(int):
    """An int with C's `/` (truncating) and `%` (sign of the dividend), to run rendered indices."""

    def __add__(self, o):
        return _CInt(int(self) + int(o))

    __radd__ = __add__

    def __sub__(self, o):
        return _CInt(int(self) - int(o))

    def __rsub__(self, o):
        return _CInt(int(o) - int(self))

    def __mul__(self, o):
        return _CInt(int(self) * int(o))

    __rmul__ = __mul__

    def __neg__(self):
        return _CInt(-int(self))

    def __truediv__(self, o):
        a, b = int(self), int(o)
        q = abs(a) // abs(b)
        return _CInt(q if (a < 0) == (b < 0) else -q)

    def __mod__(self, o):
        a, b = int(self), int(o)
        return _CInt(a - b * int(_CInt(a) / b))


def _floordiv_idx(a, b):
    return _CInt(int(a) // int(b))


def _mod_idx(a, b):
    return _CInt(int(a) % int(b))


def _run_c(ix, env):
    """Evaluate an index's C text with C semantics at one point."""
    scope = {k: _CInt(v) for k, v in env.items()}
    scope.update(kiln_floordiv_idx=_floordiv_idx, kiln_mod_idx=_mod_idx)
    return int(eval(ix.render(), {}, scope))  # noqa: S307 (our own rendered index text)


def _brute(build, ranges):
    """The simplified index equals Python's floor semantics of `build` at every point."""
    for name, (lo, hi) in ranges.items():
        set_range(name, lo, hi)
    ix = build(*[Ix.var(n) for n in ranges])
    names = list(ranges)
    for point in itertools.product(*[range(lo, hi + 1) for lo, hi in ranges.values()]):
        env = dict(zip(names, point))
        assert _run_c(ix, env) == build(*point), (ix, env)
    return ix


def test_attention_bias_grad_index_is_contiguous():
    """The stacked-qkv gradient read by the bias-grad sum: a permuted flat index is flat again."""

    def build(o, r):
        x = o + 384 * r
        return 128 * ((x // 128) % 3) + 32 * ((x // 32) % 4) + x % 32 + 384 * r

    ix = _brute(build, {"ts_o": (0, 383), "ts_r": (0, 5)})
    assert ix == Ix.var("ts_o") + Ix.var("ts_r") * 384, ix


def test_multiple_of_the_divisor_leaves_div_and_mod():
    def build(a, r):
        return (a + 384 * r) // 128 + 1000 * ((a + 384 * r) % 128)

    ix = _brute(build, {"tm_a": (0, 383), "tm_r": (0, 4)})
    assert all("tm_r" not in sym for sym in ix.terms if sym != "tm_r"), ix  # r left the atoms


def test_mod_of_div_recombines():
    def build(x):
        return 8 * ((x // 8) % 5) + x % 8

    ix = _brute(build, {"tr_x": (0, 200)})
    assert str(ix) == "((tr_x) % 40)", ix


def test_negative_offsets_keep_floor_semantics():
    def build(a, b):
        return (a - 7 + 12 * b) // 4 + 100 * ((a - 7 + 12 * b) % 4) + 10000 * ((a - 9) // 3)

    _brute(build, {"tn_a": (0, 11), "tn_b": (-2, 3)})


def test_random_expressions_match_brute_force():
    """Random affine / div / mod trees over small ranges (negative values included)."""
    rng = random.Random(0)
    for case in range(250):
        n = rng.randint(1, 3)
        names = [f"tz{case}_{j}" for j in range(n)]
        ranges = {}
        for name in names:
            lo = rng.choice([0, 0, 0, -3])
            ranges[name] = (lo, lo + rng.randint(0, 13))

        def gen(depth, n=n):
            roll = rng.random()
            if depth == 0 or roll < 0.2:
                j = rng.randrange(n)
                c = rng.choice([1, 1, 2, 3, 4, 8, 12, -1])
                return lambda *v, j=j, c=c: c * v[j]
            a = gen(depth - 1)
            k = rng.choice([2, 3, 4, 6, 8, 16])
            if roll < 0.45:
                b = gen(depth - 1)
                m = rng.choice([1, 2, 4, 8, 12])
                return lambda *v, a=a, b=b, m=m: a(*v) + m * b(*v)
            if roll < 0.6:
                c = rng.randint(-9, 9)
                return lambda *v, a=a, c=c: a(*v) + c
            if roll < 0.8:
                return lambda *v, a=a, k=k: a(*v) // k
            return lambda *v, a=a, k=k: a(*v) % k

        expr = gen(rng.randint(1, 4))
        extra = gen(2)
        k = rng.choice([2, 4, 8])
        n2 = rng.choice([2, 3, 5])

        # recombination shapes: k*((e // k) % n) + e % k and k*(e // k) + e % k, plus noise
        def build(*v, expr=expr, extra=extra, k=k, n2=n2):
            e = expr(*v)
            return k * ((e // k) % n2) + e % k + 3 * (k * (e // k) + e % k) + extra(*v)

        _brute(build, ranges)


def test_kernel_stacked_grads_permuted_then_summed():
    """Eager vs kiln: a (B, T, 3, H, D) stack read back as (B*T, 3*H*D) for a column sum and mm."""
    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
    w = torch.randn(192, 5)

    def fn(a, b, c, w):
        y = torch.stack([a, b, c]).permute(1, 3, 0, 2, 4).reshape(16, 192)
        return y.sum(0), y @ w, (y * 2).sum(0)

    compiled = check(fn, [q, k, v, w], atol=1e-4, rtol=1e-4)
    assert "% 3)" not in compiled.cpp_src, compiled.cpp_src


def test_kernel_odd_offsets_through_views():
    """Eager vs kiln: slices with offsets then views/permutes (negative-free but non-aligned)."""
    x = torch.randn(7, 96)

    def fn(a):
        s = a[:, 5:77].reshape(7, 3, 24).permute(1, 0, 2).reshape(3, 168)
        return (s.sum(0), s.reshape(21, 24)[:, 3:].sum(1))

    check(fn, [x], atol=1e-5, rtol=1e-5)
