"""Arguments and results of traced torch.func transforms as trees of tensors.

Note [Vmap: arguments and results as trees]
torch.func flattens each argument as a pytree (tuples, lists and dicts holding tensors: a model's
parameters, `stack_module_state`'s dicts), and in_dims is a prefix of that tree: an int or None
applies to every tensor under it, a tuple, list or dict of them descends into the argument's
items of the same kind. A traced call takes its tensors flat, each with its own in_dim, and the
body rebuilds each argument's tree from them inside its trace, so the transform at run time sees
the same tensors along the same dims. Results come back the same way: the body returns its
tensors flat (out_dims flattened against the result's tree), and the frame rebuilds the tree from
the call's items. Constants in a tree stay constants (with in_dim None; torch refuses a batch
dimension for a non-tensor, and so does the trace, with a break). Other containers (namedtuples,
dataclasses, dict subclasses) are breaks.
"""

from kiln.exc import unimplemented
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.lists import ListVariable, TupleVariable
from kiln.frontend.variables.tensor import TensorVariable

_DIM_LEAF = (int, type(None))


def _node(v):
    """The kind of a tree node, for the containers torch.func descends into: tuple, list, dict."""
    if type(v) is TupleVariable and v.python_type() is tuple:
        return tuple
    if type(v) is ListVariable:
        return list
    if type(v) is ConstDictVariable and v.python_type() is dict:
        return dict
    return None


def _children(v, kind):
    """(keys, items) of a tuple, list or dict variable."""
    if kind is dict:
        items = v.items
        return list(items), list(items.values())
    return list(range(len(v.items))), list(v.items)


def _rebuild(kind, keys, parts):
    def rebuild(take):
        made = [p(take) for p in parts]
        if kind is dict:
            return ConstDictVariable(dict(zip(keys, made)))
        return TupleVariable(made) if kind is tuple else ListVariable(made)

    return rebuild


def _dims_for(spec, kind, keys, what):
    """The in_dims of a node's children: spec broadcast (an int or None) or matched by kind."""
    if isinstance(spec, _DIM_LEAF) and not isinstance(spec, bool):
        return [spec] * len(keys)
    if kind is dict and type(spec) is dict and set(spec) == set(keys):
        return [spec[k] for k in keys]
    if kind in (tuple, list) and type(spec) is kind and len(spec) == len(keys):
        return list(spec)
    unimplemented(f"torch.func: {what} {spec!r} does not match the argument's structure")


def flatten_arg(v, spec, leaf, what="in_dims entry"):
    """Walk argument `v` against the in_dims tree `spec`: `leaf(tensor, dim)` for each tensor in
    order. Returns rebuild(take) -> the argument's tree, where take() gives the next tensor."""
    if isinstance(v, TensorVariable):
        if not isinstance(spec, _DIM_LEAF) or isinstance(spec, bool):
            unimplemented(f"torch.func: {what} {spec!r} for a tensor (an int or None expected)")
        leaf(v, spec)
        return lambda take: take()
    kind = _node(v)
    if kind is not None:
        keys, items = _children(v, kind)
        if kind is dict and not all(isinstance(k, str | int) for k in keys):
            unimplemented("torch.func: a dict argument with keys other than strings and ints")
        dims = _dims_for(spec, kind, keys, what)
        parts = [flatten_arg(item, d, leaf, what) for item, d in zip(items, dims)]
        return _rebuild(kind, keys, parts)
    if v.is_python_constant():
        if spec is not None:
            unimplemented(f"torch.func: {what} {spec!r} for a non-tensor {v} (torch raises)")
        return lambda take: v
    unimplemented(f"torch.func: an argument {v} (tensors, and tuples, lists, dicts of them)")


def flatten_result(out, what="torch.func: the function returns"):
    """(the tensors of result tree `out` in order, rebuild(items) -> the tree of them)."""
    tensors = []

    def walk(v):
        if isinstance(v, TensorVariable):
            tensors.append(v)
            return lambda take: take()
        kind = _node(v)
        if kind is None:
            unimplemented(f"{what} {v} (tensors, and tuples, lists, dicts of them)")
        keys, items = _children(v, kind)
        return _rebuild(kind, keys, [walk(i) for i in items])

    rebuild = walk(out)

    def from_items(items):
        it = iter(items)
        return rebuild(lambda: next(it))

    return tensors, from_items


def flat_dims(spec, out, what="out_dims"):
    """out_dims (a tree prefix of result `out`) as one dim per tensor of it, in order."""
    dims = []

    def walk(v, s):
        if isinstance(v, TensorVariable):
            if not isinstance(s, _DIM_LEAF) or isinstance(s, bool):
                unimplemented(f"torch.func: {what} {s!r} for a tensor result")
            dims.append(s)
            return
        kind = _node(v)
        keys, items = _children(v, kind)
        for item, d in zip(items, _dims_for(s, kind, keys, what)):
            walk(item, d)

    walk(out, spec)
    return dims


def from_spec(spec, items):
    """The variable of a pytree (tuples, lists, dicts) whose leaves are `items`, in the shape
    `spec` (a torch.utils._pytree.TreeSpec) describes."""
    it = iter(items)

    def build(s):
        if s.is_leaf():
            return next(it)
        kids = [build(c) for c in s.children()]
        if s.type is dict:
            return ConstDictVariable(dict(zip(s.context, kids)))
        if s.type in (tuple, list):
            return TupleVariable(kids) if s.type is tuple else ListVariable(kids)
        unimplemented(f"torch.func: a result holding a {s.type.__name__}")

    return build(spec)
