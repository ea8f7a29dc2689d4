"""Dynamic shapes in the frontend: automatic dynamic, dynamic=, mark_dynamic/static, symbolic sizes
in traced code (SymNodeVariable), shape guards, dynamic int inputs; eager is the oracle."""

import copy
import math
import random

import pytest
import torch
import torch.nn.functional as F
from frontend_helpers import CountingBackend, LogCapture
from torch import nn

import kiln
from kiln import logs


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    prev = set(logs._enabled)
    yield
    logs._enabled.clear()
    logs._enabled.update(prev)
    kiln.reset()


def _recompile_messages(fn, *calls):
    """The `recompiles` log of running `fn` on each argument tuple in `calls`."""
    logs.set_logs("recompiles")
    with LogCapture("recompiles") as cap:
        for args in calls:
            fn(*args)
    return cap.messages["recompiles"]


def _caches(compiled):
    """The frame cache of a compiled function or module and those of its resume functions."""
    cache = getattr(compiled, "_kiln_cache", None) or compiled.__dict__["_kiln_cache"]
    out, todo = [], [cache]
    while todo:
        c = todo.pop(0)
        if c is None or any(c is o for o in out):
            continue
        out.append(c)
        todo.extend(getattr(w, "_kiln_cache", None) for w in c.children.values())
    return out


def _size_guards(entry):
    """The guard's conditions on sizes, in its readable form (Python expressions; the check
    function may test a static tensor in one C++ call: Note [Guards: tensor checks in C++])."""
    return [
        p
        for p in entry.guard.parts
        if "size()" in p or ".dim()" in p or "shape" in p or ".stride()[" in p
    ]


def _check(compiled, fn, *args):
    out = compiled(*args)
    torch.testing.assert_close(out, fn(*args))
    return out


# --- the seed 004 example ---------------------------------------------------------------------


def seed_function(inputs):
    x = inputs["x"]
    y = inputs["y"]
    x = x.cos().cos()
    if x.mean() > 0.5:
        x = x / 1.1
    return x * y


def _seed_inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(n, generator=g, requires_grad=True),
        "y": torch.randn(n, generator=g, requires_grad=True),
    }


def test_seed_004_shapes_10_and_8_compile_at_most_twice():
    function = kiln.compile(seed_function, backend="eager")
    shape_10_inputs, shape_8_inputs = _seed_inputs(10, 0), _seed_inputs(8, 1)
    frames_after_warmup = None
    for i in range(100):
        for inputs in (shape_10_inputs, shape_8_inputs):
            _check(function, seed_function, inputs)
        if i == 1:
            frames_after_warmup = kiln.counters["frames"]["total"]
    assert kiln.counters["frames"]["total"] == frames_after_warmup  # never again afterwards
    for cache in _caches(function):
        assert len(cache.entries) <= 2, cache.fn
    main = _caches(function)[0]
    assert len(main.entries) == 2
    assert "inputs['x'].size()[0] >= 2" in _size_guards(main.entry_info[1])
    # other lengths reuse the symbolic entry
    _check(function, seed_function, _seed_inputs(37, 2))
    assert len(main.entries) == 2


def test_seed_004_under_aot_eager_with_gradients():
    function = kiln.compile(seed_function, backend="aot_eager")
    for _ in range(3):
        for n, seed in [(10, 0), (8, 1), (13, 2)]:
            a, b = _seed_inputs(n, seed), _seed_inputs(n, seed)
            out, expected = function(a), seed_function(b)
            torch.testing.assert_close(out, expected)
            out.sum().backward()
            expected.sum().backward()
            for k in ("x", "y"):
                torch.testing.assert_close(a[k].grad, b[k].grad)
    assert len(_caches(function)[0].entries) == 2


