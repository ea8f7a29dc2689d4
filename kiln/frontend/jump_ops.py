"""Opcode handlers for jumps, branches and iteration (a mixin of InstructionTranslatorBase).

if x is None:    POP_JUMP_IF_NONE   -> answered from the traced value (a constant, or a type)
for i in xs:     GET_ITER; FOR_ITER -> ListIteratorVariable over xs's items, one per pass
yield from it    SEND               -> the next item of a known iterator, else its return value
"""

import sys

from kiln.bytecode import FOR_ITER_SKIPS
from kiln.exc import unimplemented
from kiln.frontend.variables import runtime_asserts
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, ListIteratorVariable
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.user_protocol import (
    is_user_iterator,
    is_user_object,
    user_iter,
    user_next,
)

PY311 = sys.version_info[:2] == (3, 11)
PY312 = sys.version_info[:2] == (3, 12)


class JumpOpsMixin:
    """Jumps, conditional branches, `for` loops and `yield from`."""

    def JUMP_FORWARD(self, inst):
        self.jump(inst)

    JUMP_BACKWARD = JUMP_FORWARD
    JUMP_BACKWARD_NO_INTERRUPT = JUMP_FORWARD
    JUMP = JUMP_FORWARD
    JUMP_NO_INTERRUPT = JUMP_FORWARD

    def _pop_jump_if(self, inst, want):
        v = self.pop()
        taken = runtime_asserts.checked_branch(self, v, want, inst.target_index)
        if taken is None:  # (Notes [Asserts: a Python assert on a tensor], [Asserts: a branch
            taken = v.truthy(self) == want  # that only raises])
        if taken:
            self.jump(inst)

    def POP_JUMP_IF_TRUE(self, inst):
        self._pop_jump_if(inst, True)

    def POP_JUMP_IF_FALSE(self, inst):
        self._pop_jump_if(inst, False)

    POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_IF_TRUE  # 3.11
    POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_IF_TRUE
    POP_JUMP_FORWARD_IF_FALSE = POP_JUMP_IF_FALSE
    POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_IF_FALSE

    def _is_none(self, v):
        if isinstance(v, ConstantVariable):
            return v.value is None
        if v.is_python_constant() or isinstance(v, (TensorVariable, BaseListVariable)):
            return False
        if getattr(v, "value", None) is not None or v.source is not None:
            return False
        try:
            typ = v.python_type()  # (an object made while tracing: its class is known)
        except Exception:
            typ = None
        if typ is not None and typ is not type(None):
            return False
        unimplemented(f"`is None` of {v}")

    def POP_JUMP_IF_NONE(self, inst):
        if self._is_none(self.pop()):
            self.jump(inst)

    def POP_JUMP_IF_NOT_NONE(self, inst):
        if not self._is_none(self.pop()):
            self.jump(inst)

    POP_JUMP_FORWARD_IF_NONE = POP_JUMP_IF_NONE  # 3.11
    POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_IF_NONE
    POP_JUMP_FORWARD_IF_NOT_NONE = POP_JUMP_IF_NOT_NONE
    POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_IF_NOT_NONE

    def JUMP_IF_FALSE_OR_POP(self, inst):  # 3.11
        if not self.stack[-1].truthy(self):
            self.jump(inst)
        else:
            self.pop()

    def JUMP_IF_TRUE_OR_POP(self, inst):  # 3.11
        if self.stack[-1].truthy(self):
            self.jump(inst)
        else:
            self.pop()

    def GET_ITER(self, inst):
        obj = self.pop()
        if is_user_object(obj):  # Note [Objects: iterator protocol]
            it = user_iter(self, obj)
            if it is not None:
                self.push(it)
                return
        self.push(ListIteratorVariable.over(self, obj))  # (a list's sees its appends)

    def FOR_ITER(self, inst):
        it = self.stack[-1]
        if is_user_iterator(it):
            item = user_next(self, it)
        elif not isinstance(it, ListIteratorVariable):
            unimplemented(f"iteration over {it}")
        else:
            item = it.next_item(self)
        if item is not None:
            self.push(item)
            return
        # exhausted: 3.11 pops the iterator and jumps to the target; 3.12 also skips END_FOR at
        # the target; 3.13 skips END_FOR and the POP_TOP after it.
        self.pop()
        self.jump(inst)
        self.ip += FOR_ITER_SKIPS

    def END_FOR(self, inst):  # 3.12: pops two; 3.13: pops one
        self.pop()
        if PY312:
            self.pop()

    def POP_ITER(self, inst):
        self.pop()

    def GET_YIELD_FROM_ITER(self, inst):
        v = self.pop()
        if isinstance(v, ListIteratorVariable):
            self.push(v)
        else:
            self.push(ListIteratorVariable(v.unpack_var_sequence(self)))

    def SEND(self, inst):
        """`yield from it`: the next item of a known iterator, else its return value.

        [it, None] -> [it, item], or exhausted: 3.11 [value] and a jump past the loop; 3.12+
        [it, value] and a jump to END_SEND, which drops `it`."""
        v = self.pop()
        it = self.stack[-1]
        sends = getattr(it, "steps_lazily", False) and hasattr(it, "send")  # a generator
        if not sends and not (isinstance(v, ConstantVariable) and v.value is None):
            unimplemented("sending a value into an iterator that is no generator")
        if not isinstance(it, ListIteratorVariable):
            unimplemented(f"yield from {it}")
        item = it.step(self, value=v) if sends else it.next_item(self)
        if item is not None:
            self.push(item)
            return
        value = (it.returned if sends else None) or ConstantVariable(None)
        if PY311:
            self.stack[-1] = value
        else:
            self.push(value)
        self.jump(inst)

    def END_SEND(self, inst):  # 3.12+: [it, value] -> [value]
        value = self.pop()
        self.pop()
        self.push(value)

    def RETURN_CONST(self, inst):  # 3.12+
        self.push(ConstantVariable(inst.argval))
        self.RETURN_VALUE(inst)
