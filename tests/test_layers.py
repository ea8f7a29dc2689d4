"""The import graph of kiln/ holds its layers: no module-level cycle, no import against the layer
order (docs/ARCHITECTURE.md, "Layers"), in-function imports only where ALLOWED_IN_FUNCTION says why.

Run with `-s` to see the summary line (modules, layers, in-function imports).
"""

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
KILN = ROOT / "kiln"

# The layer order, lowest first: (layer, modules or packages in it, layers it may import).
# A module may import any module of its own layer, and of the layers its row names. The same table
# is in docs/ARCHITECTURE.md.
LAYERS = (
    (
        "base",
        (
            "kiln.config",
            "kiln.exc",
            "kiln.logs",
            "kiln.contracts",
            "kiln.hooks",
            "kiln.faults",
            "kiln.node_hooks",
            "kiln.modes",
            "kiln.toolchain",
        ),
        (),
    ),
    ("symbolic", ("kiln.symbolic",), ("base",)),
    ("bytecode", ("kiln.bytecode",), ("base",)),
    ("autograd", ("kiln.autograd",), ("symbolic", "base")),
    ("backend", ("kiln.backend",), ("autograd", "symbolic", "base")),
    ("registry", ("kiln.registry",), ("base",)),
    ("frontend", ("kiln.frontend",), ("registry", "bytecode", "symbolic", "base")),
    (
        "compiled_autograd",
        ("kiln.compiled_autograd",),
        ("frontend", "registry", "autograd", "symbolic", "base"),
    ),
    ("api", ("kiln.api",), ("compiled_autograd", "frontend", "registry", "base")),
    ("export", ("kiln.export",), ("api", "frontend", "backend", "symbolic", "base")),
    (
        "tools",
        ("kiln.tools", "kiln.__main__"),
        ("export", "api", "frontend", "backend", "autograd", "symbolic", "base"),
    ),
    ("package", ("kiln",), ("tools", "export", "api", "base")),
)
_EVERY_LAYER = tuple(name for name, _, _ in LAYERS)

