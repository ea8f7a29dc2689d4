"""Guards evaluated in C: the generated guard function compiled to a flat program of instructions
that the `kiln_guard_vm` extension (guard_vm.py) interprets.

Note [Guards: a program evaluated in C]
A cache entry's guard (Note [Guards: one function per entry]) is a generated Python function:
hoisted reads `___sN = <expr>` and conditions `if not (<expr>): return False`, in a `try` whose
`except Exception` fails the guard. hf_llama's is ~1100 such lines (identity checks, module-tree
attribute and dict reads, `__code__`/`__globals__` reads, constants, dict key lists, hook-dict
emptiness, global state calls) and its Python bytecode was most of a cache hit's host cost.
`compile_guard` parses that same source (one meaning, one text) and compiles it to instructions
over slots: [constants (the closure values, literals) | parameters | named reads (`___sN`) |
scratch], run by a C loop:
- reads: `getattr` (generic), `object.__getattribute__` (`___plain_attr`), a cell's contents,
  `a[k]` (exact dict, tuple and list inline, else the generic item read), `type(x)`, calls of
  constants or read values (vectorcall: the tensor matchers, weakrefs, global-state queries);
- tests that jump to the failure: `is`/`is not`, rich comparisons (never with the identity
  shortcut: `x != x` is the NaN check), `in`/`not in`, truth, `type(x) is T`, `len(x) == n`, and
  `list(d) == [keys]` compared in place for an exact dict with str/int keys;
- anything else (a rare expression shape) is a small Python lambda called for that one value.
Short-circuit order is the source's: `and`/`or`, comparison chains and the statement order are
compiled to jumps, so no read runs after a failed test that guards it. Any exception that is an
Exception fails the guard (returns False); others propagate, as from the Python function.

Arguments are bound in C as the Python guard binds them (positional, keywords, defaults and
keyword defaults, `*args`, `**kwargs`); a call the C binder does not take (too many arguments,
an unknown keyword, a missing one) calls the Python guard, which binds or raises its TypeError.
The Program object carries the Python function's attributes (`source`, `parts`,
`closure_values`, `weak_values`, ...), `python` (the function) and `program_text` (the readable
listing): the recompile reason and `first_failure` stay the Python expressions.

With `config.cpp_guards` off, or where the extension cannot be built, or while it is being built
at the first guard (a few seconds; later processes load it from the cache folder), guards stay
Python functions, with the same meaning. `config.guard_program_check` (KILN_GUARD_PROGRAM_CHECK)
runs both on every call and raises AssertionError when they disagree (so every read runs twice:
a debugging mode, for test suites).

Measured on this CPU (the guard alone, C program and Python function interleaved in one
process, best of 150 rounds on a loaded machine): mlp 3.6 -> 2.6 us, nanogpt 12.6 -> 8.7 us,
hf_llama 58.0 -> 37.5 us (~1700 instructions). The gain is in calls (weakrefs, tensor matchers,
global-state queries: no Python frame), `type(x) is T` in one step and no bytecode dispatch;
what is left is mostly generic attribute reads of module trees (nn.Module's `__getattr__` hook
makes each read two extra type lookups, in both forms), dict reads and the tensor matchers.
"""

import ast
import builtins
import struct

from kiln import config, logs
from kiln.frontend import guard_vm

_CMP = {
    ast.Lt: 0,
    ast.LtE: 1,
    ast.Eq: 2,
    ast.NotEq: 3,
    ast.Gt: 4,
    ast.GtE: 5,
    ast.Is: 6,
    ast.IsNot: 7,
    ast.In: 8,
    ast.NotIn: 9,
}
_BINARY = {ast.Add: 0, ast.Sub: 1, ast.Mult: 2, ast.FloorDiv: 3, ast.Mod: 4}
_OP = {name: i for i, name in enumerate(guard_vm.OPS)}
_MAX_CALL_ARGS = 16
_FAIL = -1  # the jump target that returns False
_PLAIN_ATTR = object.__getattribute__


class NotCompiled(Exception):
    """The guard's source has a shape the compiler does not take: it stays a Python function."""


