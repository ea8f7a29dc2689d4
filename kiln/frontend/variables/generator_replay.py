"""The tensor code of a drained generator's rest, run again at each step of the rebuilt one
(Note [Generators: a drained rest computes nothing])."""

import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.ctx_managers import SAVED_HOOKS_SWITCHES
from kiln.frontend.variables.functions import (
    BaseFunctionVariable,
    NestedUserFunctionVariable,
    UserFunctionVariable,
    UserMethodVariable,
)
from kiln.frontend.variables.lists import ListIteratorVariable, RangeVariable, TupleVariable
from kiln.frontend.variables.misc import DeletedVariable, NullVariable
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.symbolic.autocast_state import STATE_NODES

_SWITCHES = (torch._C._set_grad_enabled, *STATE_NODES, *SAVED_HOOKS_SWITCHES)
REFUSED = (
    "rebuilding a suspended generator whose rest runs tensor code it cannot run again lazily "
    "(eager runs it when the items are asked for: after later in-place writes, in the grad "
    "mode then)"
)


class Lazy:
    """An item (or the return value) of a rebuilt generator: the value named `name` once the
    step that computes it has run."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


class ReplayPlan:
    """Per step of a drained rest: a graph of the ops the step ran, the names it reads and
    the names it gives back; the tensors from before the rest that the steps read."""

    def __init__(self, steps, outside):
        self.steps = steps  # [(GraphModule, input names, output names)] per step
        self.outside = outside  # [(name, node)]: values from the frame's graph or its inputs


def plan(output, first, bounds, items, ret):
    """Take the nodes the drain put after `first` out of the frame's graph into one graph per
    step (`bounds[k]`: the last node after step k); the ReplayPlan, with the items and return
    value whose node left the graph made Lazy. Unimplemented when the rest is not that simple."""
    nodes = []
    for n in reversed(output.graph.nodes):
        if n is first:
            break
        if n.op != "placeholder":
            nodes.append(n)
    nodes.reverse()
    drained = set(nodes)
    for n in nodes:
        if n.op not in ("call_function", "call_method") or n.target in _SWITCHES:
            unimplemented(REFUSED)
        value = n.meta.get("example_value")
        if value is not None and not isinstance(value, torch.Tensor):
            unimplemented(REFUSED)  # (a size, a scalar read from data: items of no graph)
    step_of = _steps(nodes, bounds)
    lazy = {}

    def made_lazy(v):
        if isinstance(v, TensorVariable) and v.source is None and v.proxy in drained:
            lazy[v.proxy] = True
            return Lazy(v.proxy.name)
        return v

    items = [made_lazy(v) for v in items]
    ret = made_lazy(ret)
    for v in [*items, ret]:
        if not isinstance(v, (Lazy, ConstantVariable, TensorVariable)):
            unimplemented(REFUSED)  # (a container might hold a value of the rest)
    outside, steps = {}, []
    for k in range(len(bounds)):
        mine = [n for n in nodes if step_of[n] == k]
        graph = torch.fx.Graph()
        env, ins = {}, []

        def arg(a, env=env, ins=ins, graph=graph):
            if a in env:
                return env[a]
            if a not in drained:
                if a.op != "placeholder" and not isinstance(
                    a.meta.get("example_value"), torch.Tensor
                ):
                    unimplemented(REFUSED)  # (a size of the frame's graph)
                outside[a.name] = a
            env[a] = graph.placeholder(a.name)
            ins.append(a.name)
            return env[a]

        for n in mine:
            env[n] = graph.node_copy(n, arg)
        outs = [
            n for n in mine if n in lazy or any(u not in drained or step_of[u] > k for u in n.users)
        ]
        graph.output(tuple(env[n] for n in outs))
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        steps.append((gm, tuple(ins), tuple(n.name for n in outs)))
    for n in reversed(nodes):
        if any(u not in drained for u in n.users):
            unimplemented(REFUSED)  # (read by the frame's graph itself)
        output.graph.erase_node(n)
    return ReplayPlan(steps, list(outside.items())), items, ret


def _steps(nodes, bounds):
    """The step each node was made in: after bounds[k-1], up to bounds[k]. (A bound that is
    no node of the rest, `first` or a placeholder, ends a step that made none.)"""
    step_of, k, made = {}, 0, set(nodes)
    for n in nodes:
        while k < len(bounds) and bounds[k] not in made:
            k += 1
        step_of[n] = k
        while k < len(bounds) and bounds[k] is n:
            k += 1
    return step_of


def load_outside(cg, output, replay):
    """Push a dict of the values from before the rest that its steps read."""
    sources = {node: source for source, _, node in output.graph_inputs}
    for name, node in replay.outside:
        cg.extend(emit.load_const(name))
        source = sources.get(node)
        if source is not None:
            source.reconstruct(cg)
        else:
            example = node.meta.get("example_value")
            cg.reconstruct_tensor(TensorVariable(node, example, example.device))
    cg.extend(emit.build_map(len(replay.outside)))


def replaying(items, ret, steps, env):
    """A generator over `items` then returning `ret`, running step k's graph before item k
    (and the last one before returning)."""
    for k, item in enumerate(items):
        _run(steps[k], env)
        yield env[item.name] if isinstance(item, Lazy) else item
    _run(steps[len(items)], env)
    return env[ret.name] if isinstance(ret, Lazy) else ret


def _run(step, env):
    gm, ins, outs = step
    if outs or len(gm.graph.nodes) > 1:
        env.update(zip(outs, gm(*[env[n] for n in ins]), strict=True))


# Note [Generators: a drained rest reads only its own state]
# The code after a break may change a list, dict, object or iterator before the rebuilt
# generator is asked for its items; a drain that read one at the break would give the items it
# held then. Cells, globals and the attributes of tensors that the program may change (`.grad`,
# `.requires_grad`) are tracked as they are read (SideEffects.note_read); the rest of what a
# rest can read is what its suspended frame holds. So a generator is drained only when
# everything its frame holds (locals and stack; a `yield from` generator, recursively) is
# immutable or its own: constants, tensors (their ops run lazily), tuples of those, ranges,
# functions, and iterators its own body made over such items. A list, dict, set, object or an
# iterator it was given (a generator expression's `.0`) is unimplemented: the frame runs in
# Python.
_IMMUTABLE = (int, float, complex, bool, str, bytes, type(None))
_OPAQUE_SAFE = ("BuiltinVariable", "TorchVariable", "PythonModuleVariable", "SliceVariable")


def holds_outside_state(gen_var):
    """Whether the suspended frame of a lazy generator holds state from outside it (Note
    [Generators: a drained rest reads only its own state])."""
    seen, todo = set(), [(gen_var, gen_var.serial)]
    while todo:
        v, owner = todo.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        if type(v).__name__ == "LazyGeneratorVariable":
            g = v.gen
            todo.extend((x, v.serial) for x in [*g.symbolic_locals.values(), *g.stack])
        elif isinstance(v, (ConstantVariable, TensorVariable, SymNodeVariable, RangeVariable)):
            continue
        elif isinstance(v, UserMethodVariable):
            todo.append((v.obj, owner))  # (its object's state)
        elif isinstance(v, NestedUserFunctionVariable):
            defaults = [*(v.defaults or ()), *(v.kwdefaults or {}).values()]
            todo.extend((x, owner) for x in defaults)
        elif isinstance(v, UserFunctionVariable):
            defaults = [*(v.fn.__defaults__ or ()), *(v.fn.__kwdefaults__ or {}).values()]
            if not all(type(d) in _IMMUTABLE for d in defaults):
                return True  # (a default the program may change: `def f(seen=[])`)
        elif isinstance(v, (NullVariable, DeletedVariable, BaseFunctionVariable)):
            continue
        elif type(v).__name__ in _OPAQUE_SAFE:
            continue
        elif isinstance(v, TupleVariable):
            todo.extend((x, owner) for x in v.items)
        elif type(v) is ListIteratorVariable and getattr(v, "live_list", None) is None:
            if v.serial < owner:
                return True  # (made before the generator: it may be shared)
            todo.extend((x, owner) for x in v.items)
        else:
            return True
    return False