# In-function imports that stay: `importer -> imported` (module names under kiln.), then the reason
# indented: import time, or a real cycle that moving code down or registering does not break.
ALLOWED_IN_FUNCTION_TABLE = """
api -> compiled_autograd
    import time: compiled autograd (and AOT autograd under it) loads when a backward first runs
    under config.compiled_autograd
autograd.partition -> networkx
    import time: networkx loads only for the min-cut partition
tools.cli -> kiln_bench
    optional: the benchmark harness is not a dependency of kiln; only `kiln bench` needs it
tools.cli -> tools.minifier
    import time: `kiln bench` does not load the minifier (and the backend under it)
tools.hooks -> tools.debug_dir
    import time: `import kiln` registers the hooks; the debug dir report (and the backend under
    its run.py scripts) loads only when KILN_DEBUG_DIR is set
tools.hooks -> tools.minifier
    import time: the minifier (and the backend under it) loads only under KILN_REPRO_AFTER
frontend.variables.stdlib -> frontend.variables.live_iters
    cycle: lazy iterators call operators, whose module chain reaches functions, which imports
    stdlib (chain.from_iterable makes a lazy chain)
frontend.variables.allowed_calls -> frontend.variables.tensor
    cycle: function calls check for allow_in_graph marks; tensors call functions
frontend.variables.allowed_calls -> frontend.variables.torch
    cycle: an allow_in_graph call is recorded as a tensor op (call_tensor_op); torch.py calls
    user functions
frontend.variables.leaf_functions -> frontend.variables.torch
    cycle: a leaf_function call is recorded as a tensor op (call_tensor_op); torch.py calls
    user functions
frontend.variables.tensor_hooks -> frontend.variables.torch
    cycle: torch.py asks tensor_hooks about pending registrations; the check of a hook on an
    intermediate tensor makes its zero gradient with TorchVariable(torch.zeros_like)
frontend.variables.tensor_hooks -> frontend.variables.tensor
    cycle: tensor.py routes register_hook here; a hook called at run time wraps its token
    node as a TensorVariable
frontend.variables.functions -> frontend.translator
    cycle: the translator builds function variables; calling one inlines it with
    InliningTranslator
frontend.blocks -> frontend.variables.classes
    cycle: class bodies (LOAD_BUILD_CLASS) open a block; classes.py runs the body with the
    translator
frontend.variables.constant -> frontend.variables.exceptions
    cycle: folding a constant that raises becomes a traced exception; exception variables hold
    constants
frontend.variables.constant -> frontend.variables.misc
    cycle: methods of constants (str.format ...) are misc's ConstantMethodVariable, which returns
    constants
frontend.variables.dict_keys -> frontend.variables.user_defined
    cycle: user objects (through dict subclasses) use dicts, whose keys may be user objects
frontend.variables.dict_objects -> frontend.variables.builtin
    cycle: dict-subclass __init__ of an iterable builds the dict with builtins' dict(); builtins
    call dict-subclass methods
frontend.variables.exceptions -> frontend.variables.functions
    cycle: user exception classes' methods are inlined; functions raise exception variables
frontend.variables.exceptions -> frontend.variables.lists
    cycle: exception .args is a tuple variable; tuples raise IndexError variables
frontend.variables.functions -> frontend.variables.classes
    cycle: a method of a class made in the frame is rebuilt from that class; classes hold
    function variables of their bodies
frontend.variables.functions -> frontend.variables.autograd_function
    cycle: calling an autograd.Function's apply; its forward/backward are function variables
frontend.variables.lists -> frontend.variables.builtin
    cycle: sorting sequences uses the builtins' sort; builtins build lists
frontend.variables.lists -> frontend.variables.operators
    cycle: comparing sequences compares their items; operators build lists (`a + b`)
frontend.variables.lists -> frontend.variables.sets
    cycle: an iterator over a set checks its size; sets build on BaseListVariable
frontend.variables.lists -> frontend.variables.dicts
    cycle: dict(...) of a list of pairs, list of dict items; dicts build lists
frontend.variables.misc -> frontend.variables.dicts
    cycle: a constant's method returning a dict of constants (str.maketrans) makes a dict
    variable; dicts use misc's small families
frontend.variables.misc -> frontend.variables.lists
    cycle: small families return tuples/lists; lists hold them
frontend.variables.misc -> frontend.variables.tensor
    cycle: tensor methods (TensorMethodVariable) return tensor variables, which make their methods
    here
frontend.variables.sym -> frontend.variables.operators
    cycle: SymInt arithmetic goes through the operators' binary ops; operators make SymInts
frontend.variables.symfloat -> frontend.variables.sym
    cycle: SymFloat <-> SymInt conversions and mixed arithmetic
frontend.variables.torch -> frontend.variables.tensor
    cycle: torch.* calls return tensor variables; tensor methods call torch functions
frontend.variables.torch -> frontend.variables.resize
    cycle: interpolate/pooling size rules return tensors through torch.py's call path
frontend.variables.stdlib -> frontend.variables.functions
    cycle: library helpers modelled as Python (Counter's C counting loop) are inlined; functions
    call stdlib's models
frontend.variables.user_attrs -> frontend.variables.dict_objects
    cycle: object.__setattr__ on a dict-subclass object is its dict method; dict objects read
    user attributes
frontend.variables.user_attrs -> frontend.variables.functions
    cycle: user __getattr__/__setattr__ are inlined; functions read user attributes
frontend.variables.user_attrs -> frontend.variables.user_defined
    cycle: attribute protocol of user objects; user objects delegate to it
frontend.variables.user_defined -> frontend.variables.builtin
    cycle: user classes that subclass builtins; builtins called on user objects
frontend.variables.user_defined -> frontend.variables.classes
    cycle: class objects made while tracing; their instances are user objects
frontend.variables.user_defined -> frontend.variables.autograd_function
    cycle: a user class that is an autograd.Function
frontend.dispatch_modes -> frontend.guards
    cycle: guards call dispatch_modes' stack queries; the torch function state's guard is added
    by dispatch_modes while tracing
frontend.variables.builtin -> frontend.variables.unbacked
    cycle: unbacked's values are operands of builtin calls; obj[a:b] by .item() bounds is unbacked's
frontend.variables.ctx_managers -> frontend.variables.function_modes
    cycle: function_modes builds on tensor/torch variables that import ctx_managers; a `with Mode():`
    in the frame is entered through it
frontend.variables.function_modes -> frontend.variables.builder
    cycle: the builder wraps values through every variable module; the live modes are wrapped by it
frontend.variables.function_modes -> frontend.variables.torch_function
    cycle: torch_function routes subclass calls to function_modes; an operator's torch function is
    asked of it
frontend.variables.sym -> frontend.variables.data_bools
    cycle: data_bools builds on torch variables, which import sym; bool() of an .item() value
frontend.variables.sym -> frontend.variables.unbacked
    cycle: unbacked's values are sym variables; bool() of an .item() value makes its leaf there
frontend.variables.tensor -> frontend.variables.data_bools
    cycle: data_bools builds on torch variables, which import tensor; bool() of a one-element tensor
frontend.variables.tensor -> frontend.variables.function_modes
    cycle: function_modes builds on tensor variables; their methods and properties go through modes
frontend.variables.torch -> frontend.variables.function_modes
    cycle: function_modes builds on torch variables; torch calls go through the modes
frontend.variables.unbacked -> frontend.variables.sym
    cycle: sym imports unbacked for bool() of .item(); slices by .item() bounds are sym variables
frontend.variables.user_protocol -> frontend.variables.builtin
    cycle: next()/iter() of user objects are answered before the builtins; builtins dispatch to
    them
frontend.variables.user_protocol -> frontend.variables.operators
    cycle: __eq__/__lt__ ... of user objects compare through the operators; operators dispatch to
    them
frontend.variables.user_protocol -> frontend.variables.user_defined
    cycle: the protocol methods act on user objects, which dispatch to them
backend.codegen.triton -> triton
    optional dependency (the [gpu] extra): imported only when a graph is given Triton kernels
backend.compile_fx -> triton
    optional dependency: Triton's version enters the cache key of CUDA graphs only
backend.codegen.triton_matmul -> triton
    optional dependency: Triton's version keys a matmul's choice; do_bench times it on a GPU
frontend.variables.generator_ctx -> frontend.translator
    cycle: a @contextmanager generator's body is inlined with InliningTranslator; the translator
    builds these managers
frontend.variables.ctx_managers -> frontend.variables.user_defined
    cycle: user classes with __enter__/__exit__ are user objects, whose `with` comes here
"""


