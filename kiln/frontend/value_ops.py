"""Opcode handlers over values: operators, subscripts, comparisons, building and unpacking
containers, string formatting (a mixin of InstructionTranslatorBase).

    x[i] = v       STORE_SUBSCR    -> TensorVariable: an operator.setitem node (checked on meta)
    [a, *b]        BUILD_LIST, LIST_EXTEND -> ListVariable([a, *b.unpack_var_sequence()])
    f"{n:>3}"      FORMAT_VALUE    -> folded: the value must be a Python constant
"""

import operator
import sys

from kiln.exc import unimplemented
from kiln.frontend.dispatch_modes import modes_traced
from kiln.frontend.variables import function_modes, runtime_asserts
from kiln.frontend.variables.builtin import _has_keys, _mapping_items, getitem
from kiln.frontend.variables.constant import BINARY_OPS, COMPARE_OPS, ConstantVariable
from kiln.frontend.variables.dict_keys import guard_tensor_keys
from kiln.frontend.variables.dicts import ConstDictVariable, dict_key
from kiln.frontend.variables.finalizers import old_items
from kiln.frontend.variables.lists import DequeVariable, ListVariable, TupleVariable, unpack_error
from kiln.frontend.variables.operators import binary_op, compare_vars, contains, unary_op
from kiln.frontend.variables.sets import SetVariable, _set_item, guard_tensor_items
from kiln.frontend.variables.sym import SymNodeVariable, build_slice
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import _Unpack
from kiln.frontend.variables.user_protocol import is_user_object, user_text

PY311 = sys.version_info[:2] == (3, 11)
PY313 = sys.version_info[:2] >= (3, 13)