SEED_GUARD = """\
def guard(inputs):
    try:
        if not (___type(inputs) is ___dict): return False
        if not ('x' in inputs): return False
        if not ('y' in inputs): return False
        ___s0 = inputs['x']
        if not (___tensor_match(___s0)): return False  # TensorMatch(Tensor float32 cpu size=(*,) contiguous requires_grad=True and dispatch keys)
        ___s1 = inputs['y']
        if not (___tensor_match_7(___s1)): return False  # TensorMatch(Tensor float32 cpu size=(*,) contiguous requires_grad=True and dispatch keys)
        if not (inputs['x'].size()[0] >= 2): return False
        if not (inputs['y'].size()[0] >= 2): return False
        if not (___is_grad_enabled() is True): return False
        if not (___deterministic() is False): return False
        if not (___cublas_tf32() is False): return False
        if not (___functorch_transform() is None): return False
        if not (not ___is_any_autocast_enabled()): return False
        if not (___kiln_config.compiled_autograd is False): return False
        if not (not ___function_modes_on()): return False
    except Exception:  # a failing access is a failing guard
        return False
    return True
"""


def test_seed_004_guard_text_and_recompile_log():
    function = kiln.compile(seed_function, backend="eager")
    function(_seed_inputs(10, 0))
    msgs = _recompile_messages(function, (_seed_inputs(8, 1),))
    assert "inputs['x'].shape == (10,)" in msgs[0]
    assert "inputs['x'] dim 0 became dynamic: size 10 -> 8" in msgs
    assert "inputs['y'] dim 0 became dynamic: size 10 -> 8" in msgs
    main = _caches(function)[0]
    assert sum("shape == (10,)" in p for p in main.entry_info[0].guard.parts) == 2
    assert main.entry_info[1].guard.source == SEED_GUARD


def test_resume_function_guard_relates_the_two_sizes():
    function = kiln.compile(seed_function, backend="eager")
    for n, seed in [(10, 0), (8, 1), (10, 0), (8, 1)]:
        _check(function, seed_function, _seed_inputs(n, seed))
    resumes = [c for c in _caches(function)[1:] if c.entries]
    assert resumes
    for cache in resumes:
        guards = _size_guards(cache.entry_info[-1])
        assert "y.size()[0] == x.size()[0]" in guards  # `x * y`: the broadcast fact


# --- models over many shapes ------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.gelu(self.fc2(x))
        return self.fc3(x).log_softmax(-1)


class Block(nn.Module):
    """A causal self-attention transformer block (view/transpose/mask slice/softmax/layer norm)."""

    def __init__(self, C=32, nh=4, max_t=320):
        super().__init__()
        self.nh = nh
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc2 = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        mask = torch.tril(torch.ones(max_t, max_t)).view(1, 1, max_t, max_t)
        self.register_buffer("mask", mask)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        hd = C // self.nh
        q = q.view(B, T, self.nh, hd).transpose(1, 2)
        k = k.view(B, T, self.nh, hd).transpose(1, 2)
        v = v.view(B, T, self.nh, -1).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


def _sample_shapes(train):
    """(B, T) over batch sizes 1..64 and sequence lengths 7..300, with B == 1 and T == 1."""
    rng = random.Random(0)
    if train:  # a backward per shape: smaller ones
        return [(2, 7), (3, 9), (1, 12), (rng.randint(2, 16), rng.randint(7, 64))]
    return [(2, 7), (3, 9), (64, 300), (1, 12), (5, 1), (rng.randint(2, 64), rng.randint(7, 300))]


