"""The graph under construction: FX nodes, lifted inputs, guards; compile_subgraph() at the end."""

import contextlib
import itertools
import re

import torch
import torch.fx

from kiln import config, faults, hooks, logs
from kiln.contracts import GraphMeta
from kiln.exc import (
    BackendCompilerFailed,
    DataDependentOp,
    RestartTrace,
    Unsupported,
    unimplemented,
)
from kiln.frontend import fallback, installed_globals
from kiln.frontend.dispatch_modes import compiling_function_modes
from kiln.frontend.frame_shapes import FrameShapes, is_dynamic_source, note_marks
from kiln.frontend.guards import GuardKind, GuardSet, has_own_torch_function, is_module_state
from kiln.frontend.side_effects import SideEffects
from kiln.frontend.source import GetItemSource, LocalSource
from kiln.frontend.variables import frame_leaves
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.tensor import tensor_variable
from kiln.symbolic import graph_constants, shape_env
from kiln.symbolic.fake import fake_like, sym_strides
from kiln.symbolic.layouts import dense_strides

_unique = itertools.count()


# Note [Tensors: non-leaf inputs]
# A tensor input that requires grad is a leaf (a user's `x.requires_grad_()`) or not (an
# activation an eager caller computed): `x.is_leaf` reads it, and an in-place op on it raises in
# eager for a leaf only. TENSOR_MATCH checks leafness of a tensor that requires grad (but of a
# subclass with a __torch_function__ of its own, which the read would run: it answers True, as
# its example is a leaf). A plain Tensor's example is a non-leaf where the input is one (a clone
# of the leaf example), so in-place ops on it trace (AOT writes them back under grad: Note [AOT:
# mutated inputs that require grad]) where a leaf's raise.
def _input_leafness(value):
    """Whether input `value` is traced as a leaf (Note [Tensors: non-leaf inputs])."""
    return value.is_leaf or has_own_torch_function(type(value))


def _placeholder_name(source):
    """Dynamo's placeholder name for a source: `L['xs'][0]` -> `L_xs_0_`, `G['w']` -> `G_w_`."""
    name = source.name().replace("___closure_", "closure_")
    scope = "L"
    if name.startswith("___G["):
        scope, name = "G", name[len("___G") :]
    name = re.sub(r"_+", "_", re.sub(r"[^0-9a-zA-Z_]+", "_", name)).strip("_")
    return f"{scope}_{name}_"


def _tensor_dict(value):
    """The literal attributes set on an input tensor when it was traced (a placeholder's
    `tensor_dict` meta, as torch.compile's: `torch._dynamo.mark_static_address` leaves its mark
    there). Only literals are kept, so the graph holds no object alive."""
    d = getattr(value, "__dict__", None)
    if type(d) is not dict:
        return {}
    return {k: v for k, v in d.items() if type(v) in (str, int, float, bool, type(None))}


