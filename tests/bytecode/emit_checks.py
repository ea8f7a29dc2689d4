"""Checks of kiln.bytecode.emit / analysis / encode edge cases; need neither torch nor pytest.

Each check builds a function body from emit sequences (after a template's RESUME prologue) and
runs it, so the builders are exercised on every Python the runner finds.
"""

import types

from roundtrip_checks import bootstrap, with_code

bootstrap()

import kiln.bytecode as B  # noqa: E402
from kiln.bytecode import analysis as A  # noqa: E402
from kiln.bytecode import emit  # noqa: E402


def build(template, body, **replace):
    """A function like `template` whose body (after its RESUME) is `body`."""
    insts = B.decode(template.__code__)
    keep = insts[: B.first_resume(insts) + 1]
    return with_code(template, B.encode(keep + body, like=template.__code__, **replace))


def raises(exc, fn, *args):
    try:
        fn(*args)
    except exc:
        return
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


def check_closure_and_calls():
    def template(x):
        y = x * 2

        def inner(z):
            return y + z

        return inner

    inner_code = next(c for c in template.__code__.co_consts if isinstance(c, types.CodeType))
    insts = B.decode(template.__code__)
    store_y = [i for i in insts if i.opname == "STORE_DEREF"][:1]
    body = (
        emit.load_fast("x")
        + emit.load_const(2)
        + emit.binary_op("*")
        + store_y
        + emit.make_closure(inner_code, ["y"])
        + emit.store_fast("f")
        + emit.with_null(emit.load_fast("f"))
        + emit.load_fast("x")
        + emit.call(1)
        + emit.load_global("len", push_null=True)
        + emit.load_fast("x")
        + emit.build_list(1)
        + emit.call(1)
        + emit.binary_op("+")
        + emit.load_const(1)
        + emit.load_const(2)
        + emit.build_tuple(2)
        + emit.unpack_sequence(2)
        + emit.swap(2)
        + emit.binary_op("-")  # unpack leaves 1 on top; after the swap: 1 - 2
        + emit.binary_op("+")
        + emit.return_value()
    )
    keep = insts[: B.first_resume(insts) + 1]
    code = B.encode(keep + body, like=template.__code__, co_varnames=("x", "f"))
    assert with_code(template, code)(5) == (10 + 5) + 1 + (1 - 2)


def check_methods_kwargs_star():
    def template(s, k):
        return s

    body = (
        emit.load_fast("s")
        + emit.load_method("split")
        + emit.load_const(",")
        + emit.call(1)
        + emit.store_fast("parts")
        + emit.with_null(emit.load_const(dict))
        + emit.load_fast("k")
        + emit.load_fast("parts")
        + emit.call_kw(2, ["a", "b"])
        + emit.store_fast("d")
        + emit.with_null(emit.load_const(sorted))
        + emit.load_fast("parts")
        + emit.build_tuple(1)
        + emit.load_const("reverse")
        + emit.load_const(True)
        + emit.build_map(1)
        + emit.call_function_ex(True)
        + emit.with_null(emit.load_fast("d") + emit.load_attr("__len__"))
        + emit.call(0)
        + emit.build_const_key_map(["sorted", "n"])
        + emit.dup_top()
        + emit.pop_top()
        + emit.return_value()
    )
    fn = build(template, body, co_varnames=("s", "k"))
    assert fn("x,y", 1) == {"sorted": ["y", "x"], "n": 2}
    # a method load on an object whose attribute is a plain function (the NULL path)
    obj = types.SimpleNamespace(f=lambda a: a * 3)
    body = emit.load_const(obj) + emit.load_method("f") + emit.load_fast("s") + emit.call(1)
    body += emit.with_null(emit.load_const(max)) + emit.load_fast("s") + emit.build_tuple(1)
    body += emit.call_function_ex(False) + emit.build_tuple(2) + emit.return_value()
    assert build(template, body)("ab", 0) == ("ababab", "b")


