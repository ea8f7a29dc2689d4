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
from kiln.frontend.side_effects import DELETED, _own_dict
from kiln.frontend.variables.base import VariableTracker, next_serial
from kiln.frontend.variables.constant import is_literal
from kiln.frontend.variables.user_defined import UserDefinedObjectVariable


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


# Note [Autograd functions: stores undone before returning]
# A store that the forward or the backward itself undoes before it returns leaves nothing
# behind: eager's state after the call is the state before it. `with set_mode("x"): ...` (a
# context manager that saves an attribute, sets it and puts the old value back), `depth += 1 ...
# depth -= 1`. Reads in between see the stored value while tracing, as the real code does when
# it runs. So after each check (the forward's, then the backward's), when every change it
# recorded is an attribute store on an object of the program whose final value is the
# attribute's value before the check (the same object; for an immutable constant an equal one of
# the same type), those stores are forgotten. This holds for every backend: "eager" calls the
# real forward and backward, which make and undo the stores themselves at run time; the
# ATen-tracing backends run them once, at compile time (Note [Autograd functions: the backward
# is checked too]), and their graphs make no store, which is the net effect. Anything else (a
# store left changed, a setter that counts its calls, a container changed, a print, a global or
# cell written, a random draw) stays an effect, handled as before. Between the two stores the
# attribute does not hold the new value when a compiled graph runs, as nothing but the traced
# code itself runs in that window.
class StoresBefore:
    """Where the side effects stood before an autograd.Function's forward or backward was
    checked."""

    def __init__(self, tx):
        self.effects = tx.output.side_effects
        self.snapshot, self.version = self.effects.snapshot(), self.effects.version

    def drop_if_undone(self):
        """Forget the checked code's stores when each one was undone before it returned (see
        the Note); otherwise leave them, for the caller to judge."""
        effects, snap = self.effects, self.snapshot
        if effects.version != self.version or len(effects.cell_undo) != snap.cell_writes:
            return
        if len(effects.draws) != snap.draws or len(effects.data_undo) != snap.data_writes:
            return
        if any(k not in effects.log for k in snap.log):
            return
        changed = [k for k, v in effects.log.items() if snap.log.get(k) is not v]
        if changed and all(self._undone(k) for k in changed):
            effects.restore(snap)

    def _undone(self, key):
        """Whether this log entry stores back the value its attribute had before the check."""
        kind, payload = self.effects.log[key]
        if kind != "attr" or key[0] != "attr":
            return False
        obj_var, name, value, raw = payload
        if raw is not False or value is DELETED:
            return False
        before = self.snapshot.log.get(key)
        if before is not None:  # (stored earlier in the frame: that value again)
            return value is before[1][2]
        state = _own_dict(obj_var.value)
        if not isinstance(state, dict) or name not in state:
            return False
        return _holds(self.effects, value, state[name])


def _holds(effects, var, real):
    """Whether the variable stands for this very value (an equal constant of the same type)."""
    if is_literal(real):
        if not var.is_python_constant():
            return False
        c = var.as_python_constant()
        return c is real or (type(c) is type(real) and c == real and repr(c) == repr(real))
    hit = effects.containers.get(id(real))
    if hit is not None:
        return hit[1] is var
    return isinstance(var, UserDefinedObjectVariable) and var.value is real