class OutputGraph:
    """One graph of one frame: its nodes, inputs (with the sources they load from), and guards."""

    def __init__(self, root_fn, settings, *, frame_shapes=None, dynamic=None, fake_inputs=False):
        self.root_fn = root_fn
        self.settings = settings  # kiln.contracts.CompileSettings
        # instructions left to trace before a graph with no tensor op gives up (-1: no limit)
        self.steps_left = -1 if settings.fullgraph else max(config.python_trace_limit, 0) or -1
        self.graph = torch.fx.Graph()
        self.translators = []  # the root frame's and every inlined call's (cleared at the end)
        self.asked_is_compiling = False  # Note [Blocks: an exception on a path only compiled ...]
        # Note [Blocks: ops inside try blocks]: whether the frame can run again in Python when
        # its compiled code raises before any effect (set by the frame cache), and whether it must
        self.eager_rerun_ok = False
        self.rerun_on_error = False
        self.rerun_draws = False  # (the rerun needs the generators' states put back)
        self.own_calls = 0  # calls the root frame's own instructions made (not inlined callees)
        self.guards = GuardSet()
        self.guards.add(GuardKind.GLOBAL_STATE, None, False)
        self.graph_inputs = []  # [(source, real value, placeholder node)]
        self._input_by_id = {}
        self.uses_modules = False
        # (id(module), name) -> the tensor functional_call traces in its place (Note [Modules:
        # functional_call])
        self.module_overrides = {}
        self.side_effects = SideEffects()
        self.extra_globals = {}  # guard names -> foreign globals dicts
        self.installed_globals = []  # names set in root_fn's module (installed_globals.install)
        self.made_classes = []  # classes the trace built (classes.detach_made_classes)
        self._foreign_globals = {}
        # Note [Shapes: wiring]: one ShapeEnv per frame compilation
        self.shape_env = shape_env.ShapeEnv()
        self.frame_shapes = frame_shapes if frame_shapes is not None else FrameShapes()
        self.dynamic = dynamic
        self.fake_inputs = fake_inputs  # tensor inputs traced as fakes (the frame has symbols)
        self.input_shapes = {}  # tensor source name -> sizes: for FrameShapes
        self.input_ints = {}  # int source name -> value: for FrameShapes
        self.input_floats = {}  # float source name -> value: for FrameShapes
        self._size_nodes = {}  # (tensor node, dim) -> SymNodeVariable of `x.size(dim)`
        self.dynamic_ints = False  # every int input is a size symbol (a size-generic graph)
        self.static_modules = set()  # source names of modules kiln.mark_static marked: ints stay
        self.array_inputs = {}  # id(ndarray) -> (array, its tensor's variable, source): one each

    # --- graph building ---------------------------------------------------------------------
    def create_node(self, kind, target, args, kwargs):
        return self.graph.create_node(kind, target, tuple(args), dict(kwargs))

    def add_graph_input(self, value, source, subclass=None, variable=None):
        """A tensor from outside the frame: a placeholder (deduplicated by identity), guarded.
        `subclass` (guards, value, source) -> fake makes the example of a wrapper-subclass input
        (Note [Tensors: wrapper subclass inputs]); `variable` (the plain variable) -> the
        input's variable (Note [Tensors: subclasses with __torch_function__])."""
        guards = self.guards
        prev = self._input_by_id.get(id(value))
        if prev is not None:
            var, prev_source = prev
            if prev_source != source:
                guards.add(GuardKind.ALIASING, source, prev_source)
            return var
        guards.add(GuardKind.TENSOR_MATCH, source, value)
        name = source.name()
        self.input_shapes[name] = tuple(value.shape)
        dims = self._dynamic_dims(value, source)
        if subclass is not None and dims:
            dims = self._static_subclass(value, name, dims)
        fake = subclass(guards, value, source) if subclass is not None else None
        node = self._placeholder(source)
        if dims:
            self.fake_inputs = True
        if fake is not None:
            example = fake
        elif self.fake_inputs:
            sizes = self.shape_env.sizes_of(value, name, dims)
            note_marks(self.shape_env, value, sizes, name)
            example = fake_like(value, requires_grad=value.requires_grad, sizes=sizes)
            if dims:
                strides = None if value.is_contiguous() else sym_strides(example)
                guards.set_dynamic_dims(source, dims, strides)
        else:
            example = torch.empty_strided(
                value.shape, value.stride(), dtype=value.dtype, device="meta"
            )
            if value.requires_grad:
                example.requires_grad_(True)
        leaf = _input_leafness(value)
        if not leaf and type(value) is torch.Tensor:
            with torch.enable_grad():  # (a fresh non-leaf: in-place ops on it trace as in eager)
                example = example.clone()
        node.meta["example_value"] = example
        node.meta["source"] = source.name()
        node.meta["tensor_dict"] = _tensor_dict(value)
        if isinstance(value, torch.nn.Parameter):
            node.meta["is_parameter"] = True
        var = tensor_variable(node, example, value.device, source=source, is_leaf_input=leaf)
        if variable is not None:
            var = variable(var)
        self.graph_inputs.append((source, value, node))
        self._input_by_id[id(value)] = (var, source)
        return var

    def _static_subclass(self, value, name, dims):
        """A wrapper subclass input keeps static sizes (a recompile per size, as under
        dynamic=False): its fake's outer sizes are the ints torch's wrapper constructor takes
        (Note [Tensors: wrapper subclass inputs]). Dims the user marked dynamic break."""
        what = type(value).__name__
        if set(getattr(value, "_kiln_dynamic_dims", ())) & dims or is_dynamic_source(name):
            unimplemented(f"symbolic sizes of a tensor subclass input ({what}) are not traced")
        if logs.enabled("perf_hints"):
            logs.log("perf_hints", "%s (a %s) keeps static sizes %s", name, what, value.shape)
        return set()

    def _placeholder(self, source):
        if len(self.graph_inputs):
            ctx = self.graph.inserting_after(self.graph_inputs[-1][2])
        else:
            first = next(iter(self.graph.nodes), None)
            ctx = self.graph.inserting_before(first)
        with ctx:
            return self.graph.placeholder(_placeholder_name(source))

    def _dynamic_dims(self, value, source):
        """The dims of an input tensor traced symbolically (Note [Shapes: wiring])."""
        forced = is_dynamic_source(source.name())  # Note [Shapes: dynamic sources]
        if (self.dynamic is False and not forced) or value.layout != torch.strided:
            return set()
        dynamic = self.dynamic
        if dynamic and is_module_state(source) and not forced:
            dynamic = None  # parameters and buffers keep their sizes under dynamic=True
        dims = self.frame_shapes.dynamic_dims(source.name(), value, dynamic)
        dims = {d for d in dims if value.shape[d] >= shape_env.MIN_SYMBOL_VALUE}
        if dims and not value.is_contiguous():
            # a dense layout (transposed, channels-last) gets symbolic strides; others stay static
            dense = dense_strides(list(value.shape), tuple(value.stride()))
            if dense is None or value.storage_offset() != 0:
                return set()
        return dims

    def is_dynamic_int(self, source):
        """Whether an int input at `source` is traced as a symbolic size: its value changed, or
        dynamic=True and it is an argument (or an item of one), not an attribute of an object
        (module settings such as `self.n_head` stay constants, as in torch)."""
        if is_dynamic_source(source.name()):  # Note [Shapes: dynamic sources]
            return True
        if self.dynamic is False or self._under_static_module(source):
            return False
        if self.dynamic_ints or 0 in self.frame_shapes.dynamic.get(source.name(), ()):
            return True
        if self.dynamic is True:
            while isinstance(source, GetItemSource):
                source = source.source
            return isinstance(source, LocalSource)
        return False

    def _under_static_module(self, source):
        """Whether `source` is read from a module that kiln.mark_static marked."""
        while source is not None and self.static_modules:
            if source.name() in self.static_modules:
                return True
            source = getattr(source, "source", None)
        return False

    def add_int_input(self, value, source):
        """An int input made dynamic: a placeholder whose value is an int symbol (any int)."""
        name = source.name()
        self.input_ints[name] = value
        self.guards.add(GuardKind.TYPE_MATCH, source, int)
        for prev_source, _, node in self.graph_inputs:
            if prev_source == source:
                return SymNodeVariable(node, shape_env.from_torch(node.meta["example_value"]))
        sym = self.shape_env.create_int(value, name)
        node = self._placeholder(source)
        node.meta["example_value"] = shape_env.to_torch(sym)
        node.meta["source"] = name
        self.graph_inputs.append((source, value, node))
        self.fake_inputs = True
        return SymNodeVariable(node, sym, source=source)

    def size_node(self, tensor, dim, size):
        """`tensor.size(dim)` as a SymNodeVariable (one node per tensor and dim)."""
        key = (tensor.proxy, dim)
        var = self._size_nodes.get(key)
        if var is not None and not getattr(var.proxy, "_erased", False):
            return var
        node = self.create_node("call_method", "size", (tensor.proxy, dim), {})
        var = self._size_nodes[key] = SymNodeVariable.create(self, node, size)
        return var

    @property
    def output(self):
        return self  # SymNodeVariable.create(tx, ...) reads tx.output

    @property
    def captures_scalars(self):
        """`.item()` stays in the graph (Note [Shapes: item() in the graph]): under
        config.capture_scalar_outputs, and always under fullgraph=True, as torch.compile does."""
        return config.capture_scalar_outputs or self.settings.fullgraph

    def has_symbols(self):
        """Whether this frame's graph has symbolic sizes (a ShapeEnv with symbols)."""
        return bool(self.shape_env.var_to_val)

    def _remove_dead_sizes(self):
        """Size computations (`x.size(0)`, `s0 * 2`) whose value no node uses."""
        for node in reversed(list(self.graph.nodes)):
            if node.op in ("call_method", "call_function") and not node.users:
                if node.meta.get("kiln_may_raise"):  # (`u0 // u1`: ZeroDivisionError as eager)
                    continue
                if isinstance(node.meta.get("example_value"), torch.SymInt):
                    self.graph.erase_node(node)

    def globals_name(self, f_globals):
        """'' for the root function's globals, else the guard name bound to that dict."""
        if f_globals is self.root_fn.__globals__:
            return ""
        key = id(f_globals)
        if key not in self._foreign_globals:
            mod = re.sub(r"\W", "_", str(f_globals.get("__name__", "mod")))
            name = f"___G_{mod}_{len(self._foreign_globals)}"
            self._foreign_globals[key] = name
            self.extra_globals[name] = f_globals
        return self._foreign_globals[key]

    def last_node(self):
        """A checkpoint: the graph's current last node (None when empty)."""
        # (called before every traced instruction: fx's node list is circular through its root
        # sentinel, so the last node is root._prev; erased nodes are unlinked)
        root = self.graph._root
        last = root._prev
        return None if last is root else last

    def rollback(self, checkpoint):
        """Drop the nodes made after `checkpoint` (placeholders stay; unused ones are pruned)."""
        for node in list(reversed(self.graph.nodes)):
            if node is checkpoint:
                break
            if node.op != "placeholder":
                self.graph.erase_node(node)

    def count_calls(self):
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method"))

    def only_grad_switches(self):
        """Whether every call in the graph is a grad-mode switch (Note [Output graph: a graph
        of grad-mode switches only])."""
        return all(
            n.target is torch._C._set_grad_enabled
            for n in self.graph.nodes
            if n.op in ("call_function", "call_method")
        )

    # --- compiling ------------------------------------------------------------------------------
    def _guard_written_inputs_distinct(self):
        """Note [Output graph: inputs the graph writes]: DISTINCT guards for written inputs."""
        tensors = [(s, n) for s, v, n in self.graph_inputs if isinstance(v, torch.Tensor)]
        written = [s for s, n in tensors if _written(n)]
        pairs = [(w, s) for w in written for s, _ in tensors if s != w]
        if 0 < len(pairs) <= WRITTEN_INPUT_PAIRS_LIMIT:
            for w, s in pairs:
                self.guards.add(GuardKind.DISTINCT, w, s)

    def compile_subgraph(self, outputs):
        """Finish the graph with `outputs` (TensorVariables); call the backend once.

        Returns (name of the compiled callable installed in the root function's globals,
        the sources of its inputs), or (None, []) when the graph holds no tensor op.
        """
        if self.only_grad_switches() and (not outputs or self.count_calls() == 0):
            return None, []
        frame_leaves.check_outputs(self, outputs)  # Note [Autograd: leaves made in the frame]
        self.graph.output(tuple(v.proxy for v in outputs))
        self._remove_dead_sizes()
        graph_constants.spell_nonfinite_complex(self.graph)  # Note [Graphs: complex ...]
        for source, value, node in list(self.graph_inputs):
            if not node.users:
                self.graph.erase_node(node)
                self.graph_inputs.remove((source, value, node))
        self._guard_written_inputs_distinct()
        if self.rerun_on_error:  # Note [Blocks: ops inside try blocks]
            kinds = fallback.effects(self.graph)
            if "writes" in kinds:  # (it cannot run twice)
                self.restart_notes.add(fallback.NO_EAGER_RERUN)
                raise RestartTrace("a graph that writes cannot run again in Python")
            self.rerun_draws = "draws" in kinds
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph, class_name="GraphModule")
        if self.has_symbols():
            GraphMeta.update(gm, shape_env=self.shape_env)
        GraphMeta.update(gm, inputs_guarded=True)  # Note [AOT: inputs the frontend guards]
        example_inputs = [value for _, value, _ in self.graph_inputs]
        logs.counters["stats"]["unique_graphs"] += 1
        logs.counters["stats"]["calls_captured"] += self.count_calls()
        name = f"__kiln_compiled_fn_{next(_unique)}"
        if logs.enabled("graph_code"):
            logs.log("graph_code", "graph %s of %s:\n%s", name, self.root_fn.__qualname__, gm.code)
            for node, body in _node_bodies(gm):  # (torch.vmap's, torch.func.grad's bodies)
                logs.log("graph_code", "body of %s (%r):\n%s", node.name, node.target, body.code)
        self.gm = gm
        settings = self.settings
        backend = hooks.chain("backend", settings.backend, settings.backend_name)  # REPRO_AFTER
        if getattr(self, "eager_autograd", False) and _grad_inputs(example_inputs):
            backend = _eager_autograd  # Note [Output graph: a write autograd cannot see]
        state = faults.GlobalState()
        code = self.root_fn.__code__
        where = f"{self.root_fn.__qualname__} ({code.co_filename}:{code.co_firstlineno})"
        try:
            with logs.compiling(where), _no_user_modes():
                compiled = backend(gm, example_inputs)
        except Exception as e:
            state.restore()  # Note [Faults: the crash contract]
            if config.strict and not isinstance(e, Unsupported):  # (a refusal is no bug)
                raise BackendCompilerFailed(self.settings.backend_name, e) from e
            if isinstance(e, DataDependentOp):  # (expected: its sizes are known only at run time)
                logs.log(
                    "perf_hints",
                    "%s: a graph of %s runs as traced (%s)",
                    self.settings.backend_name,
                    where,
                    e,
                )
                logs.counters["stats"]["graphs_run_as_traced"] += 1
            else:
                logs.warn(
                    "kiln: backend %r failed on a graph of %s (%s: %s); running the graph eagerly",
                    self.settings.backend_name,
                    where,
                    type(e).__name__,
                    e,
                )
                logs.counters["stats"]["backend_failures"] += 1
            compiled = gm.forward
        if self.has_symbols() and not _size_generic(compiled, gm):
            _specialise(self.shape_env)  # Note [Output graph: backends that read example values]
        if not callable(compiled):
            raise BackendCompilerFailed(
                self.settings.backend_name, TypeError(f"backend returned {type(compiled).__name__}")
            )
        if any(has_own_torch_function(type(v)) for _, v, _ in self.graph_inputs):
            compiled = _torch_function_disabled(compiled)
        if compiling_function_modes() or "function_modes" in self.__dict__:
            compiled = _function_modes_disabled(compiled)  # Note [Frames: tracing a user's ...]
        installed = _restoring_grad_mode(compiled, gm.graph)
        fallback.graph_without_effects(installed, gm.graph)  # Note [Faults: no eager rerun ...]
        installed_globals.install(self, name, installed)
        return name, [source for source, _, _ in self.graph_inputs]


