"""Guards and the cache: the seed's JIT example, recompiles and their reasons, the limit."""

import re

import pytest
import torch
from frontend_helpers import CountingBackend, LogCapture

import kiln
from kiln import config, logs


class A(torch.nn.Module):
    def forward(self, x):
        return torch.exp(2 * x)


class B(torch.nn.Module):
    def forward(self, x):
        return torch.exp(-x)


def f(x, mod):
    y = mod(x)
    z = torch.log(y)
    return z


SEED_GUARD_A = """\
def guard(x, mod):
    try:
        if not (___type(mod) is ___A()): return False
        if not (not mod._forward_hooks and not mod._forward_pre_hooks and not mod._backward_hooks and not mod._backward_pre_hooks): return False
        if not (___tensor_match(x)): return False  # TensorMatch(Tensor float32 cpu size=(5, 5, 5) stride=(25, 5, 1) requires_grad=False and dispatch keys)
        ___s0 = ___plain_attr(mod, '__dict__')
        if not ('forward' not in ___s0): return False
        if not (___is_grad_enabled() is True): return False
        if not (___deterministic() is False): return False
        if not (___cublas_tf32() is False): return False
        if not (___functorch_transform() is None): return False
        if not (not ___is_any_autocast_enabled()): return False
        if not (___kiln_config.compiled_autograd is False): return False
        if not (not ___function_modes_on()): return False
        if not (not ___global_forward_hooks and not ___global_forward_pre_hooks): return False
        if not (not ___global_backward_hooks and not ___global_backward_pre_hooks): return False
    except Exception:  # a failing access is a failing guard
        return False
    return True
"""


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    yield
    logs.set_logs("")


def test_seed_jit_example_two_entries():
    """seed 004: f(x, a) then f(x, b) gives two cache entries guarded on the module type."""
    backend = CountingBackend()
    cf = kiln.compile(f, backend=backend)
    x = torch.randn(5, 5, 5)
    a, b = A(), B()
    torch.testing.assert_close(cf(x, a), f(x, a))
    torch.testing.assert_close(cf(x, a), f(x, a))  # hit
    torch.testing.assert_close(cf(x, b), f(x, b))  # miss: new entry
    torch.testing.assert_close(cf(x, b), f(x, b))  # hit
    cache = cf._kiln_cache
    assert len(cache.entries) == 2
    assert backend.calls == 2
    assert kiln.counters["stats"]["unique_graphs"] == 2
    assert kiln.counters["stats"]["recompiles"] == 1
    assert cache.entry_info[0].guard_source == SEED_GUARD_A
    assert cache.entry_info[1].guard_source == SEED_GUARD_A.replace("___A", "___B")
    # the graphs are what the seed's "transformed code" says: exp(2x) / exp(-x), then log
    ops0 = [n.target for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    ops1 = [n.target for n in backend.graphs[1].graph.nodes if n.op == "call_function"]
    assert [getattr(o, "__name__", o) for o in ops0] == ["mul", "exp", "log"]
    assert [getattr(o, "__name__", o) for o in ops1] == ["neg", "exp", "log"]
    # the guard functions are plain functions of (x, mod)
    guard_a, guard_b = (e.guard for e in cache.entry_info)
    assert guard_a(x, a) and not guard_a(x, b)
    assert guard_b(x, b) and not guard_b(x, a)


def _recompile_reason(fn, first_args, second_args, capsys_or_caplog):
    cf = kiln.compile(fn, backend="eager")
    cf(*first_args)
    cf(*second_args)
    return cf


@pytest.mark.parametrize(
    "change,expected_part",
    [
        (lambda x: x.double(), "x.dtype is ___float32"),
        (lambda x: torch.randn(4, 3), "x.shape == (3, 4)"),
        (lambda x: x.t(), "x.shape == (3, 4)"),
        (lambda x: x.clone().requires_grad_(), "x.requires_grad is False"),
        (lambda x: torch.randn(3, 8)[:, ::2], "x.stride() == (4, 1)"),
        (lambda x: [x], "___type(x) is ___Tensor"),
    ],
    ids=["dtype", "shape", "transpose", "requires_grad", "stride", "type"],
)
def test_recompile_on_tensor_change_logs_reason(change, expected_part):
    logs.set_logs("recompiles")

    def g(x):
        return x * 2 if isinstance(x, torch.Tensor) else x

    cf = kiln.compile(g, backend="eager")
    x = torch.randn(3, 4)
    cf(x)
    cf(x)
    assert kiln.counters["stats"]["recompiles"] == 0
    y = change(x)
    with LogCapture("recompiles") as cap:
        result = cf(y)
    expected = g(y)
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(result, expected)
    assert kiln.counters["stats"]["recompiles"] == 1
    assert len(cf._kiln_cache.entries) == 2
    msgs = cap.messages["recompiles"]
    assert expected_part in msgs[0], msgs  # (then the dims made dynamic, if sizes changed)


def test_recompile_on_grad_mode():
    cf = kiln.compile(lambda x: x * 2, backend="eager")
    x = torch.randn(3, requires_grad=True)
    assert cf(x).requires_grad
    with torch.no_grad():
        out = cf(x)
    assert not out.requires_grad
    assert kiln.counters["stats"]["recompiles"] == 1


def test_constant_arg_guard_and_bool_vs_int():
    backend = CountingBackend()
    cf = kiln.compile(lambda x, n: x * n, backend=backend)
    x = torch.randn(3)
    cf(x, 2)
    cf(x, 2)
    assert backend.calls == 1
    torch.testing.assert_close(cf(x, 3), x * 3)
    torch.testing.assert_close(cf(x, True), x * True)  # True == 1 but is a different constant
    assert backend.calls == 3
    guard_src = cf._kiln_cache.entry_info[0].guard_source
    assert "___type(n) is ___int and n == 2" in guard_src


def test_global_and_closure_guards():
    scale = [2.0]

    def make():
        factor = scale[0]

        def h(x):
            return x * factor * GLOBAL_K

        return h

    h = make()
    cf = kiln.compile(h, backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), x * 2.0 * GLOBAL_K)
    src = cf._kiln_cache.entry_info[0].guard_source
    assert "___s0 = ___closure[0].cell_contents" in src, src
    assert "___s0 == 2.0" in src
    assert "___G['GLOBAL_K']" in src
    globals()["GLOBAL_K"] = 5
    try:
        torch.testing.assert_close(cf(x), x * 2.0 * 5)
        assert kiln.counters["stats"]["recompiles"] == 1
    finally:
        globals()["GLOBAL_K"] = 3


