"""Guards run as C programs (Note [Guards: a program evaluated in C]): the same answers as the
generated Python guard, compared with eager and with the Python function itself."""

import builtins
import weakref

import pytest
import torch
from frontend_helpers import CountingBackend, LogCapture

import kiln
from kiln import config, logs
from kiln.frontend import guard_program, guard_vm


@pytest.fixture(autouse=True)
def _reset(monkeypatch):
    assert guard_vm.module(wait=True) is not None, guard_vm._state["failed"]
    monkeypatch.setattr(config, "guard_program_check", True)  # every call: C and Python agree
    kiln.reset()
    yield
    logs.set_logs("")


def _guard(cf, i=0):
    guard = cf._kiln_cache.entry_info[i].guard
    assert type(guard).__name__ == "Program", type(guard)
    return guard


def _recompiles():
    return kiln.counters["stats"]["recompiles"]


# --- end to end: a guard that holds, then the change that fails it (and the recompile)


def test_attribute_constant_and_module_tree():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.k = 2

        def forward(self, x):
            return self.lin(x) * self.k

    m = M()
    cf = kiln.compile(m, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(2, 3)
    torch.testing.assert_close(cf(x), m(x))
    torch.testing.assert_close(cf(x), m(x))
    assert _recompiles() == 0
    text = _guard(cf).program_text
    assert "ATTR" in text and "ITEM" in text and "JUMP_TYPE" in text, text
    m.k = 5  # the constant read through an attribute
    torch.testing.assert_close(cf(x), m(x))
    assert _recompiles() == 1
    m.lin = torch.nn.Linear(3, 3, bias=False)  # a parameter less: its read fails
    torch.testing.assert_close(cf(x), m(x))
    assert _recompiles() == 2


@pytest.mark.parametrize(
    "same, other",
    [
        (3, 4),
        (2.5, -2.5),
        ("a", "b"),
        (True, False),
        (None, 0),
        ((1, "x"), (1, "y")),
    ],
    ids=["int", "float", "str", "bool", "none", "tuple"],
)
def test_constant_arguments(same, other):
    def f(x, c):
        return x + 1 if c == same else x - 1

    cf = kiln.compile(f, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, same), f(x, same))
    assert _guard(cf)
    torch.testing.assert_close(cf(x, same), f(x, same))
    assert _recompiles() == 0
    torch.testing.assert_close(cf(x, other), f(x, other))
    assert _recompiles() == 1


def test_nan_constant_passes_for_another_nan():
    """`c != c` is the NaN check: no identity shortcut (a NaN is not equal to itself)."""

    def f(x, c):
        return x * 2 if c != c else x

    cf = kiln.compile(f, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, float("nan")), f(x, float("nan")))
    torch.testing.assert_close(cf(x, float("nan") + 1.0), f(x, float("nan")))  # another object
    assert _recompiles() == 0
    torch.testing.assert_close(cf(x, 1.0), f(x, 1.0))
    assert _recompiles() == 1


def test_dict_items_and_keys():
    def f(x, d):
        return x * d["a"] + len(d)

    cf = kiln.compile(f, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3)
    d = {"a": 2, "b": 3}
    torch.testing.assert_close(cf(x, d), f(x, d))
    torch.testing.assert_close(cf(x, dict(d)), f(x, d))
    assert _recompiles() == 0
    assert "JUMP_KEYS" in _guard(cf).program_text
    for changed in ({"a": 2, "b": 3, "c": 1}, {"b": 3, "a": 2}, {"a": 7, "b": 3}):
        torch.testing.assert_close(cf(x, changed), f(x, changed))
    assert _recompiles() == 3


def test_list_length_and_items():
    def f(x, xs):
        return x * xs[0] + xs[-1]

    cf = kiln.compile(f, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, [1, 2]), f(x, [1, 2]))
    torch.testing.assert_close(cf(x, [1, 2]), f(x, [1, 2]))
    assert _recompiles() == 0
    assert "JUMP_LEN" in _guard(cf).program_text
    torch.testing.assert_close(cf(x, [1, 2, 3]), f(x, [1, 2, 3]))
    torch.testing.assert_close(cf(x, (1, 2)), f(x, (1, 2)))
    assert _recompiles() == 2