# Note [Output graph: inputs the graph writes]
# The graph was traced with one placeholder per distinct input object: an input it writes in
# place (its example's version counter moved while tracing) is assumed to be no other input. A
# later call passing the same tensor in two places (`f(x, y, x)`) fails a DISTINCT guard and
# recompiles, as torch.compile's aliasing guard does; the new trace sees one input in both places.
# (Distinct tensors that share memory, views of one base, pass the guard: AOT's run-time check
# runs such a call's graph op by op.) Pairs are capped: an optimizer step writing hundreds of
# parameters keeps only the run-time check.
WRITTEN_INPUT_PAIRS_LIMIT = 64


def _written(node):
    """Whether tracing wrote the placeholder's example in place."""
    try:
        return node.meta["example_value"]._version > 0
    except Exception:  # (an example whose version counter cannot be read: not counted)
        return False


# Note [Output graph: backends that read example values]
# A symbolic graph's example inputs are real values (5 for a dynamic int `d`, tensors of this
# call's sizes). A backend of the user's that traces them (torch's aot_module_simplified, say)
# bakes those values into what it returns: `add(t1, t2, alpha=5)`, which the next call with
# d = 6 would reuse, since kiln's guards accept any d. So unless the backend is known to compile
# for the graph's symbols (kiln's own AOT backends say so in GraphMeta.size_generic) or returns
# the graph itself (its code reads every size from its inputs), every size symbol of the frame
# is specialised to its value: guarded, a new value compiles again.
def _size_generic(compiled, gm):
    """Whether `compiled` serves every size the graph's symbols allow."""
    if compiled is gm or getattr(compiled, "__self__", None) is gm:
        return True  # gm or gm.forward
    return GraphMeta.of(gm).size_generic


