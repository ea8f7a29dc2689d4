"""torch.utils._pytree's tree functions on traced containers (Note [Pytree: a stand-in tree])."""

import collections
import types

import torch
import torch.utils._pytree as pytree

from kiln.exc import unimplemented
from kiln.frontend.variables import nonstrict_calls
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.base import wrap_constant_like
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.dict_keys import is_stand_in
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.functions import UserFunctionVariable
from kiln.frontend.variables.lists import DequeVariable, ListVariable, SizeVariable, TupleVariable
from kiln.frontend.variables.misc import ConstantObjectVariable

# Note [Pytree: a stand-in tree]
# `tree_flatten(tree)` walks containers (list, tuple, dict, OrderedDict, defaultdict, deque,
# namedtuple, torch.return_types, torch.Size ...) down to leaves and returns the leaves with a
# TreeSpec (the node types and their contexts: a dict's keys, a deque's maxlen, a namedtuple's
# class). All of that is known while tracing except the leaves' values. So kiln rebuilds the
# traced containers as a *stand-in tree*: real Python containers of the same types and keys, each
# leaf replaced by a `_Slot` holding its variable, and runs torch's own pytree on it (its leaf
# rules, orders and errors are eager's). The leaves come back as slots, mapped back to their
# variables; the TreeSpec is a real constant made in the frame. `tree_unflatten(leaves, spec)`
# runs the real unflatten on slots of the leaves and turns the containers it builds back into
# traced containers. `tree_map` / `tree_map_only` are flatten, one traced call per leaf (extra
# trees matched by the real `TreeSpec.flatten_up_to`), unflatten.
#
# Note [Pytree: user nodes]
# A type registered with `register_pytree_node` has Python flatten / unflatten functions. Its
# flatten function is traced on the traced object (user code: its attribute reads are the
# object's), giving the children (stand-ins in turn) and a context that must be a constant; the
# stand-in is a `_UserNode` and such a tree is walked by kiln's copy of tree_flatten's loop (the
# builtin nodes still flattened by their registered functions). Unflatten rebuilds builtin nodes
# as above and traces the user's unflatten function on the traced children and the context.
# tree_map over several trees holding user nodes (flatten_up_to on them) is a break.
#
# What kiln cannot rebuild as a stand-in is a graph break with its reason: a dict keyed by objects, a Size
# of traced ints, an `is_leaf` callback or a tree_map_only predicate whose answer is not a
# constant, a TreeSpec from outside the frame (nothing guards it). A mismatch eager reports (leaf count, structure) is raised in the
# frame as eager's ValueError / TypeError with eager's message.


class _Slot:
    """A leaf of the stand-in tree: the traced value at that place."""

    __slots__ = ("var",)

    def __init__(self, var):
        self.var = var


def _node_type(cls):
    """pytree's node type of an instance of `cls` (any namedtuple is `namedtuple`)."""
    return collections.namedtuple if pytree.is_namedtuple_class(cls) else cls


def _is_node(var):
    try:
        cls = var.python_type()
    except Exception:
        return False
    return _node_type(cls) in pytree.SUPPORTED_NODES