# Note [Dynamic tests: model tolerances]
# Model outputs and accumulated grads are sums that BLAS splits across threads; how many threads
# it uses can change with the machine's load (dynamic OpenMP/MKL threading), and with it the
# rounding, between the compiled and the eager run of the same data (and aot_eager's decomposed
# log_softmax/gelu round differently from eager's fused kernels). So model-level comparisons use
# float32 model tolerances, not assert_close's elementwise defaults; nothing here is timed.
MODEL_TOL = {"atol": 1e-5, "rtol": 1e-4}


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_mlp_over_batch_sizes(backend):
    torch.manual_seed(0)
    model = MLP()
    ref = copy.deepcopy(model)
    compiled = kiln.compile(model, backend=backend)
    train = backend == "aot_eager"
    for b in [3, 5, 1, 64, 17, 2] if not train else [3, 5, 1, 64]:
        x = torch.randn(b, 16)
        out, expected = compiled(x), ref(x)
        torch.testing.assert_close(out, expected, **MODEL_TOL)
        if train:
            out.sum().backward()
            expected.sum().backward()
    if train:
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **MODEL_TOL)
    # one static compile, one symbolic, one for batch size 1
    assert kiln.counters["frames"]["total"] == 3, dict(kiln.counters["frames"])


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_transformer_block_over_batch_and_sequence_lengths(backend):
    torch.manual_seed(0)
    model = Block()
    ref = copy.deepcopy(model)
    compiled = kiln.compile(model, backend=backend)
    train = backend == "aot_eager"
    shapes = _sample_shapes(train)
    for B, T in shapes:
        x = torch.randn(B, T, 32)
        out, expected = compiled(x), ref(x)
        torch.testing.assert_close(out, expected, **MODEL_TOL)
        if train:
            out.pow(2).mean().backward()
            expected.pow(2).mean().backward()
    if train:
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **MODEL_TOL)
    # static, symbolic, and one each for B == 1 and T == 1 (0/1 specialisation)
    n_one = sum(1 for s in {(B == 1, T == 1) for B, T in shapes} if any(s))
    assert kiln.counters["frames"]["total"] <= 2 + n_one, dict(kiln.counters["frames"])
    cache = _caches(compiled)[0]
    symbolic = cache.entry_info[1]
    guards = _size_guards(symbolic)
    assert "x.size()[0] >= 2" in guards and "x.size()[1] >= 2" in guards
    assert "x.size()[1] <= 320" in guards  # the mask slice [:T] stays in the buffer
    code = symbolic.gm.code
    assert "l_x_.size(0)" in code and "view(size, size_1, 4, 8)" in code
    assert "slice(None, size_1, None)" in code


# --- dynamic=, mark_dynamic, mark_static --------------------------------------------------------


def double_rows(x):
    return x * x.shape[0]


def test_dynamic_true_starts_symbolic():
    compiled = kiln.compile(double_rows, backend="eager", dynamic=True)
    for n in [4, 9, 33, 2]:
        _check(compiled, double_rows, torch.randn(n, 3))
    assert kiln.counters["frames"]["total"] == 1
    (entry,) = _caches(compiled)[0].entry_info
    assert _size_guards(entry) == ["x.dim() == 2", "x.size()[0] >= 2", "x.size()[1] >= 2"]
    gm = entry.gm
    assert "shape_env" in gm.meta
    (placeholder,) = [n for n in gm.graph.nodes if n.op == "placeholder"]
    example = placeholder.meta["example_value"]
    assert all(isinstance(s, torch.SymInt) for s in example.shape)


def test_dynamic_false_never_makes_dims_dynamic():
    compiled = kiln.compile(double_rows, backend="eager", dynamic=False)
    for n in [4, 9, 33]:
        _check(compiled, double_rows, torch.randn(n, 3))
    assert kiln.counters["frames"]["total"] == 3
    for entry in _caches(compiled)[0].entry_info:
        assert entry.gm is not None and "shape_env" not in entry.gm.meta
        assert any(g.startswith("x.shape == (") for g in _size_guards(entry))


def test_static_frames_keep_meta_example_values():
    backend = CountingBackend()
    compiled = kiln.compile(double_rows, backend=backend)
    _check(compiled, double_rows, torch.randn(4, 3))
    (gm,) = backend.graphs
    assert "shape_env" not in gm.meta
    ex = next(n for n in gm.graph.nodes if n.op == "placeholder").meta["example_value"]
    assert type(ex) is torch.Tensor and ex.device.type == "meta"
    assert "size" not in gm.code  # x.shape[0] is the constant 4