GLOBAL_K = 3


def test_list_length_and_dict_keys_guards():
    cf = kiln.compile(lambda xs, d: sum(xs) + d["a"], backend="eager")
    x = torch.randn(2)
    cf([x, x], {"a": x})
    src = cf._kiln_cache.entry_info[0].guard_source
    assert "if not (___type(xs) is ___list and ___len(xs) == 2): return False" in src
    # only the key read is guarded (Note [Dicts: inputs guarded by the keys read])
    assert "if not (___type(d) is ___dict): return False" in src
    assert "if not ('a' in d): return False" in src
    torch.testing.assert_close(cf([x, x, x], {"a": x}), 4 * x)
    torch.testing.assert_close(cf([x, x], {"a": x, "b": x}), 3 * x)
    assert kiln.counters["stats"]["recompiles"] == 1


def test_dict_read_whole_guards_its_keys():
    cf = kiln.compile(lambda x, d: x + len(d) + d["a"], backend="eager")
    x = torch.randn(2)
    cf(x, {"a": x})
    src = cf._kiln_cache.entry_info[0].guard_source
    assert "if not (___type(d) is ___dict and ___list(d) == ['a']): return False" in src
    torch.testing.assert_close(cf(x, {"a": x, "b": x}), x + 2 + x)
    assert kiln.counters["stats"]["recompiles"] == 1


def test_cache_size_limit_warns_once_and_runs_eagerly(monkeypatch):
    monkeypatch.setattr(config, "cache_size_limit", 3)
    backend = CountingBackend()

    def limited(x, n):
        return x + n

    # dynamic=False: each int value recompiles (with automatic dynamic, an int that changed
    # is an unspecialised int symbol and serves every value, as in torch)
    cf = kiln.compile(limited, backend=backend, dynamic=False)
    x = torch.randn(2)
    with LogCapture("warnings") as cap:
        for n in range(6):
            torch.testing.assert_close(cf(x, n), x + n)
    assert backend.calls == 3
    assert len(cf._kiln_cache.entries) == 3
    warnings = [m for m in cap.messages["warnings"] if "cache_size_limit" in m]
    assert len(warnings) == 1 and "limited" in warnings[0], cap.messages
    torch.testing.assert_close(cf(x, 0), x)  # entries made before the limit still hit
    assert backend.calls == 3