def check_make_function_flags():
    def template(x):
        return x

    def proto(a, b=1, *, c=2) -> int:
        return a + b + c

    body = (
        emit.load_const((10,))  # defaults
        + emit.load_const({"c": 20})  # kwdefaults
        + emit.load_const(("return", "int") if B.PY313_PLUS else ("return", int))  # annotations
        + emit.make_function(proto.__code__, defaults=True, kwdefaults=True, annotations=True)
        + emit.store_fast("g")
        + emit.with_null(emit.load_fast("g"))
        + emit.load_fast("x")
        + emit.call(1)
        + emit.load_fast("g")
        + emit.load_attr("__defaults__")
        + emit.build_tuple(2)
        + emit.return_value()
    )
    fn = build(template, body, co_varnames=("x", "g"))
    assert fn(1) == (31, (10,))


def check_jumps_and_conditions():
    def template(n):
        return n

    ret = emit.load_fast("acc")
    head = emit.load_fast("n")
    body = (
        emit.load_const(0)
        + emit.store_fast("acc")
        + emit.jump_forward(head[0])
        + emit.load_fast("acc")
        + emit.load_fast("n")
        + emit.binary_op("+=")
        + emit.store_fast("acc")
        + emit.load_fast("n")
        + emit.load_const(1)
        + emit.binary_op("-")
        + emit.store_fast("n")
        + head
        + emit.load_const(0)
        + emit.compare_op(">")
        + emit.pop_jump_if_false(ret[0])
    )
    loop_start = body[3]
    body += emit.jump_forward(loop_start)  # written "forward"; encode makes it backward
    body += ret + emit.return_value()
    fn = build(template, body)
    assert [fn(k) for k in range(5)] == [0, 1, 3, 6, 10]

    other = emit.nop()
    none_target = emit.nop()
    body = (
        emit.load_fast("n")
        + emit.pop_jump_if_none(none_target[0])
        + emit.load_fast("n")
        + emit.load_const([1, 2])
        + emit.contains_op()
        + emit.pop_jump_if_true(other[0])
        + emit.return_const("not in")
        + other
        + emit.return_const("in")
        + none_target
        + emit.load_fast("n")
        + emit.load_const(None)
        + emit.is_op(invert=True)
        + emit.return_value()
    )
    fn = build(template, body)
    assert (fn(1), fn(5), fn(None)) == ("in", "not in", False)


def check_stack_ops_and_containers():
    def template(a, b, c, d):
        return a

    body = [*emit.load_fast("a"), *emit.load_fast("b"), *emit.load_fast("c"), *emit.load_fast("d")]
    body += emit.rot_n(4) + emit.build_tuple(4)
    body += emit.load_fast("a") + emit.load_fast("b") + emit.build_set(2)
    body += emit.load_const([5, 6, 7]) + emit.load_const(None) + emit.load_const(None)
    body += emit.load_const(-1) + emit.build_slice(3) + emit.binary_subscr()
    body += emit.build_tuple(3) + emit.return_value()
    assert build(template, body)(1, 2, 3, 4) == ((4, 1, 2, 3), {1, 2}, [7, 6, 5])


def check_lists_tuples_strings():
    def template(xs, flag):
        return xs

    body = (
        emit.build_list(0)
        + emit.load_fast("xs")
        + emit.list_extend(1)
        + emit.load_const(9)
        + emit.list_append(1)
        + emit.list_to_tuple()
        + emit.build_map(0)
        + emit.load_const({"k": 1})
        + emit.dict_update(1)
        + emit.load_fast("flag")
        + emit.unary_not()
        + emit.load_const(3)
        + emit.unary_negative()
        + emit.load_const("n=")
        + emit.load_fast("xs")
        + emit.format_simple()
        + emit.build_string(2)
        + emit.build_tuple(5)
        + emit.return_value()
    )
    fn = build(template, body)
    assert fn([1, 2], 0) == ((1, 2, 9), {"k": 1}, True, -3, "n=[1, 2]")
    assert fn((), "x")[2] is False