def _allowlist(table):
    """{(importer, imported): reason} from the table: `a -> b` lines (names under kiln. except
    third-party packages), each followed by its indented reason."""
    out, key = {}, None
    for line in table.strip().splitlines():
        if line.startswith(" "):
            out[key] = f"{out[key]} {line.strip()}".strip()
            continue
        a, b = line.split(" -> ")
        key = tuple(x if x in _THIRD_PARTY else f"kiln.{x}" for x in (a, b))
        out[key] = ""
    return out


_THIRD_PARTY = {"networkx", "kiln_bench", "triton"}
ALLOWED_IN_FUNCTION = _allowlist(ALLOWED_IN_FUNCTION_TABLE)


def _modules():
    out = {}
    for path in sorted(KILN.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def layer_of(module):
    """The layer of a kiln module (the longest matching prefix in LAYERS)."""
    best = None
    for name, members, _ in LAYERS:
        for m in members:
            inside = module == m or (m != "kiln" and module.startswith(m + "."))
            if inside and (best is None or len(m) > len(best[1])):
                best = (name, m)
    return best[0] if best else None


_MAY_IMPORT = {name: set(may) | {name} for name, _, may in LAYERS}


def allowed(importer, imported):
    """Whether the layer order lets module `importer` import module `imported`."""
    if not imported.startswith("kiln"):
        return True
    return layer_of(imported) in _MAY_IMPORT[layer_of(importer)]


def _resolve(module, path, node):
    """The modules an import statement names: kiln modules as module names, others by top name."""
    if isinstance(node, ast.Import):
        return [
            a.name if a.name.split(".")[0] == "kiln" else a.name.split(".")[0] for a in node.names
        ]
    if node.level:
        base = module.split(".")
        if path.name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module
    if target.split(".")[0] != "kiln":
        return [target.split(".")[0]]
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target for a in node.names]


def _owner(name):
    """The kiln module that an imported dotted name lives in."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports():
    """(module, imported module, line, in a function?) for every import statement in kiln/."""
    out = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))

        def visit(node, in_function, module=module, path=path):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import | ast.ImportFrom):
                    for target in _resolve(module, path, child):
                        target = _owner(target) if target.startswith("kiln") else target
                        out.append((module, target, child.lineno, in_function))
                inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                visit(child, inner)

        visit(tree, False)
    return out


def _cycles(edges):
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    graph = collections.defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == []


def test_no_module_level_import_cycle():
    edges = {(a, b) for a, b, _, f in imports() if not f and b in MODULES and a != b}
    assert _cycles(edges) == []


def test_imports_follow_the_layer_order():
    bad = [
        f"{a}:{line} imports {b} ({layer_of(a)} -> {layer_of(b)})"
        for a, b, line, _ in imports()
        if b in MODULES and not allowed(a, b)
    ]
    assert bad == [], "imports against the layer order:\n" + "\n".join(bad)


def test_in_function_imports_only_where_allowed():
    found = {(a, b) for a, b, _, f in imports() if f}
    extra = sorted(found - set(ALLOWED_IN_FUNCTION))
    stale = sorted(set(ALLOWED_IN_FUNCTION) - found)
    assert extra == [], "in-function imports not in ALLOWED_IN_FUNCTION:\n" + "\n".join(
        f"{a} -> {b}" for a, b in extra
    )
    assert stale == [], f"ALLOWED_IN_FUNCTION entries no longer needed: {stale}"


def test_the_documented_layer_table_is_this_one():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = doc.split("## Layers", 1)[1].split("##", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| layer")
    ]
    documented = tuple((r[0], tuple(r[1].split()), tuple(r[2].split())) for r in rows)
    assert documented == LAYERS


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]


def test_summary(capsys):
    found = imports()
    in_function = {(a, line) for a, _, line, f in found if f}  # statements
    with capsys.disabled():
        print(
            f"\nkiln import graph: {len(MODULES)} modules, {len(LAYERS)} layers "
            f"({' < '.join(name for name, _, _ in LAYERS)}), "
            f"{len({(a, line) for a, _, line, f in found if not f})} module-level import "
            f"statements, {len(in_function)} in-function import statements "
            f"({len(ALLOWED_IN_FUNCTION)} allowlisted module pairs)"
        )
