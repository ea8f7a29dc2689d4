"""Version-correct instruction sequences (lists of Inst) for code generation.

Every builder returns a list, so sequences concatenate: `load_global("f", push_null=True) +
load_fast("x") + call(1)`.

Call protocol (Note [Bytecode: version differences]): a call needs a callable and a NULL-or-self
slot below its arguments. 3.11/3.12 order them `NULL, callable, args...`; 3.13 orders them
`callable, NULL, args...`. Use `with_null(load_callable)` (or `load_global(name, push_null=True)`,
or `load_method(name)` which pushes the method and self/NULL itself) and then `call(n)`,
`call_kw(n, names)` or `call_function_ex(has_kwargs)`.
"""

from __future__ import annotations

import dis

from kiln.bytecode.codec import BytecodeError, decode
from kiln.bytecode.edit import clone
from kiln.bytecode.inst import PY311, PY312_PLUS, PY313_PLUS, Inst, make_inst

_BINARY_OPS = {symbol: n for n, (_, symbol) in enumerate(dis._nb_ops)}  # "+" -> 0, "+=" -> 13


def inst(opname, arg=None, argval=None, *, target=None) -> list[Inst]:
    """Any single instruction (int-arg opcodes: give arg; argval defaults to it)."""
    if argval is None and arg is not None:
        argval = arg
    return [make_inst(opname, arg, argval, target=target)]


# ---- constants, locals, cells, globals, attributes ----


def load_const(value):
    return [make_inst("LOAD_CONST", None, value, argrepr=repr(value))]


def load_fast(name, *, check=False):
    """Load a local; check=True raises UnboundLocalError on 3.12+ if it may be unbound."""
    return [make_inst("LOAD_FAST_CHECK" if check and PY312_PLUS else "LOAD_FAST", None, name)]


def store_fast(name):
    return [make_inst("STORE_FAST", None, name)]


def delete_fast(name):
    return [make_inst("DELETE_FAST", None, name)]


def load_deref(name):
    return [make_inst("LOAD_DEREF", None, name)]


def store_deref(name):
    return [make_inst("STORE_DEREF", None, name)]


def load_closure(name):
    """Push the cell object of a cell/free variable (3.13: LOAD_FAST of the cell slot)."""
    return [make_inst("LOAD_FAST" if PY313_PLUS else "LOAD_CLOSURE", None, name)]


def load_global(name, push_null=False):
    """Load a global; push_null also pushes the NULL for a following call (before it <3.13)."""
    rep = (f"NULL + {name}" if not PY313_PLUS else f"{name} + NULL") if push_null else name
    return [make_inst("LOAD_GLOBAL", int(push_null), name, argrepr=rep)]


def store_global(name):
    return [make_inst("STORE_GLOBAL", None, name)]


def load_attr(name):
    return [make_inst("LOAD_ATTR", 0 if PY312_PLUS else None, name)]


def store_attr(name):
    return [make_inst("STORE_ATTR", None, name)]


def delete_attr(name):
    return [make_inst("DELETE_ATTR", None, name)]


def load_method(name):
    """obj -> method, self (or NULL, callable / callable, NULL): ready for call(n)."""
    if PY311:
        return [make_inst("LOAD_METHOD", None, name)]
    return [make_inst("LOAD_ATTR", 1, name, argrepr=f"{name} + NULL|self")]


# ---- calls ----


def push_null():
    return [make_inst("PUSH_NULL")]


def with_null(load_callable):
    """A sequence that loads a callable, with the call's NULL slot where this Python wants it."""
    load_callable = list(load_callable)
    return load_callable + push_null() if PY313_PLUS else push_null() + load_callable


def call(nargs):
    """NULL|self + callable (see module doc) + nargs args -> result."""
    out = [make_inst("PRECALL", nargs, nargs)] if PY311 else []
    return out + [make_inst("CALL", nargs, nargs)]


def call_kw(nargs, names):
    """Like call(), the last len(names) of the nargs arguments are passed by those keywords."""
    names = tuple(names)
    if PY313_PLUS:
        return load_const(names) + [make_inst("CALL_KW", nargs, nargs)]
    kw = [make_inst("KW_NAMES", None, names, argrepr=repr(names))]
    return kw + call(nargs)


def call_function_ex(has_kwargs):
    """NULL slot + callable + args tuple (+ kwargs dict) -> result."""
    return [make_inst("CALL_FUNCTION_EX", int(has_kwargs), int(has_kwargs))]


def call_function(load_callable, load_args):
    """Call a callable with positional args; each element of load_args is one arg's sequence."""
    out = with_null(load_callable)
    for a in load_args:
        out += list(a)
    return out + call(len(load_args))