def _stand_in(tx, var, factories, is_leaf=None):
    """The real container tree of `var` with a `_Slot` for each leaf (each node `is_leaf`, a
    traced callable, says is one among them: Note [Pytree: is_leaf])."""
    if is_leaf is not None and _says_leaf(tx, is_leaf, var):
        return _Slot(var)
    if not _is_node(var):
        return _Slot(var)

    def kid(v):
        return _stand_in(tx, v, factories, is_leaf)

    cls = var.python_type()
    if isinstance(var, DequeVariable) and cls is collections.deque:
        return collections.deque([kid(v) for v in var.items], var.maxlen)
    if isinstance(var, SizeVariable):
        if not all(v.is_python_constant() for v in var.items):
            unimplemented("pytree of a torch.Size holding traced sizes")
        return torch.Size([v.as_python_constant() for v in var.items])
    if type(var) is TupleVariable:
        items = [kid(v) for v in var.items]
        if cls is tuple:
            return tuple(items)
        if pytree.is_namedtuple_class(cls):
            return cls._make(items)
        if pytree.is_structseq_class(cls):
            return cls(items)
    if type(var) is ListVariable and cls is list:
        return [kid(v) for v in var.items]
    if type(var) is ConstDictVariable and cls in _DICTS:
        var.check_order("flattened by pytree")
        if any(is_stand_in(k) for k in var.items):
            unimplemented("pytree of a dict keyed by objects (not constants)")
        values = {k: kid(v) for k, v in var.items.items()}
        if cls is not collections.defaultdict:
            return cls(values)
        factory = var.default_factory
        if factory is not None and not factory.is_python_constant():
            unimplemented("pytree of a defaultdict whose default_factory is not a constant")
        real = None if factory is None else factory.as_python_constant()
        factories[id(real)] = factory
        return collections.defaultdict(real, values)
    if not _rebuilt(cls) and not isinstance(var, _CONTAINERS):
        return _user_node(tx, var, cls, factories, is_leaf)
    if var.is_python_constant() and cls in _BUILTIN_NODES:  # a constant (1, (2, 3)) as one value
        if is_leaf is not None:
            unimplemented("pytree with an is_leaf callback over a constant container")
        return _real(
            pytree.tree_map, lambda v: _Slot(wrap_constant_like(tx, v)), var.as_python_constant()
        )
    unimplemented(f"pytree of a {cls.__name__} node (a node type kiln does not rebuild)")


_DICTS = (dict, collections.OrderedDict, collections.defaultdict)
_CONTAINERS = (TupleVariable, ListVariable, ConstDictVariable)


def _rebuilt(cls):
    """Whether a node of this type is one kiln rebuilds as a traced container."""
    node_type = _node_type(cls)
    return node_type in pytree.BUILTIN_TYPES or cls is torch.Size or pytree.is_structseq_class(cls)


class _UserNode:
    """A node of a type registered with register_pytree_node in the stand-in tree: its class,
    the context and the children its (traced) flatten function gave."""

    def __init__(self, cls, context, children):
        self.cls, self.context, self.children = cls, context, children


def _user_node(tx, var, cls, factories, is_leaf=None):
    """A registered user node: its flatten function traced on it (Note [Pytree: user nodes])."""
    out = _python_fn(pytree.SUPPORTED_NODES[cls].flatten_fn, cls).call_function(tx, [var], {})
    parts = out.unpack_var_sequence(tx) if out.has_unpack_var_sequence(tx) else ()
    if len(parts) != 2 or not parts[0].has_unpack_var_sequence(tx):
        unimplemented(f"pytree flatten function of {cls.__name__} did not give (children, context)")
    children, context = parts
    if not context.is_python_constant():
        unimplemented(
            f"pytree flatten function of {cls.__name__} gave a context that is not a constant"
        )
    factories["user nodes"] = True
    kids = [_stand_in(tx, c, factories, is_leaf) for c in children.unpack_var_sequence(tx)]
    return _UserNode(cls, context.as_python_constant(), kids)


def _python_fn(fn, cls):
    """A registered node's flatten / unflatten function, traced as the user's code it is."""
    if not isinstance(fn, types.FunctionType):
        unimplemented(f"pytree functions of {cls.__name__} that are not Python functions")
    return UserFunctionVariable(fn)


def _flatten_with_user_nodes(tree, leaves):
    """tree_flatten's walk of a stand-in tree holding `_UserNode`s (their children given)."""
    if isinstance(tree, _UserNode):
        specs = [_flatten_with_user_nodes(c, leaves) for c in tree.children]
        return pytree.TreeSpec(tree.cls, tree.context, specs)
    if pytree.tree_is_leaf(tree):
        leaves.append(tree)
        return pytree.treespec_leaf()
    node_type = pytree._get_node_type(tree)
    children, context = pytree.SUPPORTED_NODES[node_type].flatten_fn(tree)
    return pytree.TreeSpec(
        node_type, context, [_flatten_with_user_nodes(c, leaves) for c in children]
    )