def test_missing_key_is_a_failing_guard_then_eager_error():
    def f(x, d):
        return x * d["a"]

    cf = kiln.compile(f, backend=CountingBackend())
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, {"a": 2}), f(x, {"a": 2}))
    _guard(cf)
    with pytest.raises(KeyError):
        f(x, {"b": 2})
    with pytest.raises(KeyError):  # the guard's own KeyError fails it; the frame's is the user's
        cf(x, {"b": 2})


def test_module_hooks_and_shadowing_attribute():
    m = torch.nn.Linear(3, 3)
    cf = kiln.compile(m, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(2, 3)
    torch.testing.assert_close(cf(x), m(x))
    _guard(cf)
    handle = m.register_forward_hook(lambda mod, args, out: out * 3)
    torch.testing.assert_close(cf(x), m(x))
    handle.remove()
    torch.testing.assert_close(cf(x), m(x))


def test_global_state():
    cf = kiln.compile(lambda x: x * 2, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3, requires_grad=True)
    assert cf(x).requires_grad
    _guard(cf)
    with torch.no_grad():
        out = cf(x)
    assert not out.requires_grad
    assert _recompiles() == 1


def test_closure_cell_and_global():
    n = 2

    def f(x):
        return x * n + OFFSET

    cf = kiln.compile(f, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x), f(x))
    assert "CELL" in _guard(cf).program_text
    n = 3
    torch.testing.assert_close(cf(x), f(x))
    assert _recompiles() == 1
    global OFFSET
    OFFSET = 2.0
    try:
        torch.testing.assert_close(cf(x), f(x))
        assert _recompiles() == 2
    finally:
        OFFSET = 1.0


OFFSET = 1.0


def test_identity_held_weakly():
    class Thing:
        scale = 2

    def f(x, obj):
        return x * obj.scale

    cf = kiln.compile(f, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3)
    a = Thing()
    torch.testing.assert_close(cf(x, a), f(x, a))
    _guard(cf)

    class Other:
        scale = 2

    torch.testing.assert_close(cf(x, Other()), f(x, Other()))
    assert _recompiles() == 1


def test_keywords_defaults_and_varargs_bind_in_c():
    def f(x, k=2, *rest, scale=3, **extra):
        return x * k * scale + len(rest) + len(extra)

    cf = kiln.compile(f, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3)
    calls = [((x,), {}), ((x, 2), {}), ((x,), {"k": 2}), ((x,), {"scale": 3})]
    for args, kwargs in calls:
        torch.testing.assert_close(cf(*args, **kwargs), f(*args, **kwargs))
    assert _recompiles() == 0
    _guard(cf)
    more = [((x, 2, 7), {}), ((x,), {"scale": 4}), ((x,), {"other": 1}), ((x, 5), {})]
    for args, kwargs in more:
        torch.testing.assert_close(cf(*args, **kwargs), f(*args, **kwargs))
    with pytest.raises(TypeError):
        cf(x, k=1, **{"x": x})  # (given twice: the Python guard's TypeError)


def test_extension_off_keeps_python_guards(monkeypatch):
    monkeypatch.setattr(config, "cpp_guards", False)
    cf = kiln.compile(lambda x, c: x + c, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, 2), x + 2)
    guard = cf._kiln_cache.entry_info[0].guard
    assert type(guard).__name__ == "function" and not hasattr(guard, "program_text")
    torch.testing.assert_close(cf(x, 3), x + 3)
    assert _recompiles() == 1


def test_logs_print_the_program():
    logs.set_logs("guards")
    with LogCapture("guards") as cap:
        kiln.compile(lambda x: x + 1, backend=CountingBackend())(torch.randn(2))
    text = "\n".join(cap.messages["guards"])
    assert "def guard(x)" in text and "program of" in text and "JUMP_" in text, text