class _Label:
    __slots__ = ("pos",)

    def __init__(self):
        self.pos = None


class _Compiler:
    """One guard function's source to instructions (Note [Guards: a program evaluated in C])."""

    def __init__(self, guard):
        code = guard.__code__
        self.nparams = (
            code.co_argcount
            + code.co_kwonlyargcount
            + bool(code.co_flags & 0x04)  # CO_VARARGS
            + bool(code.co_flags & 0x08)  # CO_VARKEYWORDS
        )
        self.params = {n: i for i, n in enumerate(code.co_varnames[: self.nparams])}
        cells = guard.__closure__ or ()
        self.free = {n: c.cell_contents for n, c in zip(code.co_freevars, cells)}
        self.consts = []
        self._const_index = {}
        self.assigned = set()
        self.named = {}  # `___sN` (and a dynamic closure's `___closure`) -> index
        self.scratch = 0
        self.max_scratch = 0
        self.code = []  # [op, dst, a, b, c, d] with operands ('c'|'p'|'n'|'t', i) and labels
        self.extra = []  # CALL arguments (operands)
        self.lambdas = 0

    # --- operands

    def const(self, value, key=None):
        key = key if key is not None else ("id", id(value))
        i = self._const_index.get(key)
        if i is None:
            i = self._const_index[key] = len(self.consts)
            self.consts.append(value)
        return ("c", i)

    def literal(self, value):
        """A constant of the source (by type and repr: 0.0 and -0.0 are two)."""
        return self.const(value, ("lit", type(value), repr(value)))

    def temp(self):
        t = ("t", self.scratch)
        self.scratch += 1
        self.max_scratch = max(self.max_scratch, self.scratch)
        return t

    def emit(self, op, dst=0, a=0, b=0, c=0, d=0):
        self.code.append([_OP[op], dst, a, b, c, d])

    def place(self, label):
        label.pos = len(self.code)

    # --- statements

    def compile(self, source):
        tree = ast.parse(source)
        fn = tree.body[0]
        if (
            len(tree.body) != 1
            or not isinstance(fn, ast.FunctionDef)
            or len(fn.body) != 2
            or not isinstance(fn.body[0], ast.Try)
            or ast.unparse(fn.body[1]) != "return True"
        ):
            raise NotCompiled("not a generated guard function")
        body = fn.body[0]
        if (
            len(body.handlers) != 1
            or ast.unparse(body.handlers[0]) != "except Exception:\n    return False"
            or body.orelse
            or body.finalbody
        ):
            raise NotCompiled("not the guard's try/except")
        for stmt in body.body:
            for target in getattr(stmt, "targets", ()):
                if isinstance(target, ast.Name):
                    self.named.setdefault(target.id, len(self.named))
        for stmt in body.body:
            self.scratch = 0
            self.statement(stmt)

    def statement(self, stmt):
        if isinstance(stmt, ast.Pass):
            return
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                dst = ("n", self.named[target.id])
                value = self.value(stmt.value, dst)
                if value != dst:
                    self.emit("COPY", dst, value)
                self.assigned.add(target.id)
                return
        if (
            isinstance(stmt, ast.If)
            and not stmt.orelse
            and len(stmt.body) == 1
            and ast.unparse(stmt.body[0]) == "return False"
            and isinstance(stmt.test, ast.UnaryOp)
            and isinstance(stmt.test.op, ast.Not)
        ):
            self.jump(stmt.test.operand, _FAIL, False)
            return
        raise NotCompiled(f"statement {ast.unparse(stmt)[:80]!r}")

    # --- tests: jump to `target` when bool(node) == cond, else fall through

    def jump(self, node, target, cond):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.jump(node.operand, target, not cond)
        if isinstance(node, ast.BoolOp):
            # `and` jumps on False at once, `or` on True; the other outcome needs every operand
            early = isinstance(node.op, ast.Or)
            if cond == early:
                for v in node.values:
                    self.jump(v, target, cond)
                return None
            skip = _Label()
            for v in node.values[:-1]:
                self.jump(v, skip, early)
            self.jump(node.values[-1], target, cond)
            self.place(skip)
            return None
        if isinstance(node, ast.Compare):
            return self.compare_jump(node, target, cond)
        self.emit("JUMP_TRUTH", 0, self.value(node), 0, target, int(cond))
        return None

    def compare_jump(self, node, target, cond):
        """A comparison chain: its links tested in order, the chain False at the first false
        link (the operands after it are not evaluated)."""
        ops = node.ops
        if len(ops) == 1 and self._fused(node.left, ops[0], node.comparators[0], target, cond):
            return
        skip = _Label() if cond and len(ops) > 1 else None
        left = self.value(node.left, allow_list=True)
        for i, (op, right_node) in enumerate(zip(ops, node.comparators)):
            last = i == len(ops) - 1
            where, when = (target, cond) if (last or not cond) else (skip, False)
            right = self.value(right_node, allow_list=True)
            self.emit("JUMP_CMP", _CMP[type(op)], left, right, where, int(when))
            left = right
        if skip is not None:
            self.place(skip)

    def _fused(self, left, op, right, target, cond):
        """`type(x) is T`, `len(x) == n`, `list(d) == [keys]` as one instruction each."""
        if not (isinstance(left, ast.Call) and len(left.args) == 1 and not left.keywords):
            return False
        fn = self.known(left.func)
        arg = left.args[0]
        if isinstance(arg, ast.Starred):
            return False
        if fn is type and isinstance(op, (ast.Is, ast.IsNot)):
            x = self.value(arg)
            t = self.value(right)
            self.emit("JUMP_TYPE", 0, x, t, target, int(cond == isinstance(op, ast.Is)))
            return True
        if (
            fn is len
            and isinstance(op, ast.Eq)
            and isinstance(right, ast.Constant)
            and type(right.value) is int
            and 0 <= right.value < 2**31
        ):
            self.emit("JUMP_LEN", right.value, self.value(arg), 0, target, int(cond))
            return True
        if fn is list and isinstance(op, ast.Eq) and self._constant_list(right) is not None:
            want = self.const(self._constant_list(right))
            callee = self.value(left.func)
            self.emit("JUMP_KEYS", callee, self.value(arg), want, target, int(cond))
            return True
        return False

    def _constant_list(self, node):
        if isinstance(node, ast.List) and all(isinstance(e, ast.Constant) for e in node.elts):
            return [e.value for e in node.elts]
        return None

    def known(self, node):
        """The object a name of the source stands for when it is a closure constant, else None."""
        if isinstance(node, ast.Name) and node.id not in self.named and node.id not in self.params:
            return self.free.get(node.id)
        return None

    # --- values: the operand holding the node's value (`dst` for the instruction making it)

    def value(self, node, dst=None, allow_list=False):
        if isinstance(node, ast.Constant):
            return self.literal(node.value)
        if isinstance(node, ast.Name):
            return self.name(node.id, dst)
        if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts):
            return self.literal(tuple(e.value for e in node.elts))
        if allow_list and self._constant_list(node) is not None:
            # (only ever compared: one list built once is the list the source builds per call)
            return self.const(self._constant_list(node))
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) in (int, float)
        ):
            return self.literal(-node.operand.value)
        dst = dst or self.temp()
        if isinstance(node, ast.Attribute):
            obj = self.value(node.value)
            op = "CELL" if node.attr == "cell_contents" else "ATTR"
            self.emit(op, dst, obj, self.literal(node.attr))
            return dst
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            obj = self.value(node.value)
            self.emit("ITEM", dst, obj, self.value(node.slice))
            return dst
        if (
            isinstance(node, ast.Call)
            and not node.keywords
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and len(node.args) <= _MAX_CALL_ARGS
        ):
            fn = self.known(node.func)
            if fn is type and len(node.args) == 1:
                self.emit("TYPE", dst, self.value(node.args[0]))
                return dst
            if fn is _PLAIN_ATTR and len(node.args) == 2:
                obj, name = (self.value(a) for a in node.args)
                self.emit("PLAIN_ATTR", dst, obj, name)
                return dst
            callee = self.value(node.func)
            self.call(dst, callee, [self.value(a) for a in node.args])
            return dst
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left = self.value(node.left)
            right = self.value(node.comparators[0], allow_list=True)
            self.emit("COMPARE", dst, left, right, _CMP[type(node.ops[0])])
            return dst
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self.value(node.left), self.value(node.right)
            self.emit("BINARY", dst, left, right, _BINARY[type(node.op)])
            return dst
        return self.python_value(node, dst)

    def name(self, name, dst):
        if name in self.named:
            if name not in self.assigned:  # (the Python guard's UnboundLocalError: not made)
                raise NotCompiled(f"{name} read before it is assigned")
            return ("n", self.named[name])
        if name in self.params:
            return ("p", self.params[name])
        if name in self.free:
            return self.const(self.free[name])
        # a builtin, read at each call as the Python guard reads it (from the builtins module)
        dst = dst or self.temp()
        self.emit("ITEM", dst, self.const(builtins.__dict__), self.literal(name))
        return dst

    def call(self, dst, callee, args):
        self.emit("CALL", dst, callee, 0, len(self.extra), len(args))
        self.extra.extend(args)

    def python_value(self, node, dst):
        """A value the instructions do not make: a Python lambda over the names it reads."""
        names = sorted(
            {
                n.id
                for n in ast.walk(node)
                if isinstance(n, ast.Name) and (n.id in self.named or n.id in self.params)
            }
            | {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in self.free}
        )
        text = f"lambda {', '.join(names)}: {ast.unparse(node)}"
        fn = eval(compile(text, "<kiln guard value>", "eval"), {"__builtins__": builtins})
        fn.text = text
        self.lambdas += 1
        if len(names) > _MAX_CALL_ARGS:
            raise NotCompiled(f"an expression of {len(names)} names")
        self.call(dst, self.const(fn), [self.name(n, None) for n in names])
        return dst

    # --- the program

    def layout(self):
        """Final slot numbers: [constants | parameters | named | scratch]."""
        base = {
            "c": 0,
            "p": len(self.consts),
            "n": len(self.consts) + self.nparams,
            "t": len(self.consts) + self.nparams + len(self.named),
        }
        nslots = base["t"] + self.max_scratch
        return base, nslots

    def assemble(self):
        base, nslots = self.layout()

        def slot(x):
            return base[x[0]] + x[1] if isinstance(x, tuple) else x

        def target(x):
            if isinstance(x, _Label):
                return x.pos
            return x

        jumps = {_OP[n] for n in guard_vm.OPS if n.startswith("JUMP")}
        words = []
        for op, dst, a, b, c, d in self.code:
            c = target(c) if op in jumps else c
            words.extend((op, slot(dst), slot(a), slot(b), c, d))
        code = struct.pack(f"={len(words)}i", *words)
        extra = struct.pack(f"={len(self.extra)}i", *(slot(x) for x in self.extra))
        return code, extra, nslots