# ---- functions ----

MAKE_FUNCTION_FLAGS = {"defaults": 1, "kwdefaults": 2, "annotations": 4, "closure": 8}


def make_function(code, *, defaults=False, kwdefaults=False, annotations=False, closure=False):
    """Build a function from a code constant; the flagged attributes are already on the stack
    in the order defaults, kwdefaults, annotations, closure (closure: a tuple of cells)."""
    given = {"defaults": defaults, "kwdefaults": kwdefaults, "annotations": annotations}
    given["closure"] = closure
    flags = sum(MAKE_FUNCTION_FLAGS[k] for k, v in given.items() if v)
    out = load_const(code)
    if not PY313_PLUS:
        return out + [make_inst("MAKE_FUNCTION", flags, flags)]
    out.append(make_inst("MAKE_FUNCTION"))
    for bit in (8, 4, 2, 1):  # the top of the stack is applied first
        if flags & bit:
            out.append(make_inst("SET_FUNCTION_ATTRIBUTE", bit, bit))
    return out


def make_closure(code, cell_names):
    """A function of `code` whose closure holds this frame's cells named cell_names (in order of
    code.co_freevars); without cell names, a plain function."""
    cell_names = list(cell_names)
    if not cell_names:
        return make_function(code)
    out = []
    for name in cell_names:
        out += load_closure(name)
    return out + build_tuple(len(cell_names)) + make_function(code, closure=True)


# ---- containers and stack ----


def build_tuple(n):
    return [make_inst("BUILD_TUPLE", n, n)]


def build_list(n):
    return [make_inst("BUILD_LIST", n, n)]


def build_map(n):
    return [make_inst("BUILD_MAP", n, n)]


def build_set(n):
    return [make_inst("BUILD_SET", n, n)]


def build_slice(n):
    return [make_inst("BUILD_SLICE", n, n)]


def build_const_key_map(keys):
    """n values on the stack -> dict(zip(keys, values))."""
    keys = tuple(keys)
    return load_const(keys) + [make_inst("BUILD_CONST_KEY_MAP", len(keys), len(keys))]


def list_extend(i=1):
    """list at stack[-1 - i] .extend(TOS)."""
    return [make_inst("LIST_EXTEND", i, i)]


def list_append(i=1):
    return [make_inst("LIST_APPEND", i, i)]


def dict_update(i=1):
    return [make_inst("DICT_UPDATE", i, i)]


def list_to_tuple():
    """TOS list -> tuple (3.12+: CALL_INTRINSIC_1 INTRINSIC_LIST_TO_TUPLE)."""
    if PY312_PLUS:
        return [make_inst("CALL_INTRINSIC_1", 6, 6, argrepr="INTRINSIC_LIST_TO_TUPLE")]
    return [make_inst("LIST_TO_TUPLE")]


def unary_not():
    """not TOS (3.13: UNARY_NOT needs an exact bool, so TO_BOOL first)."""
    return ([make_inst("TO_BOOL")] if PY313_PLUS else []) + [make_inst("UNARY_NOT")]


def unary_negative():
    return [make_inst("UNARY_NEGATIVE")]


def build_string(n):
    return [make_inst("BUILD_STRING", n, n)]


def format_simple():
    """format(TOS) with no spec, as an f-string's {x} does."""
    if PY313_PLUS:
        return [make_inst("FORMAT_SIMPLE")]
    return [make_inst("FORMAT_VALUE", 0, 0)]


def unpack_sequence(n):
    return [make_inst("UNPACK_SEQUENCE", n, n)]


def pop_top():
    return [make_inst("POP_TOP")]


def swap(i):
    return [make_inst("SWAP", i, i)]


def copy(i):
    return [make_inst("COPY", i, i)]


def dup_top():
    return copy(1)


def rot_n(n):
    """Move the top of the stack down to position n (the old ROT_N), via SWAPs."""
    out = []
    for i in range(n, 1, -1):
        out += swap(i)
    return out


def binary_op(symbol):
    """BINARY_OP by operator symbol: "+", "-", "*", "@", "//", "+=" ..."""
    n = _BINARY_OPS[symbol]
    return [make_inst("BINARY_OP", n, n, argrepr=symbol)]


def compare_op(op):
    """COMPARE_OP by operator string ("<", "==", ...); the result is a plain object."""
    idx = dis.cmp_op.index(op)
    arg = idx << 5 if PY313_PLUS else idx << 4 if PY312_PLUS else idx
    return [make_inst("COMPARE_OP", arg, op, argrepr=op)]


def is_op(invert=False):
    return [make_inst("IS_OP", int(invert), int(invert))]


