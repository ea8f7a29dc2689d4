"""FX graphs as Python text and back: `graph_to_text(gm)` / `graph_from_text(text)`.

    text = graph_to_text(gm)          # FX's own code for the graph, plus the imports it needs
    graph = graph_from_text(text)     # a torch.fx.Graph with the same nodes, names and targets

Note [FX text: parsing without running]
The text is what `torch.fx` prints as a graph module's `forward` (one statement per node,
`name = target(args)`), so dumps, repro scripts and saved programs read like the code kiln ran.
Reading it back never executes it: the statements are parsed with `ast` and each one becomes a
node. A call on a dotted name resolves the name through an allow-list of roots (`torch`,
`operator`, `math`, `builtins`, `_operator`) or an `# import: name = module:qualname` header line
the writer added for other targets; a call on a node is a `call_method`; `self.x` is a `get_attr`;
`a[i]` and infix operators are `operator` calls. Values are literals, lists/tuples/dicts of them,
`device(...)`, `slice(...)`, `inf`/`nan` and dotted torch constants (`torch.float32`). Anything
else is a FormatError naming the line, so a file cannot make `kiln.load` run code.
"""

import ast
import builtins
import importlib
import math
import operator

import torch
import torch.fx

_ROOTS = {
    "torch": torch,
    "operator": operator,
    "_operator": operator,
    "math": math,
    "builtins": builtins,
}
_CONSTANTS = {
    "inf": math.inf,
    "nan": math.nan,
    "None": None,
    "True": True,
    "False": False,
    "NoneType": type(None),
}
_BUILTIN_CALLS = {"device": torch.device, "slice": slice}
_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.MatMult: operator.matmul,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_UNARY = {ast.USub: operator.neg, ast.Invert: operator.invert, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


class FormatError(ValueError):
    """Text that is not a graph kiln wrote (or was edited into something else)."""


def _qualified(obj):
    """`module:qualname` of an importable object, or None."""
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not mod or not qual or "<" in qual:
        return None
    try:
        found = importlib.import_module(mod)
        for part in qual.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    return f"{mod}:{qual}" if found is obj else None


def graph_to_text(gm):
    """FX's code of gm's graph with `# import:` lines for targets outside the allow-list."""
    code = gm.graph.python_code("self")
    header = []
    for name, obj in sorted(code.globals.items()):
        if name in _ROOTS or name in _CONSTANTS or name in _BUILTIN_CALLS:
            continue
        if name in ("fx_pytree", "pytree"):
            continue
        where = _qualified(obj)
        if where is None:
            raise FormatError(f"graph target {name}={obj!r} is not importable by name")
        header.append(f"# import: {name} = {where}")
    body = code.src.strip("\n")
    return "\n".join(header + [body]) + "\n"


def _import(where):
    mod, _, qual = where.partition(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


class _Reader:
    def __init__(self, text):
        self.text = text
        self.graph = torch.fx.Graph()
        self.env = {}  # variable name -> node
        self.names = dict(_ROOTS)
        for line in text.splitlines():
            if line.startswith("# import:"):
                name, _, where = line[len("# import:") :].partition("=")
                try:
                    self.names[name.strip()] = _import(where.strip())
                except (ImportError, AttributeError) as e:
                    raise FormatError(f"cannot import graph target {where.strip()}: {e}") from e

    def fail(self, node, why):
        line = getattr(node, "lineno", "?")
        raise FormatError(f"line {line} of the graph text: {why}")

    def dotted(self, node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        return [node.id, *reversed(parts)]

    def resolve(self, node, parts):
        if parts[0] not in self.names:
            self.fail(node, f"unknown name {parts[0]!r}")
        obj = self.names[parts[0]]
        for p in parts[1:]:
            try:
                obj = getattr(obj, p)
            except AttributeError:
                self.fail(node, f"{'.'.join(parts)} does not exist in this torch")
        return obj

    def value(self, node):
        """A node argument: a literal, a node, a container, or an allowed constant."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id in _CONSTANTS:
                return _CONSTANTS[node.id]
            self.fail(node, f"unknown name {node.id!r}")
        if isinstance(node, ast.List):
            return [self.value(e) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(self.value(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = self.value(node.operand)
            if isinstance(v, int | float):
                return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Attribute):
            parts = self.dotted(node)
            if parts and parts[0] == "torch":
                v = self.resolve(node, parts)
                if isinstance(v, torch.dtype | torch.layout | torch.memory_format):
                    return v
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            ctor = _BUILTIN_CALLS.get(node.func.id)
            if ctor is not None:
                args = [self.value(a) for a in node.args]
                kwargs = {k.arg: self.value(k.value) for k in node.keywords}
                return ctor(*args, **kwargs)
        self.fail(node, f"unsupported value {ast.unparse(node)!r}")

    def call(self, name, node):
        """(op, target, args, kwargs) of the node a statement's right-hand side makes."""
        if isinstance(node, ast.Call):
            args = tuple(self.value(a) for a in node.args)
            kwargs = {k.arg: self.value(k.value) for k in node.keywords}
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if func.value.id in self.env:  # x.sum(...): a method of a node
                    return "call_method", func.attr, (self.env[func.value.id], *args), kwargs
                if func.value.id == "self":
                    return "call_module", func.attr, args, kwargs
            parts = self.dotted(func)
            if parts is None:
                self.fail(node, f"unsupported call {ast.unparse(func)!r}")
            if len(parts) == 1 and parts[0] in _BUILTIN_CALLS:
                return "call_function", _BUILTIN_CALLS[parts[0]], args, kwargs
            return "call_function", self.resolve(func, parts), args, kwargs
        if isinstance(node, ast.Attribute):
            parts = self.dotted(node)
            if parts and parts[0] == "self":
                return "get_attr", ".".join(parts[1:]), (), {}
        if isinstance(node, ast.Subscript):
            args = (self.value(node.value), self.value(node.slice))
            return "call_function", operator.getitem, args, {}
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            args = (self.value(node.left), self.value(node.right))
            return "call_function", _BINOPS[type(node.op)], args, {}
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return "call_function", _UNARY[type(node.op)], (self.value(node.operand),), {}
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            args = (self.value(node.left), self.value(node.comparators[0]))
            return "call_function", _COMPARE[type(node.ops[0])], args, {}
        self.fail(node, f"unsupported statement for {name}: {ast.unparse(node)!r}")

    def read(self):
        try:
            tree = ast.parse(self.text)
        except SyntaxError as e:
            raise FormatError(f"the graph text does not parse: {e}") from e
        fns = [s for s in tree.body if isinstance(s, ast.FunctionDef)]
        if len(fns) != 1 or fns[0].name != "forward":
            raise FormatError("the graph text must hold exactly one `def forward(self, ...)`")
        fn = fns[0]
        params = [a.arg for a in fn.args.args][1:]
        aliases = {}  # FX prints `l_x_ = L_x_` when a placeholder's name differs from its target
        for stmt in fn.body:
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.Name)
                and stmt.value.id in params
                and stmt.value.id not in aliases
            ):
                aliases[stmt.value.id] = stmt.targets[0].id
        for p in params:
            self.env[p] = self.graph.placeholder(aliases.get(p, p))
            self.env[p].target = p
        returned = False
        for stmt in fn.body:
            if isinstance(stmt, ast.Assign):
                if isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
                    continue  # FX's `x = y = None`: frees values early
                if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
                    self.fail(stmt, "one name per assignment")
                name = stmt.targets[0].id
                if isinstance(stmt.value, ast.Name) and stmt.value.id in self.env:
                    node = self.env[stmt.value.id]  # `l_x_ = L_x_`: the placeholder itself
                else:
                    op, target, args, kwargs = self.call(name, stmt.value)
                    node = self.graph.create_node(op, target, args, kwargs, name=name)
                self.env[name] = node
            elif isinstance(stmt, ast.Return):
                self.graph.output(self.value(stmt.value) if stmt.value is not None else None)
                returned = True
                break
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            else:
                self.fail(stmt, f"unsupported statement {ast.unparse(stmt)!r}")
        if not returned:
            raise FormatError("the graph text has no return statement (truncated?)")
        return self.graph


def graph_from_text(text):
    """The torch.fx.Graph that `graph_to_text` wrote (Note [FX text: parsing without running])."""
    return _Reader(text).read()


def graph_module(text, constants=None):
    """A GraphModule from FX text and its constants."""
    root = torch.nn.Module()
    for target, value in (constants or {}).items():
        obj = root
        *path, last = target.split(".")
        for p in path:
            if not hasattr(obj, p):
                obj.add_module(p, torch.nn.Module())
            obj = getattr(obj, p)
        if isinstance(value, torch.nn.Parameter):
            obj.register_parameter(last, value)
        else:
            obj.register_buffer(last, value)
    return torch.fx.GraphModule(root, graph_from_text(text))