def compile_guard(guard, check=None):
    """The C program of a generated guard function, with its attributes; None where the
    extension is not loaded (Note [Guards: a program evaluated in C])."""
    vm = guard_vm.module()
    if vm is None:
        return None
    comp = _Compiler(guard)
    comp.compile(guard.source)
    code, extra, nslots = comp.assemble()
    co = guard.__code__
    layout = (
        nslots,
        co.co_argcount,
        co.co_posonlyargcount,
        co.co_kwonlyargcount,
        int(bool(co.co_flags & 0x04)),
        int(bool(co.co_flags & 0x08)),
        int(bool(config.guard_program_check if check is None else check)),
    )
    names = tuple(co.co_varnames[: comp.nparams])
    program = vm.Program(
        guard,
        tuple(comp.consts),
        names,
        guard.__defaults__,
        guard.__kwdefaults__,
        code,
        extra,
        layout,
    )
    program.__dict__.update(guard.__dict__)
    program.python = guard
    program.program_text = program_text(comp)
    program.python_values = comp.lambdas
    return program


def program_guard(guard):
    """`guard` as a C program where it can be; else the Python function itself."""
    try:
        program = compile_guard(guard)
    except (NotCompiled, SyntaxError, ValueError, RecursionError) as e:
        logs.log("guards", "guard of %s stays Python: %s", guard.fn.__qualname__, e)
        logs.counters["guards"]["kept_python"] += 1
        return guard
    if program is None:
        return guard
    logs.counters["guards"]["programs"] += 1
    logs.counters["guards"]["python_values"] += program.python_values
    if logs.enabled("guards"):
        logs.log("guards", "program of %s:\n%s", guard.fn.__qualname__, program.program_text)
    return program