def _unflatten_with_user_nodes(tx, spec, leaves, factories):
    """TreeSpec.unflatten of traced leaves: a user node's unflatten function traced."""
    if spec.is_leaf():
        return leaves[0]
    children, start = [], 0
    for child in spec.children():
        children.append(
            _unflatten_with_user_nodes(
                tx, child, leaves[start : start + child.num_leaves], factories
            )
        )
        start += child.num_leaves
    unflatten = pytree.SUPPORTED_NODES[spec.type].unflatten_fn
    if _rebuilt(spec.type):
        return _traced(unflatten([_Slot(c) for c in children], spec.context), factories)
    context = wrap_constant_like(tx, spec.context)
    return _python_fn(unflatten, spec.type).call_function(tx, [ListVariable(children), context], {})


_BUILTIN_NODES = (tuple, list, *_DICTS, collections.deque)


def _traced(tree, factories):
    """The traced containers of a stand-in tree (its slots are their variables)."""
    if isinstance(tree, _Slot):
        return tree.var
    cls = type(tree)
    if cls is list:
        return ListVariable([_traced(v, factories) for v in tree])
    if cls is collections.deque:
        return DequeVariable([_traced(v, factories) for v in tree], maxlen=tree.maxlen)
    if cls is torch.Size:
        return SizeVariable([ConstantVariable(int(i)) for i in tree])
    if isinstance(tree, tuple):
        return TupleVariable([_traced(v, factories) for v in tree], tuple_cls=cls)
    if cls in _DICTS:
        items = {k: _traced(v, factories) for k, v in tree.items()}
        if cls is collections.defaultdict:
            factory = factories.get(id(tree.default_factory))
            if factory is None and tree.default_factory is not None:
                unimplemented("pytree unflatten of a defaultdict with a factory kiln did not see")
            return ConstDictVariable(items, cls, factory)
        return ConstDictVariable(items, cls)
    unimplemented(f"pytree unflatten made a {cls.__name__} (not a container kiln rebuilds)")


def _is_leaf_arg(kwargs, name, positional=None):
    """The is_leaf callback given (as keyword or as the positional argument after the tree), or
    None; other keywords (or is_leaf given twice) are a break."""
    kwargs = dict(kwargs)
    is_leaf = kwargs.pop("is_leaf", None)
    if positional is not None:
        if is_leaf is not None:
            unimplemented(f"pytree.{name} given is_leaf twice")
        is_leaf = positional
    if kwargs:
        unimplemented(f"pytree.{name} with keyword arguments {sorted(kwargs)}")
    if is_leaf is None or (is_leaf.is_python_constant() and is_leaf.as_python_constant() is None):
        return None
    return is_leaf


# Note [Pytree: is_leaf]
# `is_leaf(node)` is asked of every node the walk reaches, parents before their children, and a
# node it says is a leaf is one, container or not (pytree's `tree_is_leaf`). kiln asks it in the
# same order while it builds the stand-in tree: the callback is traced (user code) and must give
# a constant (a decision on tensor data is a break); a node it picks becomes a slot. The
# predicate of tree_map_only (`map_only(pred)`) is traced on each leaf the same way.
def _says_leaf(tx, fn, var):
    """Whether the traced callback `fn` says `var` is a leaf (a constant answer, or a break)."""
    try:
        cls = fn.python_type()
    except Exception:
        cls = None
    if cls is not None and not any("__call__" in vars(k) for k in cls.__mro__):
        # (an instance that is not callable: `tree_map_only(T, f, a, b)` takes b as is_leaf)
        raise_observed(tx, TypeError, f"'{cls.__name__}' object is not callable")
    out = fn.call_function(tx, [var], {})
    if not out.is_python_constant():
        unimplemented("a pytree is_leaf callback or predicate whose answer is not a constant")
    return bool(out.as_python_constant())


def _real(fn, *args):
    """Run torch's pytree on stand-ins; its ValueError/TypeError is raised in the frame."""
    try:
        return fn(*args)
    except (ValueError, TypeError) as e:
        raise_observed(None, type(e), str(e))


def _flatten(tx, tree, is_leaf=None):
    factories = {}
    stand_in = _stand_in(tx, tree, factories, is_leaf)
    if factories.get("user nodes"):
        slots = []
        spec = _flatten_with_user_nodes(stand_in, slots)
    else:
        slots, spec = _real(pytree.tree_flatten, stand_in)
    return [s.var for s in slots], spec, factories


