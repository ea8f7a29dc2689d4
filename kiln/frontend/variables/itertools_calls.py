"""itertools calls while tracing: finite iterators over traced items, lazy over live sources
(Note [Iterators: lazy over live sources]) or built at once."""

import itertools
import operator

from kiln import config
from kiln.exc import Unsupported, unimplemented
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.endless_iters import endless_call
from kiln.frontend.variables.lists import ListIteratorVariable, TupleVariable
from kiln.frontend.variables.live_iters import LazyIteratorVariable, lazy_islice, lazy_sources_ok
from kiln.frontend.variables.operators import binary_op

CLASSES = (
    itertools.accumulate,
    itertools.islice,
    itertools.repeat,
    itertools.zip_longest,
    itertools.starmap,
    itertools.pairwise,
    itertools.cycle,
)
ITERTOOLS = frozenset((itertools.product, itertools.chain, *CLASSES))


def is_none_const(v):
    """Whether a traced value is the constant None."""
    return v.is_python_constant() and v.as_python_constant() is None


def itertools_call(tx, fn, args, kwargs):
    """fn(*args, **kwargs) for fn in ITERTOOLS; its kind recorded (Note [Iterators: itertools
    kinds])."""
    if fn is itertools.product and set(kwargs) <= {"repeat"}:
        lists = [a.unpack_var_sequence(tx) for a in args]
        repeat = kwargs["repeat"].as_python_constant() if kwargs else 1
        rows = itertools.product(*lists, repeat=repeat)
        it = ListIteratorVariable([TupleVariable(list(p)) for p in rows])
    elif fn is itertools.chain and not kwargs:
        if lazy_sources_ok(args):
            return LazyIteratorVariable(tx, itertools.chain, args, (0,))
        it = ListIteratorVariable([i for a in args for i in a.unpack_var_sequence(tx)])
    elif fn in (itertools.product, itertools.chain):
        unimplemented(f"itertools.{fn.__name__} with these arguments")
    else:
        it = endless_call(tx, fn, args, kwargs)
        if it is None:
            it = _more_call(tx, fn, args, kwargs)
    it.kind = fn
    return it


def _is_iterator(var):
    """Whether `var` is an iterator (consumed by iterating it), not a sequence."""
    try:
        return hasattr(var.python_type(), "__next__")
    except Unsupported:
        return True


def _more_call(tx, fn, args, kwargs):
    """The other itertools iterators over traced items (lazy over live sources, else built at once)."""
    if fn is itertools.repeat and not kwargs and len(args) == 2:
        times = args[1].as_python_constant()
        if type(times) is not int or times > config.range_items_limit:
            unimplemented(f"itertools.repeat(x, {times!r}) (its items are kept one by one)")
        it = ListIteratorVariable([args[0]] * times)
        it.repeated = args[0]
        return it
    if fn is itertools.islice and not kwargs and 2 <= len(args) <= 4:
        if lazy_sources_ok(args[:1]):
            bounds = [a.as_python_constant() for a in args[1:]]
            it = lazy_islice(tx, args[0], bounds)
            if it is not None:
                return it
        if _is_iterator(args[0]):
            # (it takes items from it one by one as it is iterated, up to its stop)
            unimplemented("itertools.islice over an iterator")
        items = args[0].unpack_var_sequence(tx)
        bounds = [a.as_python_constant() for a in args[1:]]
        return ListIteratorVariable(items[slice(*bounds)])
    if fn is itertools.zip_longest and set(kwargs) <= {"fillvalue"}:
        fill = kwargs.get("fillvalue", ConstantVariable(None))
        if args and lazy_sources_ok(args):  # Note [Iterators: lazy over live sources]
            return LazyIteratorVariable(tx, fn, args, (False,) * len(args), fn=fill)
        seqs = [a.unpack_var_sequence(tx) for a in args]
        rows = itertools.zip_longest(*seqs, fillvalue=fill)
        return ListIteratorVariable([TupleVariable(list(r)) for r in rows])
    if fn is itertools.starmap and not kwargs and len(args) == 2:
        if lazy_sources_ok(args[1:]):
            return LazyIteratorVariable(tx, fn, args[1:], fn=args[0])
        rows = args[1].unpack_var_sequence(tx)
        return ListIteratorVariable(
            [args[0].call_function(tx, r.unpack_var_sequence(tx), {}) for r in rows]
        )
    if fn is itertools.pairwise and not kwargs and len(args) == 1:
        if lazy_sources_ok(args):
            return LazyIteratorVariable(tx, fn, args, (None, False))
        items = args[0].unpack_var_sequence(tx)
        return ListIteratorVariable([TupleVariable([a, b]) for a, b in zip(items, items[1:])])
    if fn is itertools.accumulate and "func" in kwargs and len(args) == 1:
        kwargs = dict(kwargs)  # `accumulate(l, func=f)`: f is its second argument
        args = [args[0], kwargs.pop("func")]
    if fn is itertools.accumulate and set(kwargs) <= {"initial"} and 1 <= len(args) <= 2:
        if lazy_sources_ok(args[:1]):
            func = None if len(args) == 1 or is_none_const(args[1]) else args[1]
            initial = kwargs.get("initial")
            initial = None if initial is None or is_none_const(initial) else initial
            return LazyIteratorVariable(tx, fn, args[:1], (None, initial), fn=func)
        items = args[0].unpack_var_sequence(tx)
        out = []
        acc = kwargs.get("initial")
        if acc is not None and not is_none_const(acc):
            out.append(acc)
        else:
            acc = None
        for item in items:
            if acc is None:
                acc = item
            elif len(args) == 2:
                acc = args[1].call_function(tx, [acc, item], {})
            else:
                acc = binary_op(tx, operator.add, acc, item)
            out.append(acc)
        return ListIteratorVariable(out)
    unimplemented(f"itertools.{fn.__name__} with these arguments")