def contains_op(invert=False):
    return [make_inst("CONTAINS_OP", int(invert), int(invert))]


def binary_subscr():
    return [make_inst("BINARY_SUBSCR")]


def store_subscr():
    return [make_inst("STORE_SUBSCR")]


def delete_subscr():
    return [make_inst("DELETE_SUBSCR")]


def get_iter():
    return [make_inst("GET_ITER")]


def nop():
    return [make_inst("NOP")]


# ---- control flow ----


def jump_forward(target):
    """Unconditional jump; encode() picks forward/backward from the final positions."""
    return [make_inst("JUMP_FORWARD", target=target)]


jump_absolute = jump_forward
jump = jump_forward


def _cond(cond, target, to_bool):
    name = f"POP_JUMP_FORWARD_IF_{cond}" if PY311 else f"POP_JUMP_IF_{cond}"
    pre = [make_inst("TO_BOOL")] if to_bool and PY313_PLUS and cond in ("TRUE", "FALSE") else []
    return pre + [make_inst(name, target=target)]


def pop_jump_if_false(target, *, to_bool=True):
    """Pop and jump if false (3.13: TO_BOOL first unless to_bool=False, the value a bool)."""
    return _cond("FALSE", target, to_bool)


def pop_jump_if_true(target, *, to_bool=True):
    return _cond("TRUE", target, to_bool)


def pop_jump_if_none(target):
    return _cond("NONE", target, False)


def pop_jump_if_not_none(target):
    return _cond("NOT_NONE", target, False)


def return_value():
    return [make_inst("RETURN_VALUE")]


def return_const(value):
    if PY312_PLUS:
        return [make_inst("RETURN_CONST", None, value, argrepr=repr(value))]
    return load_const(value) + return_value()


def return_none():
    return return_const(None)


def raise_varargs(n):
    return [make_inst("RAISE_VARARGS", n, n)]


def resume(where=0):
    """The RESUME every code object starts with (0: function start)."""
    return [make_inst("RESUME", where, where)]


# ---- blocks ----


def _kiln_with_template(ctx):
    with ctx:
        _kiln_with_body()  # noqa: F821 - never called; only its bytecode is used
    _kiln_with_after()  # noqa: F821


_template_cache = {}


def with_block(load_ctx, body, depth):
    """`with <ctx>: <body>` as instructions, cut from the compiler's own output for this Python.

    load_ctx pushes the context manager; body must leave the stack as it found it and must not
    jump out; depth is the number of stack items below the context manager (exception-table
    depths are relative to the whole stack). Body instructions without an exception entry get
    the with's entry, so an exception in the body calls __exit__ with it (and is re-raised
    unless __exit__ returns true). The sequence ends with a NOP that normal exits jump to.
    """
    t = _template_cache.get("with")
    if t is None:
        t = _template_cache["with"] = decode(_kiln_with_template.__code__)
    t = clone(t)
    i_ctx = next(n for n, i in enumerate(t) if i.opname == "LOAD_FAST" and i.argval == "ctx")
    i_body = next(n for n, i in enumerate(t) if i.argval == "_kiln_with_body")
    i_body_end = next(n for n in range(i_body, len(t)) if t[n].opname == "POP_TOP")
    end = make_inst("NOP")
    entries = {id(i.exn_tab_entry): i.exn_tab_entry for i in t if i.exn_tab_entry is not None}
    for e in entries.values():
        e.depth += depth
    body = list(body)
    for inst in body:
        if inst.exn_tab_entry is None:
            inst.exn_tab_entry = t[i_body].exn_tab_entry
    # Every copy of the code after the with (3.12 duplicates it into the suppress path) becomes
    # a jump to `end`.
    out, replaced, n = list(load_ctx), {}, i_ctx + 1
    while n < len(t):
        inst = t[n]
        inst.lineno = inst.positions = inst.offset = None
        if n == i_body:
            out += body
            n = i_body_end + 1
        elif inst.argval == "_kiln_with_after":
            jump = jump_forward(end)[0]
            replaced[id(inst)] = jump
            out.append(jump)
            n = next(m for m in range(n, len(t)) if t[m].is_return) + 1
        else:
            out.append(inst)
            n += 1
    out.append(end)
    for inst in out:
        if inst.target is not None and id(inst.target) in replaced:
            inst.target = replaced[id(inst.target)]
    inside = {id(i) for i in out}
    for inst in out:
        e = inst.exn_tab_entry
        if (inst.target is not None and id(inst.target) not in inside) or (
            e is not None and id(e.target) not in inside
        ):
            raise BytecodeError(f"with_block: unexpected layout of the compiler's with ({inst!r})")
    return out
