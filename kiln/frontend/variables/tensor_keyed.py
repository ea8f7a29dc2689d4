"""Dict and defaultdict inputs whose keys include tensors (Note [Dicts: inputs keyed by tensors])."""

import collections

import torch

from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource, DictGetByKeySource, DictGetSource, DictKeyAtSource
from kiln.frontend.variables.base import wrap_value
from kiln.frontend.variables.constant import is_literal
from kiln.frontend.variables.dict_keys import ObjectKey, known_distinct

# Note [Dicts: inputs keyed by tensors]
# A dict, OrderedDict or defaultdict input whose keys are literals and plain tensors (a
# Parameter used as a key, `d[param] = ...`) is traced as a dict: its type and length are
# guarded, and each key is read from its position (`___dict_key_at(d, i)`): a literal is guarded
# by value, a tensor is a graph input like any other (the same tensor reached from elsewhere is
# the same variable, guarded as an alias; distinct tensor keys are guarded distinct), held by
# an ObjectKey on its variable (Note [Dicts: tensors as keys]). Values are read with dict.get
# (a defaultdict's __missing__ never runs in a guard), a tensor key's through the key's own
# source. Changes are replayed key by key after the graph (Note [Side effects: dicts replayed
# key by key]), the tensor keys loaded from their sources before any store.

_KINDS = (dict, collections.OrderedDict, collections.defaultdict)


def tensor_keyed(value):
    """Whether a dict input has plain tensors among its keys, and literals for the others."""
    if type(value) not in _KINDS:
        return False
    tensors = [k for k in value if type(k) in (torch.Tensor, torch.nn.Parameter)]
    return bool(tensors) and all(
        type(k) in (torch.Tensor, torch.nn.Parameter) or is_literal(k) for k in value
    )


def wrap_tensor_keyed(tx, value, source, make_dict):
    """The dict input `value` as a ConstDictVariable made by make_dict(items, **kw)."""
    guards = tx.output.guards
    guards.add(GuardKind.LIST_LENGTH, source, (type(value), len(value)))
    items, item_sources = {}, {}
    for i, (k, v) in enumerate(value.items()):
        key_source = DictKeyAtSource(source, i)
        if is_literal(k):
            guards.add(GuardKind.CONSTANT_MATCH, key_source, k)
            key, item_source = k, DictGetSource(source, k)
        else:
            var = wrap_value(tx, k, key_source)
            key = ObjectKey(var, var, by_value=False)
            item_source = DictGetByKeySource(source, key_source)
        items[key] = wrap_value(tx, v, item_source)
        item_sources[key] = item_source
    known_distinct(tx, [k.var for k in items if isinstance(k, ObjectKey)])
    kw = {}
    if type(value) is collections.defaultdict:
        factory_source = AttrSource(source, "default_factory")
        kw["default_factory"] = wrap_value(tx, value.default_factory, factory_source)
    d = make_dict(items, user_cls=type(value), source=source, **kw)
    d.initial_keys = tuple(items)
    d.initial_items = dict(d.items)
    d.item_sources = item_sources
    return d
