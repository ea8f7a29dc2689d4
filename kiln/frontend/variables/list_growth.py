"""Whether code that ran ahead of time may have read a list it now grows (list.extend)."""

from kiln.exc import unimplemented
from kiln.frontend.variables.constant import ConstantVariable


# Note [Lists: growing by an iterator that ran ahead]
# list.extend / deque.extend(left) over an iterator that is no list or tuple take its items one at
# a time, appending each before the next is made: a generator or map whose code reads the list
# (`y.extend(y[-1] + z for z in r)`) sees it grow. A generator is stepped that way (Note
# [Generators: lazy]); a map over items known at once runs ahead of time, so its items were made
# from the list as it was before. That is a break, not a different list, unless the code cannot reach the list: the list was made in
# the frame (no global or attribute leads to it) and is not among what the code was given (its
# arguments, the cells it closes over, the containers and closures found in them). `reach` holds
# those; an iterator without it (or an object kiln cannot look into) counts as reaching.
def items_for_growing(tx, var, target, what):
    """The items `var` adds to `target` (Note [Lists: growing by an iterator that ran ahead])."""
    if getattr(var, "ran_ahead", False) and var.index < len(var.items):
        reach = getattr(var, "reach", None)
        if target.source is not None or reach is None or _reaches(reach, target):
            # no resume at this point: the rebuilt iterator would hand over the items made ahead
            _unimplemented_frame(
                f"{what} of an iterator whose code ran ahead of time and may read it"
            )
    return var.unpack_var_sequence(tx)


def _unimplemented_frame(msg):
    """A break that runs the whole frame in Python (nothing before it is kept compiled)."""
    try:
        unimplemented(msg)
    except Exception as e:
        e.no_resume = True
        raise


def _reaches(values, target):
    """Whether `target` may be found from `values` (Note [Lists: growing by an iterator...]).
    An object from outside the frame (with a source) that kiln cannot look into may hold
    anything that existed before, but not a `target` made in the frame: only a store (recorded
    as a side effect, and counted by the callers) could have put it there."""
    made_here = getattr(target, "source", None) is None
    seen, todo = set(), list(values)
    while todo:
        v = todo.pop()
        if v is target:
            return True
        if v is None or id(v) in seen or isinstance(v, ConstantVariable):
            continue
        seen.add(id(v))
        if hasattr(v, "tx") and hasattr(v, "name"):  # a cell of a traced frame: its value now
            todo.append(v.tx.symbolic_locals.get(v.name))
        elif type(v).__name__ == "LazyGeneratorVariable":  # its suspended frame
            g = v.gen
            refs = [r for r in g.closure.values() if not isinstance(r, tuple)]
            todo.extend([*g.symbolic_locals.values(), *g.stack, *refs])
        elif type(v).__name__ in (
            "FrameCellVariable",
            "TensorVariable",
            "RangeVariable",
            "NullVariable",
            "SymNodeVariable",
        ):
            continue  # a real cell holds no object made in the frame; tensors hold no lists
        elif isinstance(getattr(v, "items", None), list):  # a list, tuple, iterator of items
            todo.extend(v.items)
        elif isinstance(getattr(v, "items", None), dict):  # a dict's values
            todo.extend(v.items.values())
        elif type(v).__name__ == "NestedUserFunctionVariable":
            todo.extend([*v.closure.values(), *(v.defaults or ())])
        elif type(v).__name__ in ("UserFunctionVariable", "BuiltinVariable", "TorchVariable"):
            continue  # reaches globals only, and the list is not reachable from globals
        elif type(v).__name__ == "NewObjectVariable" and v.source is None:
            todo.extend([*v.attrs.values(), *(v.dict_items or {}).values()])
        elif made_here and getattr(v, "source", None) is not None:
            continue  # (see the docstring)
        else:
            return True  # an object kiln does not look into
    return False