class ValueOpsMixin:
    """Operators and containers: the handlers that compute values from values."""

    # --- operators ------------------------------------------------------------------------------
    def BINARY_OP(self, inst):
        b = self.pop()
        a = self.pop()
        symbol = inst.argrepr
        if symbol == "[]" or symbol == "":  # 3.14 subscript form
            self.push(getitem(self, a, b))
            return
        fn = BINARY_OPS.get(symbol)
        if fn is None:
            unimplemented(f"binary operator {symbol!r}")
        self.push(binary_op(self, fn, a, b))

    def BINARY_SUBSCR(self, inst):
        index = self.pop()
        obj = self.pop()
        self.push(getitem(self, obj, index))

    def STORE_SUBSCR(self, inst):
        index = self.pop()
        obj = self.pop()
        value = self.pop()
        if isinstance(obj, TensorVariable) and not _torch_function_on(self, obj):
            self.tensor_setitem(obj, index, value)
            return
        obj.call_method(self, "__setitem__", [index, value], {})  # (through __torch_function__)

    def tensor_setitem(self, obj, index, value):
        """`t[index] = value`: an in-place operator.setitem node (checked on the meta tensor)."""
        unpack = _Unpack(self)
        node_index, meta_index = unpack(index)
        node_value, meta_value = unpack(value)
        try:
            operator.setitem(obj.example, meta_index, meta_value)
        except Exception as e:
            unimplemented(f"tensor setitem on meta tensors raised {type(e).__name__}: {e}")
        node = self.output.create_node(
            "call_function", operator.setitem, (obj.proxy, node_index, node_value), {}
        )
        node.meta["example_value"] = None

    def BINARY_SLICE(self, inst):  # 3.12+
        stop = self.pop()
        start = self.pop()
        obj = self.pop()
        self.push(getitem(self, obj, build_slice([start, stop])))

    def STORE_SLICE(self, inst):  # 3.12+
        stop = self.pop()
        start = self.pop()
        obj = self.pop()
        value = self.pop()
        obj.call_method(self, "__setitem__", [build_slice([start, stop]), value], {})

    def DELETE_SUBSCR(self, inst):
        index = self.pop()
        obj = self.pop()
        if isinstance(obj, ListVariable) and index.is_python_constant():
            i = index.as_python_constant()
            if isinstance(obj, DequeVariable) and not isinstance(i, int):
                unimplemented(f"del deque[{i!r}] (TypeError in Python)")
            obj._mutate(self, old_items(obj.items, i), "__delitem__")
            try:
                del obj.items[i]
            except (IndexError, TypeError) as e:
                unimplemented(f"del list[{i!r}] raised {type(e).__name__}")
            if isinstance(obj, DequeVariable):
                obj.state += 1  # Note [Deques: iterators]
            return
        if isinstance(obj, ConstDictVariable):
            obj.call_method(self, "pop", [index], {})
            return
        if is_user_object(obj):  # a Python __delitem__ (a MutableMapping)
            obj.call_method(self, "__delitem__", [index], {})
            return
        unimplemented(f"del {obj}[...]")

    def UNARY_NEGATIVE(self, inst):
        self.push(unary_op(self, operator.neg, self.pop()))

    def UNARY_POSITIVE(self, inst):  # 3.11
        self.push(unary_op(self, operator.pos, self.pop()))

    def UNARY_INVERT(self, inst):
        self.push(unary_op(self, operator.invert, self.pop()))

    def UNARY_NOT(self, inst):
        self.push(ConstantVariable(not self.pop().truthy(self)))

    def TO_BOOL(self, inst):  # 3.13
        v = self.pop()
        want = runtime_asserts.assert_after_to_bool(self, v)  # Note [Asserts: a Python assert ...]
        self.push(ConstantVariable(v.truthy(self) if want is None else want))

    def CALL_INTRINSIC_1(self, inst):  # 3.12+
        name = inst.argrepr
        v = self.pop()
        if name == "INTRINSIC_UNARY_POSITIVE":
            self.push(unary_op(self, operator.pos, v))
        elif name == "INTRINSIC_LIST_TO_TUPLE":
            self.push(TupleVariable(v.unpack_var_sequence(self)))
        else:
            unimplemented(f"CALL_INTRINSIC_1 {name}")

    def COMPARE_OP(self, inst):
        b = self.pop()
        a = self.pop()
        symbol = inst.argval
        fn = COMPARE_OPS.get(symbol)
        if fn is None:
            unimplemented(f"comparison {symbol!r}")
        result = compare_vars(self, fn, a, b)
        if PY313 and inst.arg & 16 and not isinstance(result, TensorVariable):
            result = ConstantVariable(result.truthy(self))
        self.push(result)

    def IS_OP(self, inst):
        b = self.pop()
        a = self.pop()
        fn = operator.is_not if inst.arg else operator.is_
        self.push(compare_vars(self, fn, a, b))

    def CONTAINS_OP(self, inst):
        container = self.pop()
        item = self.pop()
        result = contains(self, container, item)
        if inst.arg:
            result = ConstantVariable(not result.value)
        self.push(result)

    # --- building containers --------------------------------------------------------------------
    def BUILD_TUPLE(self, inst):
        self.push(TupleVariable(self.popn(inst.arg)))

    def BUILD_LIST(self, inst):
        self.push(ListVariable(self.popn(inst.arg)))

    def BUILD_MAP(self, inst):
        flat = self.popn(2 * inst.arg)
        keys = [dict_key(k) for k in flat[::2]]  # (an unhashable key raises TypeError)
        guard_tensor_keys(self, keys)  # Note [Dicts: tensors as keys]
        items = dict(zip(keys, flat[1::2]))
        self.push(ConstDictVariable(items))

    def BUILD_CONST_KEY_MAP(self, inst):  # 3.11, 3.12
        keys = self.pop().as_python_constant()
        values = self.popn(inst.arg)
        self.push(ConstDictVariable(dict(zip(keys, values))))

    def BUILD_SLICE(self, inst):
        # a symbolic bound makes a SliceVariable: Note [Shapes: SymNodeVariable]
        self.push(build_slice(self.popn(inst.arg)))

    def BUILD_STRING(self, inst):
        parts = self.popn(inst.arg)
        self.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))

    def BUILD_SET(self, inst):
        s = SetVariable(())
        for v in self.popn(inst.arg):
            s.values.add(_set_item(v))
        guard_tensor_items(self, s.values)  # Note [Sets: tensors as items]
        self.push(s)

    # Note [Value ops: containers on the stack]
    # The list/set/dict a comprehension or a display builds is new on 3.11 (the comprehension is a
    # frame of its own); on 3.12+ comprehensions are inlined (PEP 709), so after a graph break in
    # the loop the container is an argument of the resume function: each add is a mutation of it
    # (recorded, so the transformed code replays it), and one kiln does not model is a graph break.

    def _stack_container(self, inst, kind):
        """The container LIST_APPEND & co. add to, marked as mutated."""
        target = self.stack[-inst.arg]
        if not isinstance(target, kind):
            unimplemented(f"{inst.opname} to {target}")
        target._mutate(self)
        return target

    def SET_ADD(self, inst):
        v = self.pop()
        s = self._stack_container(inst, SetVariable)
        s.values.add(_set_item(v))
        guard_tensor_items(self, s.values)

    def SET_UPDATE(self, inst):
        v = self.pop()
        self._stack_container(inst, SetVariable).call_method(self, "update", [v], {})

    def LIST_APPEND(self, inst):
        v = self.pop()
        self._stack_container(inst, ListVariable).items.append(v)

    def LIST_EXTEND(self, inst):
        v = self.pop()
        items = v.unpack_var_sequence(self)
        self._stack_container(inst, ListVariable).items.extend(items)

    def LIST_TO_TUPLE(self, inst):  # 3.11
        self.push(TupleVariable(self.pop().unpack_var_sequence(self)))

    def MAP_ADD(self, inst):
        v = self.pop()
        key = dict_key(self.pop())
        d = self._stack_container(inst, ConstDictVariable)
        d.items[key] = v
        guard_tensor_keys(self, [*d.items, key])

    def DICT_UPDATE(self, inst):
        v = self.pop()
        target = self._stack_container(inst, ConstDictVariable)
        if isinstance(v, ConstDictVariable):
            target.items.update(v.items)
        elif _has_keys(v):  # a user mapping: v.keys(), then v[k] for each (as CPython merges)
            items = _mapping_items(self, v)
            if inst.opname == "DICT_MERGE" and any(k in target.items for k in items):
                unimplemented("** of a mapping repeating a keyword (TypeError in Python)")
            target.items.update(items)
        else:
            unimplemented(f"dict update from {v}")

    DICT_MERGE = DICT_UPDATE

    def UNPACK_SEQUENCE(self, inst):
        seq = self.pop()
        items = seq.unpack_var_sequence(self)
        if len(items) != inst.arg:
            unpack_error(self, seq, inst.arg, len(items))
        for item in reversed(items):
            self.push(item)

    def UNPACK_EX(self, inst):
        seq = self.pop()
        items = seq.unpack_var_sequence(self)
        before, after = inst.arg & 0xFF, inst.arg >> 8
        if len(items) < before + after:
            unpack_error(self, seq, before + after, len(items), at_least=True)
        rest = items[before : len(items) - after]
        for item in reversed(items[len(items) - after :]):
            self.push(item)
        self.push(ListVariable(rest))
        for item in reversed(items[:before]):
            self.push(item)

    def FORMAT_VALUE(self, inst):  # 3.11, 3.12
        flags = inst.arg
        spec = self.pop().as_python_constant() if flags & 0x04 else ""
        var = self.pop()
        self.push(ConstantVariable(self._format_text(var, flags & 0x03, spec)))

    def FORMAT_SIMPLE(self, inst):  # 3.13
        self.push(ConstantVariable(self._format_text(self.pop(), 0, "")))

    def FORMAT_WITH_SPEC(self, inst):  # 3.13
        spec = self.pop().as_python_constant()
        self.push(ConstantVariable(self._format_text(self.pop(), 0, spec)))

    def CONVERT_VALUE(self, inst):  # 3.13
        self.push(ConstantVariable(self._format_text(self.pop(), inst.arg, "")))

    def _format_text(self, var, conv, spec):
        """The text of `{var!conv:spec}` in an f-string (conv: 0 none, 1 !s, 2 !r, 3 !a)."""
        if isinstance(var, SymNodeVariable) and self.instructions[self.ip].opname == "POP_TOP":
            # `f"{x.shape[0]}"` as a statement: the text is dropped unseen, and making it would
            # specialise the size (a guard on its value) for nothing
            return ""
        if hasattr(var, "text_of"):  # an object kiln formats itself (a set subclass instance)
            return format(var.text_of(self, conv, spec), spec)
        if is_user_object(var) and conv in (0, 1, 2):
            # a user object: its Python __str__ / __repr__ (object.__format__ is str() for "")
            if conv == 0 and (var.python_type().__format__ is not object.__format__ or spec):
                unimplemented(f"format() of a {var.python_type().__name__} with spec {spec!r}")
            text = user_text(self, var, "__repr__" if conv == 2 else "__str__")
            if text is None:
                unimplemented(f"f-string of a {var.python_type().__name__} (object's default)")
            return format(text.as_python_constant(), spec)
        value = var.as_python_constant()
        value = {0: value, 1: str(value), 2: repr(value), 3: ascii(value)}[conv]
        return format(value, spec)


def _torch_function_on(tx, tensor):
    """Whether `tensor[i] = v` goes through a __torch_function__: of the tensor's subclass, or
    of the user's modes (Tensor.__setitem__ is handed to them as to any Tensor method)."""
    if hasattr(tensor, "torch_function_class"):
        return True
    return modes_traced(tx) and bool(function_modes.active(tx))
