"""`kiln.mark_static` and `kiln.mark_dynamic` called inside a compiled frame."""

from kiln.exc import ForbiddenInTrace, unimplemented
from kiln.frontend.variables.base import PythonValueVariable
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.tensor import TensorVariable


class MarkStaticVariable(PythonValueVariable):
    """`kiln.mark_static(t, dim)` called in traced code: t's sizes at `dim` (every one when None)
    become static for this trace, as comptime.force_static makes them (Note [Torch: comptime
    static sizes]); it returns t, as in eager. A module argument breaks the graph."""

    def call_function(self, tx, args, kwargs):
        from_kw = [kwargs.get(k) for k in ("t", "dim") if k in kwargs]
        args = [*args, *from_kw]
        t = args[0] if args else None
        dim = args[1] if len(args) > 1 else ConstantVariable(None)
        if len(args) > 2 or not isinstance(t, TensorVariable) or not dim.is_python_constant():
            unimplemented("kiln.mark_static in traced code on something other than a tensor")
        dim = dim.as_python_constant()
        rank = t.example.dim()
        dims = range(rank) if dim is None else [dim] if isinstance(dim, int) else list(dim)
        for d in dims:
            if not isinstance(d, int) or not -rank <= d < rank:
                unimplemented(f"kiln.mark_static of dim {d!r} (raises in Python)")
            size = t.call_method(tx, "size", [ConstantVariable(d)], {})
            if isinstance(size, SymNodeVariable):
                if not size.value.env.substitute(size.value.expr).is_Integer:
                    size.evaluate()
        return t

    def reconstruct(self, cg):
        cg.load_object(self.value)


class MarkDynamicVariable(PythonValueVariable):
    """`kiln.mark_dynamic` reached in traced code: it marks inputs for the next compilation, which
    has no meaning inside one, so the compile raises ForbiddenInTrace (torch raises its
    AssertionError "Attempt to trace forbidden callable"); not reached, it costs nothing."""

    def call_function(self, tx, args, kwargs):
        raise ForbiddenInTrace(
            "kiln.mark_dynamic called in compiled code: Attempt to trace forbidden callable "
            "(it marks a tensor for the next compilation; call it before the compiled function)"
        )

    def reconstruct(self, cg):
        cg.load_object(self.value)