def _spec_of(var):
    if isinstance(var, ConstantObjectVariable) and isinstance(var.value, pytree.TreeSpec):
        return var.value
    unimplemented("pytree.tree_unflatten of a TreeSpec not made in the compiled frame")


def _leaves_of(tx, var):
    if not var.has_unpack_var_sequence(tx):
        unimplemented(f"pytree.tree_unflatten of {var} (leaves kiln cannot unpack)")
    return var.unpack_var_sequence(tx)


def _unflatten(tx, leaves, spec, factories):
    slots = [_Slot(v) for v in leaves]
    if all(_rebuilt(t) for t in _node_types(spec)):
        return _traced(_real(pytree.tree_unflatten, slots, spec), factories)
    if len(leaves) != spec.num_leaves:
        _real(spec.unflatten, slots)  # (eager's ValueError)
    return _unflatten_with_user_nodes(tx, spec, list(leaves), factories)


def _node_types(spec):
    if spec.is_leaf():
        return
    yield spec.type
    for child in spec.children():
        yield from _node_types(child)


def _flatten_node(tx, var):
    """(leaf variables, TreeSpec) of a traced tree (a nonstrict_trace / leaf_function argument)."""
    leaves, spec, factories = _flatten(tx, var)
    if set(factories) - {"user nodes"}:
        unimplemented("a defaultdict with a default_factory inside a nonstrict_trace argument")
    return leaves, spec


nonstrict_calls.USER_TREES["flatten"] = _flatten_node
nonstrict_calls.USER_TREES["unflatten"] = lambda tx, leaves, spec: _unflatten(tx, leaves, spec, {})


def _one_tree(args, kwargs, name):
    """(tree, is_leaf) of `fn(tree, is_leaf=None)`, or None for another signature."""
    if len(args) not in (1, 2):
        return None
    return args[0], _is_leaf_arg(kwargs, name, args[1] if len(args) == 2 else None)


def tree_flatten(tx, fn, args, kwargs):
    if (call := _one_tree(args, kwargs, "tree_flatten")) is None:
        return None
    leaves, spec, _ = _flatten(tx, *call)
    return TupleVariable([ListVariable(leaves), ConstantObjectVariable(spec)])


def tree_leaves(tx, fn, args, kwargs):
    if (call := _one_tree(args, kwargs, "tree_leaves")) is None:
        return None
    return ListVariable(_flatten(tx, *call)[0])


def tree_structure(tx, fn, args, kwargs):
    if (call := _one_tree(args, kwargs, "tree_structure")) is None:
        return None
    return ConstantObjectVariable(_flatten(tx, *call)[1])


def tree_unflatten(tx, fn, args, kwargs):
    if len(args) != 2 or kwargs:
        return None
    return _unflatten(tx, _leaves_of(tx, args[0]), _spec_of(args[1]), {})


def _map(tx, func, tree, rests, only=None, with_paths=False, is_leaf=None):
    """tree_map (tree_map_only's `only`, a type, types or a traced predicate; tree_map_with_path's
    key path first in each call)."""
    if with_paths:
        paths, leaves, spec, factories = _with_paths(tx, tree, "tree_map_with_path", is_leaf)
    else:
        leaves, spec, factories = _flatten(tx, tree, is_leaf)
    columns = [leaves]
    if rests and factories.get("user nodes"):
        unimplemented("pytree.tree_map of several trees holding registered user nodes")
    for rest in rests:
        subtrees = _real(spec.flatten_up_to, _stand_in(tx, rest, factories))
        columns.append([_traced(s, factories) for s in subtrees])
    out = []
    for i, row in enumerate(zip(*columns, strict=True)):
        if only is not None and not _selected(tx, only, row[0]):
            out.append(row[0])
            continue
        row = [paths[i], *row] if with_paths else list(row)
        out.append(func.call_function(tx, row, {}))
    return _unflatten(tx, out, spec, factories)


def _selected(tx, only, leaf):
    """Whether tree_map_only's `only` (a type or types, or a traced predicate) picks a leaf."""
    if isinstance(only, type | tuple):
        return issubclass(leaf.python_type(), only)
    return _says_leaf(tx, only, leaf)