def test_mark_dynamic_first_compile_is_symbolic():
    compiled = kiln.compile(double_rows, backend="eager")
    x = torch.randn(5, 3)
    kiln.mark_dynamic(x, 0)
    _check(compiled, double_rows, x)
    _check(compiled, double_rows, torch.randn(11, 3))
    _check(compiled, double_rows, torch.randn(7, 3))
    assert kiln.counters["frames"]["total"] == 1
    (entry,) = _caches(compiled)[0].entry_info
    assert _size_guards(entry) == ["x.dim() == 2", "x.size()[1] == 3", "x.size()[0] >= 2"]
    with pytest.raises(AssertionError):  # a different column count is a new compile
        _check(compiled, double_rows, torch.randn(7, 4))
        assert kiln.counters["frames"]["total"] == 1


def test_mark_static_pins_a_dim_under_dynamic_true():
    compiled = kiln.compile(double_rows, backend="eager", dynamic=True)
    x = torch.randn(6, 3)
    kiln.mark_static(x, 0)
    _check(compiled, double_rows, x)
    (entry,) = _caches(compiled)[0].entry_info
    assert _size_guards(entry) == ["x.dim() == 2", "x.size()[0] == 6", "x.size()[1] >= 2"]


def test_mark_static_keeps_automatic_dynamic_off():
    def f(x):
        return x + 1

    compiled = kiln.compile(f, backend="eager")
    for n in [4, 5, 6]:
        x = torch.randn(n)
        kiln.mark_static(x, 0)
        _check(compiled, f, x)
    assert kiln.counters["frames"]["total"] == 3


def test_sizes_zero_and_one_are_specialised():
    compiled = kiln.compile(double_rows, backend="eager", dynamic=True)
    for n in [0, 1, 4, 0, 1, 5]:
        _check(compiled, double_rows, torch.randn(n, 3))
    entries = _caches(compiled)[0].entry_info
    assert len(entries) == 3
    assert "x.size()[0] == 0" in _size_guards(entries[0])
    assert "x.size()[0] == 1" in _size_guards(entries[1])


# --- sizes in traced code -----------------------------------------------------------------------