# --- the compiler and the interpreter on guard functions written as build_guard_fn writes them


def _python_guard(params, body, **values):
    """A guard function as build_guard_fn makes it: a closure over `values`."""
    lines = "".join(f"        {line}\n" for line in body)
    source = (
        f"def guard({params}):\n    try:\n{lines}"
        "    except Exception:  # a failing access is a failing guard\n"
        "        return False\n    return True\n"
    )
    names = ", ".join(values)
    maker = f"def ___make({names}):\n" + "".join(f"    {ln}\n" for ln in source.splitlines())
    ns = {"__builtins__": builtins}
    exec(maker + "    return guard\n", ns)
    guard = ns["___make"](*values.values())
    guard.source = source
    return guard


def _both(guard, calls):
    """The program and the Python function answer every call alike (results or exceptions)."""
    program = guard_program.compile_guard(guard, check=False)
    for args, kwargs in calls:
        outcomes = []
        for fn in (program, guard):
            try:
                outcomes.append(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001  (compared by type)
                outcomes.append(type(e))
        assert outcomes[0] == outcomes[1], (args, kwargs, outcomes)
    return program


class _Raises:
    def __init__(self, exc):
        self.exc = exc

    @property
    def value(self):
        raise self.exc


def test_reads_that_raise_fail_the_guard_and_others_propagate():
    guard = _python_guard(
        "obj",
        ["___s0 = obj.value", "if not (___s0 == 1): return False"],
    )
    program = _both(
        guard,
        [
            ((_Raises(ValueError("x")),), {}),
            ((_Raises(AttributeError("x")),), {}),
            ((_Raises(KeyboardInterrupt()),), {}),
            ((object(),), {}),
        ],
    )
    assert program(_Raises(ValueError())) is False
    with pytest.raises(KeyboardInterrupt):
        program(_Raises(KeyboardInterrupt()))


def test_short_circuit_keeps_reads_after_a_failed_test_from_running():
    seen = []

    class Probe:
        @property
        def value(self):
            seen.append(1)
            return 1

    guard = _python_guard(
        "a, b",
        ["if not (___type(a) is ___int and b.value == 1): return False"],
        ___type=type,
        ___int=int,
    )
    program = guard_program.compile_guard(guard, check=False)
    assert program("no", Probe()) is False and seen == []
    assert program(3, Probe()) is True and seen == [1]


@pytest.mark.parametrize(
    "test, values",
    [
        ("a < b <= c", [(1, 2, 2), (1, 2, 1), (3, 2, 5), (1, "x", 2)]),
        ("not (a or b) or c", [(0, 0, 0), (1, 0, 0), (0, 0, 1), (0, 1, 0)]),
        ("a in b and c not in b", [(1, [1], 2), (1, [1], 1), (1, 3, 2)]),
        ("a * 2 - b == c % 5 // 1", [(3, 1, 5), (3, 1, 4), ("s", 1, 1)]),
        ("(a > b) is True", [(2, 1, 0), (1, 2, 0), (float("nan"), 1, 0)]),
        ("a is not b is c", [(1, 2, 2), (2, 2, 2), (None, None, 1)]),
        ("[x for x in (a, b)] == [1, c]", [(1, 2, 2), (1, 2, 3)]),
        ("a[1:] == (b, c)", [((0, 1, 2), 1, 2), ((0, 1), 1, 2), (5, 1, 2)]),
        ("-1 == a and abs(b) == c", [(-1, -2, 2), (-1, 2, 3), (1, 1, 1)]),
    ],
    ids=[
        "chain",
        "boolops",
        "contains",
        "arith",
        "value_compare",
        "is_chain",
        "lambda",
        "slice",
        "builtins",
    ],
)
def test_expression_shapes(test, values):
    guard = _python_guard("a, b, c", [f"if not ({test}): return False"])
    _both(guard, [(v, {}) for v in values])


def test_items_of_dict_tuple_list_and_mappings():
    class Mapping:
        def __getitem__(self, k):
            return {"k": 1}[k]

    guard = _python_guard(
        "d",
        ["___s0 = d['k']", "if not (___s0 == 1): return False"],
    )
    _both(guard, [(({"k": 1},), {}), (({"j": 1},), {}), ((Mapping(),), {}), ((3,), {})])
    guard = _python_guard("t", ["___s0 = t[-1]", "if not (___s0 == 1): return False"])
    _both(guard, [(((0, 1),), {}), (([0, 1],), {}), (((),), {}), (([],), {}), (("ab",), {})])


def test_dict_key_lists_compared_as_list_does():
    class Key(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    guard = _python_guard("d", ["if not (___list(d) == ['a', 1]): return False"], ___list=list)
    assert "JUMP_KEYS" in guard_program.compile_guard(guard, check=False).program_text
    calls = [{"a": 0, 1: 0}, {1: 0, "a": 0}, {"a": 0}, {Key("zz"): 0, 1: 0}, {"a": 0, 1.0: 0}]
    _both(guard, [((d,), {}) for d in calls] + [(([("a"), 1],), {})])


def test_weakref_identity_and_dead_referent():
    class C:
        pass

    obj = C()
    guard = _python_guard(
        "x", ["if not (x is ___A() is not None): return False"], ___A=weakref.ref(obj)
    )
    program = _both(guard, [((obj,), {}), ((C(),), {}), ((None,), {})])
    del obj
    assert program(None) is False


def test_dynamic_closure_reads_the_function_first():
    def make(v):
        return lambda: v

    guard = _python_guard(
        "___fn, x",
        [
            "___closure = ___fn.__closure__",
            "___s0 = ___closure[0].cell_contents",
            "if not (___s0 == x): return False",
        ],
    )
    _both(guard, [((make(1), 1), {}), ((make(1), 2), {}), ((lambda: 0, 0), {})])


def test_plain_attr_skips_a_python_getattribute():
    class Config:
        def __getattribute__(self, name):
            raise RuntimeError("not called by a plain read")

    c = Config()
    object.__setattr__(c, "n", 1)
    guard = _python_guard(
        "c",
        ["___s0 = ___plain_attr(c, '__dict__')", "if not (___s0['n'] == 1): return False"],
        ___plain_attr=object.__getattribute__,
    )
    program = _both(guard, [((c,), {}), ((object(),), {})])
    assert "PLAIN_ATTR" in program.program_text and program(c) is True


def test_builtins_read_at_call_time(monkeypatch):
    guard = _python_guard("x", ["if not (oct(x) == '0o2'): return False"])
    program = _both(guard, [((2,), {}), ((1,), {}), (("s",), {})])
    monkeypatch.setattr(builtins, "oct", lambda x: "0o2")
    assert program(1) is guard(1) is True


def test_differential_mode_catches_a_broken_instruction(monkeypatch):
    guard = _python_guard("a, b", ["if not (a is b): return False"])
    monkeypatch.setitem(
        guard_program._CMP, guard_program.ast.Is, guard_program._CMP[guard_program.ast.IsNot]
    )
    broken = guard_program.compile_guard(guard, check=False)
    assert broken(1, 1) is False  # (wrong, silently)
    checked = guard_program.compile_guard(guard, check=True)
    with pytest.raises(AssertionError, match="disagrees with the Python guard"):
        checked(1, 1)


def test_program_is_weakly_referenced_and_collected_with_its_cycle():
    """A guard's function holds its globals, which may hold the compiled function (a cycle
    through the program): the program takes weak references and the cycle collector frees it."""
    import gc

    ns = {}
    exec("def f(x):\n    return x + 1\n", ns)
    cf = kiln.compile(ns["f"], backend=CountingBackend())
    ns["cf"] = cf
    torch.testing.assert_close(cf(torch.ones(2)), torch.ones(2) + 1)
    ref = weakref.ref(_guard(cf))
    del cf, ns
    kiln.reset()
    gc.collect()
    assert ref() is None
