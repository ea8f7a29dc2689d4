"""`d.keys()`, `d.values()`, `d.items()`: live views of a traced dict.

Note [Dicts: views]
A view is not an iterator: it can be iterated again, it sees later changes of its dict, and it
has its own `len`, `in`, comparisons and (keys and items) set operations. The variable holds the
dict's variable and the kind of view; every question reads the dict as it is now.

| operation              | keys view                | items view                        | values view   |
| ---------------------- | ------------------------ | --------------------------------- | ------------- |
| `==` / `!=`            | as sets (vs set or view) | as sets of pairs                  | identity      |
| `<` `<=` `>` `>=`      | as sets                  | as sets (constant values only)    | a break       |
| `&` `|` `-` `^`        | a set                    | a set (constant values only)      | a break       |
| iter()                 | an iterator that raises as Python's does if the dict changes size |

Pairs compare as Python's tuples do: keys by value, values by identity when they are the same
object, by value when both are constants; two different tensors are never equal (they hash by id).
"""

import operator

import torch

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.dict_keys import is_stand_in, key_var
from kiln.frontend.variables.lists import ListIteratorVariable, TupleVariable
from kiln.frontend.variables.sets import SetVariable, _set_values

# set by dicts.py (which imports this module): dict variable -> its mappingproxy variable
MAPPING_PROXY = {}
_KINDS = {"keys": type({}.keys()), "values": type({}.values()), "items": type({}.items())}
_EQ = {operator.eq, operator.ne}
_ORDER = {operator.lt, operator.le, operator.gt, operator.ge}
_SET_OPS = {operator.or_, operator.and_, operator.sub, operator.xor}


class DictViewVariable(VariableTracker):
    """A keys/values/items view of a ConstDictVariable (Note [Dicts: views])."""

    def __init__(self, dict_var, kind, **kw):
        super().__init__(**kw)
        self.dict_var = dict_var
        self.kind = kind

    def python_type(self):
        return _KINDS[self.kind]

    def truthy(self, tx):
        return bool(self.dict_var.items)

    def unpack_var_sequence(self, tx):
        items = self.dict_var.items
        if self.kind == "keys":
            return [key_var(k) for k in items]
        if self.kind == "values":
            return list(items.values())
        return [TupleVariable([key_var(k), v]) for k, v in items.items()]

    def iter_var(self, tx):
        """iter(view): an iterator that raises if the dict changes size while it runs."""
        return ListIteratorVariable.over_dict(
            self.dict_var, self.unpack_var_sequence(tx), view=False, kind=self.kind
        )

    def var_getattr(self, tx, name):
        if name == "mapping":  # a read-only live view of the dict (Note [Dicts: mappingproxy])
            return MAPPING_PROXY["make"](self.dict_var)
        return super().var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if kwargs:
            unimplemented(f"dict view .{name} with keyword arguments")
        if name == "__len__" and not args:
            return ConstantVariable(len(self.dict_var.items))
        if name == "__iter__" and not args:
            return self.iter_var(tx)
        if name == "__contains__" and len(args) == 1 and self.kind == "keys":
            return self.dict_var.call_method(tx, "__contains__", args, {})
        if name == "isdisjoint" and len(args) == 1 and self.kind != "values":
            return ConstantVariable(self.as_set(tx).isdisjoint(_other_set(tx, args[0])))
        if name == "mapping" and not args:
            return self.dict_var
        unimplemented(f"dict view .{name}")

    def as_set(self, tx):
        """The view's contents as a Python set (keys; items whose values are constants)."""
        if self.kind == "values":
            unimplemented("a dict values view used as a set")
        if any(is_stand_in(k) for k in self.dict_var.items):
            unimplemented("a view of a dict keyed by objects used as a set")
        if self.kind == "keys":
            return set(self.dict_var.items)
        pairs = set()
        for k, v in self.dict_var.items.items():
            if not v.is_python_constant():
                unimplemented("a dict items view with non-constant values used as a set")
            pairs.add((k, v.as_python_constant()))
        return pairs

    def reconstruct(self, cg):
        cg.extend(emit.with_null(_load(cg, self.dict_var) + emit.load_attr(self.kind)))
        cg.extend(emit.call(0))

    def __repr__(self):
        return f"DictViewVariable({self.kind}, {self.dict_var!r})"


def _load(cg, var):
    before = len(cg.instrs)
    cg.reconstruct(var)
    code = cg.instrs[before:]
    del cg.instrs[before:]
    return code


def _other_set(tx, var):
    if isinstance(var, DictViewVariable):
        return var.as_set(tx)
    return _set_values(tx, var)


def _is_set_like(var):
    return isinstance(var, DictViewVariable) or (
        isinstance(var, SetVariable) or (var.python_type() in (set, frozenset))
    )


def compare(tx, fn, a, b):
    """a <cmp> b where one side is a dict view, or None when this module has no answer."""
    view, other = (a, b) if isinstance(a, DictViewVariable) else (b, a)
    if fn in _EQ:
        same = _views_equal(tx, view, other)
        return ConstantVariable(same if fn is operator.eq else not same)
    if fn in _ORDER and view.kind != "values" and _is_set_like(other):
        left, right = _other_set(tx, a), _other_set(tx, b)
        return ConstantVariable(fn(left, right))
    return None


def set_op(tx, fn, a, b):
    """a <&|-^> b where one side is a keys or items view: a set, as Python's views give."""
    if not (_is_set_like(a) or _is_set_like(b)):
        return None
    left = _other_set(tx, a) if _is_set_like(a) else _other_set_seq(tx, a)
    right = _other_set(tx, b) if _is_set_like(b) else _other_set_seq(tx, b)
    return SetVariable(fn(left, right))


def _other_set_seq(tx, var):
    return {v.as_python_constant() for v in var.unpack_var_sequence(tx)}


def _views_equal(tx, view, other):
    if view.kind == "values" or (isinstance(other, DictViewVariable) and other.kind == "values"):
        return view is other  # values views have no __eq__: identity
    if not _is_set_like(other):
        return False  # a view never equals a list, tuple, dict ...
    if isinstance(other, DictViewVariable) and view.kind == other.kind == "items":
        left, right = view.dict_var.items, other.dict_var.items
        if set(left) != set(right):
            return False
        return all(_values_equal(left[k], right[k]) for k in left)
    if view.kind == "items" and not isinstance(other, DictViewVariable):
        if len(view.dict_var.items) != len(_other_set(tx, other)):
            return False
    return view.as_set(tx) == _other_set(tx, other)


def _values_equal(a, b):
    """Whether two dict values compare equal inside a pair (identity first, as tuples do)."""
    if a is b:
        return True
    if a.is_python_constant() and b.is_python_constant():
        return a.as_python_constant() == b.as_python_constant()
    if a.python_type() is torch.Tensor and b.python_type() is torch.Tensor:
        # distinct traced tensors (each TensorVariable is one tensor): distinct hashes (by id),
        # never equal pairs
        return False
    unimplemented(f"comparing dict items {a} and {b}")