def tree_map(tx, fn, args, kwargs):
    if len(args) < 2:
        return None
    is_leaf = _is_leaf_arg(kwargs, "tree_map")
    return _map(tx, args[0], args[1], args[2:], is_leaf=is_leaf)


def tree_map_only(tx, fn, args, kwargs):
    if len(args) not in (3, 4):
        return None
    is_leaf = _is_leaf_arg(kwargs, "tree_map_only", args[3] if len(args) == 4 else None)
    kind = args[0].as_python_constant() if args[0].is_python_constant() else None
    if not (
        isinstance(kind, type)
        or (isinstance(kind, tuple) and all(isinstance(t, type) for t in kind))
    ):
        kind = args[0]  # a predicate (Note [Pytree: is_leaf])
    return _map(tx, args[1], args[2], [], only=kind, is_leaf=is_leaf)


def _with_paths(tx, tree, name, is_leaf=None):
    """(key paths as traced tuples of KeyEntry constants, leaf variables, spec, factories)."""
    factories = {}
    stand_in = _stand_in(tx, tree, factories, is_leaf)
    if factories.get("user nodes"):
        unimplemented(f"pytree.{name} of a tree holding registered user nodes")
    pairs, spec = _real(pytree.tree_flatten_with_path, stand_in)
    paths = [TupleVariable([ConstantObjectVariable(k) for k in path]) for path, _ in pairs]
    return paths, [slot.var for _, slot in pairs], spec, factories


def tree_map_with_path(tx, fn, args, kwargs):
    """`tree_map_with_path(func, tree, *rests)`: func(key path, leaf, *leaves of rests) for each
    leaf, the key paths constants (Note [Pytree: a stand-in tree])."""
    if len(args) < 2:
        return None
    is_leaf = _is_leaf_arg(kwargs, "tree_map_with_path")
    return _map(tx, args[0], args[1], args[2:], with_paths=True, is_leaf=is_leaf)


def tree_flatten_with_path(tx, fn, args, kwargs):
    if (call := _one_tree(args, kwargs, "tree_flatten_with_path")) is None:
        return None
    paths, leaves, spec, _ = _with_paths(tx, call[0], "tree_flatten_with_path", call[1])
    pairs = ListVariable([TupleVariable([p, v]) for p, v in zip(paths, leaves, strict=True)])
    return TupleVariable([pairs, ConstantObjectVariable(spec)])


def tree_leaves_with_path(tx, fn, args, kwargs):
    if (call := _one_tree(args, kwargs, "tree_leaves_with_path")) is None:
        return None
    paths, leaves, _, _ = _with_paths(tx, call[0], "tree_leaves_with_path", call[1])
    return ListVariable([TupleVariable([p, v]) for p, v in zip(paths, leaves, strict=True)])


def keystr(tx, fn, args, kwargs):
    """`keystr(key_path)` of a constant key path: folded."""
    if len(args) != 1 or kwargs or not args[0].has_unpack_var_sequence(tx):
        return None
    entries = args[0].unpack_var_sequence(tx)
    if not all(isinstance(e, ConstantObjectVariable) for e in entries):
        return None
    return ConstantVariable(pytree.keystr(tuple(e.value for e in entries)))


for _fn in (
    keystr,
    *(tree_flatten, tree_leaves, tree_structure, tree_unflatten, tree_map, tree_map_only),
    *(tree_map_with_path, tree_flatten_with_path, tree_leaves_with_path),
):
    torch_vars.register_function(getattr(pytree, _fn.__name__), _fn)


def _path_key(tx, cls, args, kwargs):
    """`MappingKey("a")`, `SequenceKey(0)`, `GetAttrKey("x")` of constants: frozen constants."""
    if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        return None
    cargs = [a.as_python_constant() for a in args]
    ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
    try:
        return ConstantObjectVariable(cls(*cargs, **ckw))
    except TypeError as e:
        raise_observed(tx, TypeError, str(e))


for _cls in (pytree.MappingKey, pytree.SequenceKey, pytree.GetAttrKey):
    torch_vars.register_function(_cls, _path_key)
