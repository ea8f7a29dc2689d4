"""Containers an autograd.Function's forward changes: left to the real forward at run time.

Note [Autograd functions: containers the forward changes]
`captured.append(t)` in a forward, `captured` a list of the caller's that the forward reaches
itself (a global, a cell): the speculative trace of the forward records a change of a container
outside ctx, which is a side effect. With the "eager" backend the apply node calls the real
`MyFn.apply` at run time, so the real forward makes that very change itself, in eager's order
(during the call). kiln then only has to stop knowing the container: the speculative change is
undone, and the container's variable is replaced by one that breaks the graph on any use, so
code after the apply that reads it runs in Python and sees the list as eager does. This holds
for containers the forward reached first (no variable of the frame held them before: nothing
traced earlier saw their old contents), when containers changed are the forward's only
effects. Other backends trace the forward once, at compile time: there it stays a break.
"""

from kiln.exc import unimplemented
from kiln.frontend.variables.base import VariableTracker, next_serial


def start_serial():
    """The serial of the next variable made (variables made from here on are newer)."""
    return next_serial()


def leave_to_forward(tx, spec, start, name):
    """Whether the forward's only effects are changes of containers it reached first; if so
    they are undone here and the containers are left to the real forward (see the Note)."""
    if tx.output.settings.backend_name != "eager":
        return False
    effects = spec.effects
    if effects.version != spec.version or len(effects.cell_undo) != spec.snapshot.cell_writes:
        return False
    old = spec.snapshot.log
    if any(k not in effects.log or effects.log[k] is not v for k, v in old.items()):
        return False
    new = [k for k in effects.log if k not in old]
    owned = {}
    for key in new:
        kind, var = effects.log[key]
        if kind != "container" or var.source is None or var.serial < start:
            return False
        hit = next((k for k, (_, v) in effects.containers.items() if v is var), None)
        if hit is None:
            return False
        owned[hit] = var
    if not owned:
        return False
    effects.restore(spec.snapshot)
    for key, var in owned.items():
        value = effects.containers[key][0]
        changed = ChangedByForwardVariable(type(value), name, source=var.source)
        effects.containers[key] = (value, changed)
    return True


class ChangedByForwardVariable(VariableTracker):
    """A container the real forward of an autograd.Function changes at run time: any use of it
    after the apply breaks the graph (Note [Autograd functions: containers the forward
    changes])."""

    def __init__(self, typ, name, **kw):
        super().__init__(**kw)
        self.typ, self.name = typ, name

    def python_type(self):
        return self.typ

    def _refuse(self, what):
        """Break on a use: the reason names the container and why its contents are unknown."""
        unimplemented(
            f"{what} a {self.typ.__name__} that {self.name}.forward changes when the graph "
            "runs: its contents are not known while tracing"
        )

    def truthy(self, tx):
        self._refuse("bool() of")

    def unpack_var_sequence(self, tx):
        self._refuse("iteration over")

    def var_getattr(self, tx, name):
        self._refuse(f"attribute {name!r} of")

    def call_method(self, tx, name, args, kwargs):
        self._refuse(f"{name} of")

    def __repr__(self):
        return f"a {self.typ.__name__} changed by {self.name}.forward at run time"