def test_size_arithmetic_stays_symbolic():
    def f(x):
        b, t = x.shape
        y = x.view(b * t // 2, -1) * (b - 1) + max(b, t) - min(b, t) + len(x) + x.numel()
        return y, -b, b % 3

    compiled = kiln.compile(f, backend="eager", dynamic=True)
    for shape in [(4, 6), (6, 8), (10, 2)]:
        x = torch.randn(*shape)
        got, expected = compiled(x), f(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:] and type(got[1]) is int
    assert kiln.counters["frames"]["total"] == 1
    code = _caches(compiled)[0].entry_info[0].gm.code
    for text in ["size = l_x_.size(0)", "mul = size * size_1", "floordiv = mul // 2", "sym_max"]:
        assert text in code, code
    assert "numel = l_x_.numel()" in code and "neg = -size" in code


def test_comparison_is_a_shape_guard():
    def f(x):
        if x.size(0) > 5:
            return x + 1
        return x - 1

    compiled = kiln.compile(f, backend="eager", dynamic=True)
    for n in [3, 4, 8, 9, 2]:
        _check(compiled, f, torch.randn(n))
    entries = _caches(compiled)[0].entry_info
    assert len(entries) == 2
    assert "x.size()[0] <= 5" in _size_guards(entries[0])
    assert "x.size()[0] > 5" in _size_guards(entries[1])


def test_int_of_a_size_specialises():
    def f(x):
        return x + int(x.shape[0]) + sum(range(x.shape[0]))

    compiled = kiln.compile(f, backend="eager", dynamic=True)
    for n in [4, 5, 4]:
        _check(compiled, f, torch.randn(n))
    entries = _caches(compiled)[0].entry_info
    assert len(entries) == 2
    assert "x.size()[0] == 4" in _size_guards(entries[0])


def test_size_kept_across_a_graph_break():
    def f(x):
        y = x * 2
        n = x.shape[0] * 3
        kiln.graph_break()
        return y + n, n

    compiled = kiln.compile(f, backend="eager", dynamic=True)
    for k in [4, 7, 9]:
        x = torch.randn(k)
        got, expected = compiled(x), f(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
    assert kiln.counters["stats"]["graph_breaks"] >= 1
    assert len(_caches(compiled)[0].entries) == 1
    gm = _caches(compiled)[0].entry_info[0].gm
    assert "mul_1 = size * 3" in gm.code  # the size is an int output of the graph
    assert any(
        line.strip().startswith("return (") and "mul_1" in line for line in gm.code.splitlines()
    )


def test_factories_and_slices_with_symbolic_sizes():
    def f(x, mask):
        b, t = x.shape
        z = torch.zeros(b, 3) + x[:, :3]
        r = torch.arange(t) * x + torch.ones_like(x) * t + torch.full((b, 1), 2.0)
        return z, r + mask[:t, :t].sum(0), x.new_zeros(b, 2)

    compiled = kiln.compile(f, backend="eager", dynamic=True)
    mask = torch.tril(torch.ones(16, 16))
    for shape in [(4, 5), (6, 9), (3, 16)]:
        x = torch.randn(*shape)
        for a, b in zip(compiled(x, mask), f(x, mask)):
            torch.testing.assert_close(a, b)
    assert kiln.counters["frames"]["total"] == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_int_input_that_changes_becomes_dynamic():
    def f(x, n):
        return x.repeat(n, 1) * n

    backend = CountingBackend()
    compiled = kiln.compile(f, backend=backend)
    _check(compiled, f, torch.randn(2, 3), 3)
    msgs = _recompile_messages(compiled, (torch.randn(2, 3), 5))
    assert "n became dynamic (an int input): 3 -> 5" in msgs
    for n in [5, 7, 4]:
        _check(compiled, f, torch.randn(2, 3), n)
    assert kiln.counters["frames"]["total"] == 2
    gm = backend.graphs[-1]
    phs = {n.target: n for n in gm.graph.nodes if n.op == "placeholder"}
    assert isinstance(phs["L_n_"].meta["example_value"], torch.SymInt), phs
    assert backend.example_inputs[-1][-1] == 5 or 5 in backend.example_inputs[-1]
    guard = _caches(compiled)[0].entry_info[1].guard.source
    # an int symbol has no range guard (torch: not specialised on 0/1, no lower bound)
    assert "___type(n) is ___int" in guard and "n >= 2" not in guard and "n == 5" not in guard


def test_recompiles_log_names_the_dimension():
    def f(x):
        return x.sum(1)

    compiled = kiln.compile(f, backend="eager")
    msgs = _recompile_messages(compiled, (torch.randn(3, 4),), (torch.randn(3, 6),))
    assert "x dim 1 became dynamic: size 4 -> 6" in msgs


def test_symbolic_shape_returned_and_carried_across_a_break():
    def f(x):
        return x * 2, x.shape

    def g(x):
        s = x.shape
        kiln.graph_break()
        return x.view(s[0], -1), s

    for fn, frames in [(f, 1), (g, 2)]:  # g: its resume function gets s as a torch.Size
        kiln.reset()
        compiled = kiln.compile(fn, backend="eager", dynamic=True)
        for n in [4, 5, 6]:
            x = torch.randn(n, 3)
            got, expected = compiled(x), fn(x)
            torch.testing.assert_close(got[0], expected[0])
            assert type(got[1]) is torch.Size and got[1] == expected[1]
        assert kiln.counters["frames"]["total"] == frames, fn


def test_shape_comparisons_and_membership_are_facts():
    def f(x, y):
        r = x * 1.0
        if x.shape == y.shape:
            r = r + y
        if x.shape[0] in (1, 2):
            r = r * 2
        if x.shape[1:] == (3,):
            r = r - 1
        return r + math.sqrt(x.shape[1])  # a float of a size: specialised

    compiled = kiln.compile(f, backend="eager", dynamic=True)
    for n, m in [(4, 4), (5, 5), (6, 5), (2, 2), (7, 7)]:
        x, y = torch.randn(n, 3), torch.randn(m, 3)
        _check(compiled, f, x, y)
    assert kiln.counters["stats"]["graph_breaks"] == 0
    entries = _caches(compiled)[0].entry_info
    assert len(entries) == 3  # equal shapes, different shapes, x.shape[0] == 2
    first = _size_guards(entries[0])
    assert "y.size()[0] == x.size()[0]" in first and "x.size()[1] == 3" in first
    assert "x.size()[0] != 2" in first or "x.size()[0] > 2" in first, first


def test_tuple_plus_symbolic_shape():
    def f(x):
        shape = (-1,) + x.shape[1:]
        return x.reshape(shape) + x.shape[1:][0], x.shape[:1] + (2,)

    compiled = kiln.compile(f, backend="eager", dynamic=True)
    for shape in [(4, 5), (6, 7)]:
        x = torch.randn(*shape)
        got, expected = compiled(x), f(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1] and type(got[1]) is type(expected[1])
    assert kiln.counters["frames"]["total"] == 1
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_dense_non_contiguous_inputs_get_symbolic_strides():
    def f(x):
        return x.sum(0) * x.shape[1] + x[0]

    compiled = kiln.compile(f, backend="eager")
    for n, m in [(4, 5), (6, 7), (3, 9)]:
        _check(compiled, f, torch.randn(m, n).t())  # transposed: strides (1, n)
    entries = _caches(compiled)[0].entry_info
    assert len(entries) == 2
    guards = _size_guards(entries[1])
    assert "x.stride()[0] == 1" in guards and "x.stride()[1] == x.size()[0]" in guards
    # a contiguous input of the same sizes fails the stride guard: a new entry, still correct
    _check(compiled, f, torch.randn(5, 4))
    # a non-dense view stays static
    kiln.reset()
    compiled = kiln.compile(f, backend="eager")
    for n in [3, 4, 5]:
        _check(compiled, f, torch.randn(6, 8)[:, :n])
    assert kiln.counters["frames"]["total"] == 3


def test_dynamic_true_makes_int_arguments_symbolic_not_module_settings():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = 4

        def forward(self, x, n):
            return x.view(n, self.heads, -1).sum(-1) * n

    model = M()
    compiled = kiln.compile(model, backend="eager", dynamic=True)
    for n in [2, 3, 5]:
        x = torch.randn(n * 8)
        _check(compiled, model, x, n)
    assert kiln.counters["frames"]["total"] == 1
    guards = _size_guards(_caches(compiled)[0].entry_info[0])
    source = _caches(compiled)[0].entry_info[0].guard.source
    assert "n == " not in source and "n >= 2" not in source  # an int symbol: any int
    assert any("x.size()[0]" in g for g in guards)


def test_assume_static_by_default_off_compiles_symbolic_from_the_first_call(monkeypatch):
    # torch's switch: with dynamic=None, the first compile already serves other sizes
    monkeypatch.setattr(kiln.config, "assume_static_by_default", False)
    backend = CountingBackend()
    compiled = kiln.compile(lambda x, y: x * y, backend=backend)
    for n in (2, 3, 4, 5, 6):
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(compiled(x, y), x * y)
    assert len(backend.graphs) == 1
    monkeypatch.setattr(kiln.config, "assume_static_by_default", True)
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(lambda x, y: x * y, backend=backend)
    for n in (2, 3, 4):
        compiled(torch.randn(n), torch.randn(n))
    assert len(backend.graphs) == 2  # static first, then one symbolic recompile


def test_automatic_dynamic_shapes_off_never_makes_a_size_symbolic(monkeypatch):
    # each new size compiles a static entry (a recompile's own record made dims dynamic before)
    monkeypatch.setattr(kiln.config, "automatic_dynamic_shapes", False)
    backend = CountingBackend()
    compiled = kiln.compile(lambda x, y: x * y, backend=backend)
    for n in (2, 3, 4, 5, 6):
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(compiled(x, y), x * y)
    assert len(backend.graphs) == 5
    assert all(not ex[0].shape[0].__class__.__name__ == "SymInt" for ex in backend.example_inputs)