def _specialise(shape_env):
    for sym in list(shape_env.var_to_val):
        shape_env.specialize(sym)


# Note [Output graph: a write autograd cannot see]
# `x.data.mul_(2)` changes x without bumping its version counter, so eager's backward reads the
# new x wherever an op saved x itself (sin saves its input, exp its result). A partitioned graph
# saves what its min-cut picked (cos(x) computed in the forward, say), so its gradient would
# follow the old x. Which tensors eager saves is each op's own autograd formula: only running
# the ops one by one reproduces it. So a frame that reads `.data` of a tensor that requires grad
# (a break) runs the graph before that break as its FX module, op by op under eager autograd,
# not through the backend. A `.data` write in a later frame, after the graph ran, is not seen:
# as in torch.compile, such a write's effect on a compiled graph's gradient is not eager's.
def _eager_autograd(gm, example_inputs):
    """The graph run op by op (eager autograd saves what each op saves)."""
    logs.counters["stats"]["graphs_run_eagerly_data_write"] += 1
    return gm.forward


def _grad_inputs(example_inputs):
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in example_inputs)


def _torch_function_disabled(compiled):
    """`compiled` run with tensor subclasses' __torch_function__ off: the graph already holds
    what their __torch_function__ does (Note [Tensors: subclasses with __torch_function__])."""

    def call(*args):
        with torch._C.DisableTorchFunctionSubclass():
            return compiled(*args)

    return call