def _operand_text(comp, x, const_names):
    kind, i = x
    if kind == "c":
        v = comp.consts[i]
        if v is builtins.__dict__:
            return "builtins"
        if type(v) is type(_operand_text) and v.__name__ == "<lambda>":
            return f"({v.text})"
        if id(v) in const_names:
            return const_names[id(v)]
        text = repr(v)
        return text if len(text) <= 60 else text[:57] + "..."
    if kind == "p":
        return comp.param_names[i]
    if kind == "n":
        return comp.named_names[i]
    return f"t{i}"


def _jump_test(name, a, b, dst):
    """The condition a jump instruction tests, as text."""
    if name == "JUMP_CMP":
        return f"{a} {guard_vm.COMPARES[dst]} {b}"
    if name == "JUMP_TYPE":
        return f"type({a}) is {b}"
    if name == "JUMP_LEN":
        return f"len({a}) == {dst}"
    if name == "JUMP_KEYS":
        return f"list({a}) == {b}"
    return a


def program_text(comp):
    """The instructions, one a line: `12 ATTR ___s3 = ___s1 . 'fc1'`."""
    cmp_names = guard_vm.COMPARES
    const_names = {id(v): n for n, v in comp.free.items()}
    comp.param_names = {i: n for n, i in comp.params.items()}
    comp.named_names = {i: n for n, i in comp.named.items()}
    lines = []
    labels = {}
    for inst in comp.code:
        if inst[0] >= _OP["JUMP_CMP"] and isinstance(inst[4], _Label):
            labels.setdefault(inst[4].pos, f"L{len(labels)}")

    def where(c):
        if isinstance(c, _Label):
            return labels[c.pos] if c.pos < len(comp.code) else "end (True)"
        return "fail" if c == _FAIL else str(c)

    def t(x):
        return _operand_text(comp, x, const_names)

    for pc, (op, dst, a, b, c, d) in enumerate(comp.code):
        name = guard_vm.OPS[op]
        head = f"{labels[pc] + ':' if pc in labels else '':>4} {pc:4d} {name:10s} "
        if name in ("ATTR", "CELL"):
            body = f"{t(dst)} = {t(a)}.{comp.consts[b[1]]}"
        elif name == "PLAIN_ATTR":
            body = f"{t(dst)} = object.__getattribute__({t(a)}, {t(b)})"
        elif name == "ITEM":
            body = f"{t(dst)} = {t(a)}[{t(b)}]"
        elif name == "CALL":
            args = ", ".join(t(x) for x in comp.extra[c : c + d])
            body = f"{t(dst)} = {t(a)}({args})"
        elif name == "TYPE":
            body = f"{t(dst)} = type({t(a)})"
        elif name in ("COMPARE", "BINARY"):
            sym = cmp_names[c] if name == "COMPARE" else guard_vm.BINARIES[c]
            body = f"{t(dst)} = {t(a)} {sym} {t(b)}"
        elif name == "COPY":
            body = f"{t(dst)} = {t(a)}"
        elif name == "JUMP":
            body = f"goto {where(c)}"
        else:
            test = _jump_test(name, t(a), t(b) if isinstance(b, tuple) else "", dst)
            body = f"if {'' if d else 'not '}({test}): goto {where(c)}"
        lines.append(head + body)
    return "\n".join(lines)