def test_guard_log_channel_prints_source():
    logs.set_logs("guards")
    cf = kiln.compile(lambda x: x + 1, backend="eager")
    with LogCapture("guards") as cap:
        cf(torch.randn(2))
    msgs = cap.messages["guards"]
    assert msgs and "def guard(x):" in msgs[0]


def test_graph_code_and_bytecode_channels():
    logs.set_logs("graph_code,bytecode")
    cf = kiln.compile(lambda x: x.sin(), backend="eager")
    with LogCapture("graph_code", "bytecode") as cap:
        cf(torch.randn(2))
    (code,) = cap.messages["graph_code"]
    (bytecode,) = cap.messages["bytecode"]
    assert "sin = l_x_.sin()" in code, code
    assert "--- transformed ---" in bytecode and "__kiln_compiled_fn_" in bytecode


def test_guard_failure_on_inplace_weight_update_needs_no_recompile():
    lin = torch.nn.Linear(3, 3)
    backend = CountingBackend()
    cf = kiln.compile(lambda x: lin(x), backend=backend)
    x = torch.randn(2, 3)
    cf(x)
    with torch.no_grad():
        lin.weight.mul_(2)
        lin.bias.zero_()
    torch.testing.assert_close(cf(x), lin(x))
    assert backend.calls == 1
    assert kiln.counters["stats"]["recompiles"] == 0
    # replacing the parameter object is seen too (guards load it from the module)
    lin.weight = torch.nn.Parameter(torch.randn(3, 3))
    torch.testing.assert_close(cf(x), lin(x))


def test_debug_dir_dump(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "debug_dir", str(tmp_path))
    cf = kiln.compile(lambda x: x.sin() + 1, backend="eager")
    cf(torch.randn(2))
    (folder,) = (tmp_path / "frontend").iterdir()
    assert "def guard(x):" in (folder / "guards.py").read_text()
    assert "sin" in (folder / "graph.py").read_text()
    assert "--- transformed ---" in (folder / "bytecode.txt").read_text()


def test_module_state_sources_are_hoisted():
    lin = torch.nn.Sequential(torch.nn.Linear(2, 2))
    cf = kiln.compile(lambda x: lin(x), backend="eager")
    cf(torch.randn(2))
    src = cf._kiln_cache.entry_info[0].guard_source
    assert "___s0 = ___closure[0].cell_contents" in src
    modules = re.search(r"(___s\d+) = ___s0\._modules", src).group(1)
    child = re.search(rf"(___s\d+) = {modules}\['0'\]", src).group(1)
    params = re.search(rf"(___s\d+) = {child}\._parameters", src).group(1)
    weight = re.search(rf"(___s\d+) = {params}\['weight'\]", src).group(1)
    assert re.search(rf"if not \(___tensor_match\w*\({weight}\)\): return False", src)
    parts = cf._kiln_cache.entry_info[0].guard.parts  # (the readable form: whole sources)
    assert any(p.endswith("._parameters['weight'].shape == (2, 2)") for p in parts)
    assert src.count("cell_contents") == 1  # each source is computed once


def test_same_module_type_other_instance_no_recompile():
    def block(layer, x):
        return layer(x).relu()

    layers = [torch.nn.Linear(3, 3) for _ in range(4)]
    backend = CountingBackend()
    cf = kiln.compile(block, backend=backend)
    x = torch.randn(2, 3)
    for layer in layers:
        torch.testing.assert_close(cf(layer, x), block(layer, x))
    assert backend.calls == 1 and kiln.counters["stats"]["recompiles"] == 0


def test_guard_with_missing_attribute_is_false_not_an_error():
    class Holder:
        pass

    h = Holder()
    h.k = 2
    cf = kiln.compile(lambda x, o: x * o.k, backend="eager")
    x = torch.randn(2)
    torch.testing.assert_close(cf(x, h), x * 2)
    h2 = Holder()  # same type, no attribute: the guard fails (no AttributeError), eager raises
    with pytest.raises(AttributeError):
        cf(x, h2)