def _no_user_modes():
    """The backend compiles with torch function dispatch off: the user's modes are in the graph
    already, and what the backend runs (its imports, `torch.device(...)`, example runs) is none
    of theirs to see."""
    if torch._C._len_torch_function_stack():
        return torch._C.DisableTorchFunction()
    return contextlib.nullcontext()


def _function_modes_disabled(compiled):
    """`compiled` run with torch function dispatch off: the graph already holds what the user's
    function modes did (Note [Frames: tracing a user's torch function modes])."""

    def call(*args):
        with torch._C.DisableTorchFunction():
            return compiled(*args)

    return call


def _restoring_grad_mode(compiled, graph):
    """`compiled`, or, when the graph switches grad mode, a wrapper that leaves grad mode as the
    graph's end would if a call raises midway (Note [Output graph: grad mode on errors])."""
    modes = [
        n.args[0]
        for n in graph.nodes
        if n.op == "call_function" and n.target is torch._C._set_grad_enabled
    ]
    if not modes:
        return compiled
    end_mode = modes[-1]

    def call(*args):
        try:
            return compiled(*args)
        except BaseException:
            torch._C._set_grad_enabled(end_mode)
            raise

    return call


# Note [Output graph: a graph of grad-mode switches only]
# A graph whose only calls are `_set_grad_enabled` switches (the part of a frame before a graph
# break inside `with torch.no_grad()`, where the with block's enter and exit are all it traced)
# and that has no outputs computes nothing: it goes to no backend, as torch.compile sends none. The mode it would leave is
# still set after it (bytecode_gen._end_grad_mode reads the switches from the graph).

# Note [Output graph: grad mode on errors]
# Traced `with torch.no_grad()` blocks are `_set_grad_enabled` nodes in the graph, so an op that
# raises at run time (an index out of range, a failed check) skips the nodes that leave the
# block: eagerly, the block's __exit__ would have restored the mode on the way out. The graph is
# guarded on the grad mode it starts in and ends in the mode its last switch sets (the frame's
# own mode after every traced block has closed, or what a bare set_grad_enabled() set), so on
# an exception the wrapper sets that end mode: an error raised in generated code never leaves
# grad mode changed (a bare set_grad_enabled() after the failing op is the one case it
# approximates: eagerly it would not have run yet).


def _node_bodies(gm):
    """(node, body graph module) of each node whose target is a call holding a traced body (a
    VmapCall, GradCall, JacobianCall), those inside the bodies too."""
    for node in gm.graph.nodes:
        body = getattr(node.target, "body", None) if node.op == "call_function" else None
        if isinstance(body, torch.fx.GraphModule):
            yield node, body
            yield from _node_bodies(body)
