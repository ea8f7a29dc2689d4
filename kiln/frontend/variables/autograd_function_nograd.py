"""`MyFn.apply(...)` with grad mode off and an argument the apply node cannot carry: its forward
traced in the frame (Note [Autograd functions: apply with grad mode off])."""

from kiln.frontend.variables.lists import TupleVariable
from kiln.frontend.variables.tensor import TensorVariable

# Note [Autograd functions: apply with grad mode off]
# With grad mode off, Function.apply records no backward: it runs forward (under no_grad) with a
# ctx that nothing reads afterwards, and returns its outputs, each top-level tensor output that
# is one of the inputs as a new view of it (`view_as`; one marked dirty as it is). So when an
# argument is something the one-node form cannot pass (a ModuleList: Note [Autograd functions:
# one node, forward checked]), the forward is traced in the frame like any user function, its
# effects included, and its outputs are fixed up that way. The frame's grad mode is guarded, so
# the graph only serves calls made with grad mode off.


def apply_without_grad(tx, apply_var, forward, setup, ctx, args):
    """The result of `apply_var.cls.apply(*args)` traced as its forward (grad mode off)."""
    out = apply_var._trace_forward(tx, forward, setup, ctx, args)
    items = out.items if isinstance(out, TupleVariable) else [out]
    fixed = [_output(tx, v, args, ctx) for v in items]
    return TupleVariable(fixed) if isinstance(out, TupleVariable) else fixed[0]


def _output(tx, v, args, ctx):
    """An input returned by forward comes back as a view of it (unless marked dirty)."""
    if not isinstance(v, TensorVariable) or not any(v is a for a in args):
        return v
    if any(v is d for d in ctx.dirty):
        return v
    return v.call_method(tx, "view_as", [v], {})