def test_is_between_inputs_is_guarded():
    def same(a, b):
        return a * 2 if a is b else a + b

    cf = kiln.compile(same, backend="eager")
    x, y = torch.randn(2), torch.randn(2)
    torch.testing.assert_close(cf(x, y), x + y)
    torch.testing.assert_close(cf(x, x), x * 2)  # guard `a is not b` fails: recompile
    assert kiln.counters["stats"]["recompiles"] == 1


def test_is_grad_enabled_is_a_trace_time_constant():
    def f(x):
        with torch.no_grad():
            inner = torch.is_grad_enabled()
        return x * 2 if torch.is_grad_enabled() and not inner else x

    backend = CountingBackend()
    cf = kiln.compile(f, backend=backend)
    x = torch.randn(2)
    torch.testing.assert_close(cf(x), x * 2)
    with torch.no_grad():
        torch.testing.assert_close(cf(x), x)
    assert kiln.counters["stats"]["graph_breaks"] == 0


def test_torch_size_argument_does_not_recompile():
    cf = kiln.compile(lambda x, shape: x.view(shape), backend="eager")
    x = torch.randn(6)
    for _ in range(3):
        torch.testing.assert_close(cf(x, torch.Size([2, 3])), x.view(2, 3))
    assert kiln.counters["stats"]["recompiles"] == 0
    torch.testing.assert_close(cf(x, torch.Size([3, 2])), x.view(3, 2))
    assert kiln.counters["stats"]["recompiles"] == 1


def test_bound_c_methods_are_guarded_by_what_they_are_bound_to():
    """`out.keys` is a new object on every access: guarding its identity would recompile on every
    call. The guard pins the type it is bound to and the method name instead."""
    import collections

    class Out(collections.OrderedDict):
        pass

    class Other(collections.OrderedDict):
        def keys(self):
            return ["other"]

    def f(out, x):
        return list(out.keys()), x + 1

    kiln.reset()
    cf = kiln.compile(f, backend="eager")
    for _ in range(4):
        o = Out(a=1, b=2)
        got, want = cf(o, torch.ones(2)), f(o, torch.ones(2))
        assert got[0] == want[0] and torch.equal(got[1], want[1])
    assert kiln.counters["stats"]["recompiles"] == 0
    o = Other(a=1)
    got = cf(o, torch.ones(2))
    assert got[0] == ["other"] and torch.equal(got[1], torch.full((2,), 2.0))


def test_the_entry_that_ran_last_is_checked_first():
    # Note [Cache: most recent entry first]: a hit moves its entry to the front of the hot list
    def f(x, n):
        return x * n

    cf = kiln.compile(f, backend="eager", dynamic=False)
    x = torch.randn(3)
    for n in (2, 3, 2):
        torch.testing.assert_close(cf(x, n), f(x, n))
    cache = cf._kiln_cache
    first, second = cache.entry_info  # compile order is kept
    assert cache.entries[0][0] is first.guard
    torch.testing.assert_close(cf(x, 3), f(x, 3))
    assert cache.entries[0][0] is second.guard
    assert [e[0] for e in cache.entries] == [second.guard, first.guard]


def test_a_function_without_defaults_has_no_guard_on_them():
    # a call traced through it bound every parameter, so defaults given later change nothing
    def helper(x, k):
        return x * k

    def f(x):
        return helper(x, 2) + 1

    cf = kiln.compile(f, backend="eager")
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    src = cf._kiln_cache.entry_info[0].guard_source
    assert "__code__" in src and "__defaults__" not in src and "__kwdefaults__" not in src, src
    helper.__defaults__ = (5,)
    torch.testing.assert_close(cf(x), f(x))
    assert len(cf._kiln_cache.entry_info) == 1


def test_a_changed_default_that_a_call_uses_recompiles():
    def helper(x, k=2):
        return x * k

    def f(x):
        return helper(x)

    cf = kiln.compile(f, backend="eager")
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    helper.__defaults__ = (3,)
    torch.testing.assert_close(cf(x), f(x))
    assert len(cf._kiln_cache.entry_info) == 2
