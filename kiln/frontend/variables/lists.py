"""Sequences: tuple, list, torch.Size, range, and iterators over them."""

import operator

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable


class BaseListVariable(VariableTracker):
    """A sequence whose items are VariableTrackers."""

    container = tuple

    def __init__(self, items, **kw):
        super().__init__(**kw)
        self.items = list(items)

    def python_type(self):
        return self.container

    def is_python_constant(self):
        return all(i.is_python_constant() for i in self.items)

    def as_python_constant(self):
        return self.container(i.as_python_constant() for i in self.items)

    def truthy(self, tx):
        return bool(self.items)

    def unpack_var_sequence(self, tx):
        return list(self.items)

    def getitem(self, tx, index):
        if isinstance(index, slice):
            return type(self)(self.items[index])
        try:
            return self.items[index]
        except IndexError:
            unimplemented(f"{self.container.__name__} index {index} out of range")

    def call_method(self, tx, name, args, kwargs):
        from kiln.frontend.variables.builtin import compare_vars

        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0].as_python_constant())
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "index" and len(args) == 1:
            from kiln.frontend.variables.builtin import _identical

            for i, item in enumerate(self.items):
                # like list.index: identity first, then ==
                if _identical(item, args[0]) or compare_vars(tx, operator.eq, item, args[0]).truthy(
                    tx
                ):
                    return ConstantVariable(i)
            unimplemented("list.index: value not found")
        if name == "count" and len(args) == 1:
            n = sum(compare_vars(tx, operator.eq, i, args[0]).truthy(tx) for i in self.items)
            return ConstantVariable(n)
        unimplemented(f"{self.container.__name__}.{name}")

    def reconstruct(self, cg):
        if self.source is not None:  # never mutated while tracing: the object itself
            self.source.reconstruct(cg)
            return
        for item in self.items:
            cg.reconstruct(item)
        cg.extend(self._build(len(self.items)))

    def _build(self, n):
        return emit.build_tuple(n)

    def __repr__(self):
        return f"{type(self).__name__}({self.items!r})"


class TupleVariable(BaseListVariable):
    """A tuple; `tuple_cls` is a tuple subclass with named fields (torch.return_types.max ...)."""

    container = tuple

    def __init__(self, items, tuple_cls=tuple, **kw):
        super().__init__(items, **kw)
        self.tuple_cls = tuple_cls

    def python_type(self):
        return self.tuple_cls

    def var_getattr(self, tx, name):
        fields = getattr(self.tuple_cls, "__match_args__", None) or getattr(
            self.tuple_cls, "_fields", ()
        )
        if name in fields:
            return self.items[list(fields).index(name)]
        return super().var_getattr(tx, name)

    def reconstruct(self, cg):
        if self.tuple_cls is tuple or self.source is not None:
            return super().reconstruct(cg)
        make = getattr(self.tuple_cls, "_make", None)  # namedtuple: cls._make(iterable)
        cg.load_object(make if make is not None else self.tuple_cls, push_null=True)
        super().reconstruct(cg)
        cg.extend(emit.call(1))


class SizeVariable(TupleVariable):
    """`tensor.shape`: a tuple of sizes (ints while every size is specialised)."""

    def __init__(self, items, **kw):
        super().__init__(items, **kw)

    def python_type(self):
        import torch

        return torch.Size

    def as_python_constant(self):
        import torch

        return torch.Size(i.as_python_constant() for i in self.items)

    def getitem(self, tx, index):
        if isinstance(index, slice):
            return SizeVariable(self.items[index])
        return super().getitem(tx, index)

    def call_method(self, tx, name, args, kwargs):
        if name == "numel" and not args:
            n = 1
            for i in self.items:
                n *= i.as_python_constant()
            return ConstantVariable(n)
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg):
        cg.load_object(self.as_python_constant())


class ListVariable(BaseListVariable):
    container = list

    def _build(self, n):
        return emit.build_list(n)

    def _mutate(self, tx):
        tx.output.side_effects.mutate_container(self)

    def call_method(self, tx, name, args, kwargs):
        if name == "append" and len(args) == 1:
            self._mutate(tx)
            self.items.append(args[0])
            return ConstantVariable(None)
        if name == "extend" and len(args) == 1:
            self._mutate(tx)
            self.items.extend(args[0].unpack_var_sequence(tx))
            return ConstantVariable(None)
        if name == "insert" and len(args) == 2:
            self._mutate(tx)
            self.items.insert(args[0].as_python_constant(), args[1])
            return ConstantVariable(None)
        if name == "pop" and len(args) <= 1:
            self._mutate(tx)
            if not self.items:
                unimplemented("pop from an empty list")
            return self.items.pop(args[0].as_python_constant() if args else -1)
        if name == "reverse" and not args:
            self._mutate(tx)
            self.items.reverse()
            return ConstantVariable(None)
        if name == "copy" and not args:
            return ListVariable(self.items)
        if name == "clear" and not args:
            self._mutate(tx)
            self.items.clear()
            return ConstantVariable(None)
        if name == "__setitem__" and len(args) == 2:
            self._mutate(tx)
            index = args[0].as_python_constant()
            if isinstance(index, slice):
                self.items[index] = args[1].unpack_var_sequence(tx)
            else:
                self.items[index] = args[1]
            return ConstantVariable(None)
        return super().call_method(tx, name, args, kwargs)


class RangeVariable(BaseListVariable):
    """range(...) of constants, kept as its items."""

    container = list

    def __init__(self, value, **kw):
        super().__init__([ConstantVariable(v) for v in value], **kw)
        self.value = value

    def python_type(self):
        return range

    def as_python_constant(self):
        return self.value

    def getitem(self, tx, index):
        r = self.value[index]
        return RangeVariable(r) if isinstance(r, range) else ConstantVariable(r)

    def reconstruct(self, cg):
        cg.extend(emit.load_const(self.value))


class ListIteratorVariable(VariableTracker):
    """An iterator over known items (a list, tuple, range, zip, enumerate ... of traced values)."""

    def __init__(self, items, **kw):
        super().__init__(**kw)
        self.items = list(items)
        self.index = 0

    def python_type(self):
        return type(iter([]))

    def next_item(self):
        """The next item, or None when exhausted."""
        if self.index >= len(self.items):
            return None
        item = self.items[self.index]
        self.index += 1
        return item

    def unpack_var_sequence(self, tx):
        rest = self.items[self.index :]
        self.index = len(self.items)
        return rest

    def call_method(self, tx, name, args, kwargs):
        if name == "__next__":
            item = self.next_item()
            if item is None:
                unimplemented("StopIteration while tracing")
            return item
        unimplemented(f"iterator.{name}")

    def reconstruct(self, cg):
        for item in self.items[self.index :]:
            cg.reconstruct(item)
        cg.extend(emit.build_tuple(len(self.items) - self.index))
        cg.extend(emit.get_iter())
