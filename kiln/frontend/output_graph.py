"""The graph under construction: FX nodes, lifted inputs, guards; compile_subgraph() at the end."""

import itertools
import re

import torch
import torch.fx

from kiln import config, logs
from kiln.exc import BackendCompilerFailed
from kiln.frontend.guards import GuardKind, GuardSet
from kiln.frontend.side_effects import SideEffects
from kiln.frontend.variables.tensor import TensorVariable

_unique = itertools.count()


def _placeholder_name(source):
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", source.name()).strip("_")
    name = name.replace("___G_", "G_").replace("___closure_", "closure_")
    return f"L_{name}" if name and not name[0].isdigit() else f"L_{name}_"


class OutputGraph:
    """One graph of one frame: its nodes, inputs (with the sources they load from), and guards."""

    def __init__(self, root_fn, backend, backend_name):
        self.root_fn = root_fn
        self.backend = backend
        self.backend_name = backend_name
        self.graph = torch.fx.Graph()
        self.guards = GuardSet()
        self.guards.add(GuardKind.GLOBAL_STATE, None, False)
        self.graph_inputs = []  # [(source, real value, placeholder node)]
        self._input_by_id = {}
        self.uses_modules = False
        self.side_effects = SideEffects()
        self.extra_globals = {}  # guard names -> foreign globals dicts
        self._foreign_globals = {}

    # --- graph building ---------------------------------------------------------------------
    def create_node(self, kind, target, args, kwargs):
        return self.graph.create_node(kind, target, tuple(args), dict(kwargs))

    def add_graph_input(self, value, source):
        """A tensor from outside the frame: a placeholder (deduplicated by identity), guarded."""
        guards = self.guards
        prev = self._input_by_id.get(id(value))
        if prev is not None:
            var, prev_source = prev
            if prev_source != source:
                guards.add(GuardKind.ALIASING, source, prev_source)
            return var
        guards.add(GuardKind.TENSOR_MATCH, source, value)
        if len(self.graph_inputs):
            ctx = self.graph.inserting_after(self.graph_inputs[-1][2])
        else:
            first = next(iter(self.graph.nodes), None)
            ctx = self.graph.inserting_before(first)
        with ctx:
            node = self.graph.placeholder(_placeholder_name(source))
        example = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        if value.requires_grad:
            example.requires_grad_(True)
        node.meta["example_value"] = example
        node.meta["source"] = source.name()
        if isinstance(value, torch.nn.Parameter):
            node.meta["is_parameter"] = True
        var = TensorVariable(node, example, value.device, source=source)
        self.graph_inputs.append((source, value, node))
        self._input_by_id[id(value)] = (var, source)
        return var

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
        return next(iter(reversed(self.graph.nodes)), None)

    def rollback(self, checkpoint):
        """Drop the nodes made after `checkpoint` (placeholders stay; unused ones are pruned)."""
        for node in list(reversed(self.graph.nodes)):
            if node is checkpoint:
                break
            if node.op != "placeholder":
                self.graph.erase_node(node)

    def count_calls(self):
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method"))

    # --- compiling ------------------------------------------------------------------------------
    def compile_subgraph(self, outputs):
        """Finish the graph with `outputs` (TensorVariables); call the backend once.

        Returns (name of the compiled callable installed in the root function's globals,
        the sources of its inputs), or (None, []) when the graph holds no tensor op.
        """
        if self.count_calls() == 0:
            return None, []
        self.graph.output(tuple(v.proxy for v in outputs))
        for source, value, node in list(self.graph_inputs):
            if not node.users:
                self.graph.erase_node(node)
                self.graph_inputs.remove((source, value, node))
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph, class_name="GraphModule")
        example_inputs = [value for _, value, _ in self.graph_inputs]
        logs.counters["stats"]["unique_graphs"] += 1
        logs.counters["stats"]["calls_captured"] += self.count_calls()
        name = f"__kiln_compiled_fn_{next(_unique)}"
        if logs.enabled("graph_code"):
            logs.log("graph_code", "graph %s of %s:\n%s", name, self.root_fn.__qualname__, gm.code)
        self.gm = gm
        try:
            compiled = self.backend(gm, example_inputs)
        except Exception as e:
            if config.raise_on_backend_error:
                raise BackendCompilerFailed(self.backend_name, e) from e
            logs.warn(
                "kiln: backend %r failed on a graph of %s (%s: %s); running the graph eagerly",
                self.backend_name,
                self.root_fn.__qualname__,
                type(e).__name__,
                e,
            )
            logs.counters["stats"]["backend_failures"] += 1
            compiled = gm.forward
        if not callable(compiled):
            raise BackendCompilerFailed(
                self.backend_name, TypeError(f"backend returned {type(compiled).__name__}")
            )
        self.root_fn.__globals__[name] = compiled
        return name, [source for source, _, _ in self.graph_inputs]