def check_attrs_subscr_globals_deref():
    def template(o, k):
        cell = None

        def read():
            return cell

        return read

    insts = B.decode(template.__code__)
    keep = insts[: B.first_resume(insts) + 1]
    body = (
        emit.load_fast("k")
        + emit.load_fast("o")
        + emit.store_attr("x")
        + emit.load_fast("o")
        + emit.delete_attr("x")
        + emit.load_const("v")
        + emit.load_const({})
        + emit.dup_top()
        + emit.store_fast("dct")
        + emit.load_const("key")
        + emit.store_subscr()
        + emit.load_fast("k")
        + emit.store_deref("cell")
        + emit.load_fast("k")
        + emit.store_global("_kiln_emit_check_global")
        + emit.load_deref("cell")
        + emit.load_fast("dct")
        + emit.load_global("_kiln_emit_check_global")
        + emit.build_tuple(3)
        + emit.load_fast("dct")
        + emit.delete_fast("dct")
        + emit.pop_top()
        + emit.return_value()
    )
    code = B.encode(keep + body, like=template.__code__, co_varnames=("o", "k", "dct"))
    o = types.SimpleNamespace()
    assert with_code(template, code)(o, 7) == (7, {"key": "v"}, 7) and not hasattr(o, "x")
    globals().pop("_kiln_emit_check_global")


def check_with_block():
    log = []

    class CM:
        def __init__(self, swallow=False):
            self.swallow = swallow

        def __enter__(self):
            log.append("enter")

        def __exit__(self, *exc):
            log.append(("exit", exc[0] and exc[0].__name__))
            return self.swallow

    def template(cm, x):
        return x

    inner = emit.load_const(1) + emit.load_fast("x") + emit.binary_op("/") + emit.store_fast("y")
    body = (
        emit.load_const(100)  # one item below the context manager: depth=1
        + emit.with_block(emit.load_fast("cm"), inner, depth=1)
        + emit.load_fast("y", check=True)
        + emit.binary_op("+")
        + emit.return_value()
    )
    fn = build(template, body, co_varnames=("cm", "x", "y"))
    assert fn(CM(), 2) == 100.5 and log == ["enter", ("exit", None)]
    log.clear()
    raises(ZeroDivisionError, fn, CM(), 0)
    assert log == ["enter", ("exit", "ZeroDivisionError")]
    log.clear()
    raises(UnboundLocalError, fn, CM(swallow=True), 0)  # swallowed; then y is unbound
    assert log == ["enter", ("exit", "ZeroDivisionError")]


def check_encode_errors():
    def template(x):
        return x

    insts = B.decode(template.__code__)
    for bad in (
        lambda: B.encode(insts, like=template.__code__, co_nonsense=1),
        lambda: B.encode(
            insts[:1] + emit.jump_forward(B.Inst("NOP")) + insts[1:], like=template.__code__
        ),
        lambda: B.encode(
            insts[:1] + emit.pop_top() + insts[1:], like=template.__code__
        ),  # underflow
    ):
        raises(B.BytecodeError, bad)


def check_analysis():
    def f(a, b):
        with open(__file__) as fh:
            c = len(fh.read(1)) + a
        print(c, b)  # never called
        return a

    insts = B.decode(f.__code__)
    states = A.frame_states(insts, ("a", "b"))
    inside = next(n for n, i in enumerate(insts) if i.opname == "STORE_FAST" and i.argval == "c")
    assert states[inside].with_positions == (0,)
    assert "fh" in states[inside].assigned and "c" not in states[inside].assigned
    assert A.livevars(insts, inside) == {"a", "b"}
    call = next(n for n, i in enumerate(insts) if i.opname == "LOAD_GLOBAL" and i.argval == "print")
    assert states[call + 1].null_positions == ((1,) if B.PY313_PLUS else (0,))
    assert A.livevars(insts, call) == {"a", "b", "c"}
    assert A.max_stack_depth(insts) == f.__code__.co_stacksize


def check_huge_int_constant():
    """A constant too big for a C long (a factorial folded while tracing) assembles and loads."""

    def template():
        return None

    big = 3**200
    insts = emit.load_const(big) + emit.load_const(-big) + emit.build_tuple(2) + emit.return_value()
    assert A.max_stack_depth(insts) == 2
    assert build(template, insts)() == (big, -big)


def check_format():
    def f(x):
        try:
            return 1 / x
        except ZeroDivisionError:
            return None

    text = B.format(B.decode(f.__code__), title="f")
    assert text.startswith("f\n") and "ExceptionTable:" in text and "to #" in text
    assert "[try 0]" in text and "RESUME" in text
    assert B.format_code(f.__code__).startswith(f.__code__.co_qualname)


def all_checks():
    return [(name, fn) for name, fn in sorted(globals().items()) if name.startswith("check_")]
