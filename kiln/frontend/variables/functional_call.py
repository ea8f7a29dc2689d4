"""torch.func.functional_call traced as the module's call with the given tensors in its state.

Note [Modules: functional_call]
`functional_call(module, {name: tensor, ...}, args, kwargs)` swaps the tensors in for the
module's parameters and buffers by their dotted names (`"a.b.weight"`), calls the module and
swaps the originals back (torch/nn/utils/stateless.py). Traced, nothing is swapped: while the
call is traced, a read of `weight` of submodule `a.b` (NNModuleVariable.var_getattr, `_child`)
gives the tensor that stands in for it (`OutputGraph.module_overrides`, keyed by the submodule
and the name), and no guard is put on the original, which the call never reads. So meta-learning
loops, ensembles (`stack_module_state`) and per-sample-gradient code trace into one graph with
the given tensors as its inputs.

What the swap would do is done as torch does it:
- the names resolve through `get_submodule` (attribute reads, guarded as any), and the dicts of
  each submodule touched are guarded by their keys (a parameter added or removed recompiles);
  a name that is neither a parameter nor a buffer stands in for a plain attribute, set or not;
- with tie_weights (the default), a name tied to others (one Parameter under several names, as
  an LM head tied to its embedding) stands in for all of them, guarded as tied (`a is b`); two
  different values for one tied tensor raise ValueError as in eager;
- a list of dicts is merged (a name in two of them raises ValueError); `strict` checks missing
  and unexpected names and raises RuntimeError with torch's text;
- args that are not a tuple are one argument; kwargs None is none.
Left to eager (a break at the call): values that are not tensors, a name of a class attribute
(a property: parametrized modules), listings of an overridden module's parameters in the call
(`self.parameters()`, `state_dict()`), and a forward that assigns an overridden name (the swap
back and the write into the user's dict).
"""

import inspect

import torch

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.variables.base import PythonValueVariable
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import BaseListVariable, TupleVariable
from kiln.frontend.variables.nn_module import _MISSING, NNModuleVariable, _class_attr
from kiln.frontend.variables.tensor import TensorVariable


class FunctionalCallVariable(PythonValueVariable):
    """torch.func.functional_call itself: its calls are traced (the Note above)."""

    def call_function(self, tx, args, kwargs):
        return functional_call(tx, self.value, args, kwargs)

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        cg.load_object(self.value)


def _constant(var, what):
    if not var.is_python_constant():
        unimplemented(f"functional_call with a {what} that is not a constant")
    return var.as_python_constant()


def _is_dict(var):
    """A dict or an OrderedDict (a state_dict()) of name -> value."""
    return isinstance(var, ConstDictVariable) and issubclass(var.python_type(), dict)


def _merged_state(tx, dicts):
    """{name: variable} from the dict, or list/tuple of dicts, functional_call was given."""
    if _is_dict(dicts):
        parts = [dicts]
    elif isinstance(dicts, BaseListVariable) and issubclass(dicts.python_type(), (list, tuple)):
        parts = dicts.unpack_var_sequence(tx)
        if not all(_is_dict(d) for d in parts):
            raise_observed(
                tx,
                ValueError,
                "Expected all elements of parameter_and_buffer_dicts to be dictionaries",
            )
    else:
        raise_observed(
            tx,
            ValueError,
            "Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, "
            f"but got {dicts.python_type()}",
        )
    state, repeated = {}, []
    for d in parts:
        for name, value in d.items.items():
            if not isinstance(name, str):
                unimplemented("functional_call with a state name that is not a string")
            if name in state and name not in repeated:
                repeated.append(name)
            state[name] = value
    if repeated:
        raise_observed(
            tx,
            ValueError,
            f"{repeated} appeared in multiple dictionaries; behavior of functional call is "
            "ambiguous",
        )
    return state


def _submodule(tx, module, prefix):
    """The variable of `module.get_submodule(prefix)`, read attribute by attribute."""
    var = module
    for part in prefix.split(".") if prefix else ():
        var = var.var_getattr(tx, part)
        if type(var) is not NNModuleVariable:
            unimplemented(f"functional_call: {prefix!r} is not a submodule")
    return var


def _tied_groups(tx, module, state):
    """Every name tied to a given one, mapped to the given name's value (torch's untying)."""
    named = dict(module.value.named_parameters(remove_duplicate=False))
    named.update(module.value.named_buffers(remove_duplicate=False))
    by_tensor = {}
    for name, tensor in named.items():
        by_tensor.setdefault(id(tensor), []).append(name)
    untied = dict(state)
    for names in by_tensor.values():
        given = [n for n in names if n in state]
        if len(names) < 2 or not given:
            continue
        first = _state_source(tx, module, names[0])
        for other in names[1:]:  # (tied when traced: recompiles once untied)
            tx.output.guards.add(GuardKind.ALIASING, _state_source(tx, module, other), first)
        if len({id(state[n]) for n in given}) > 1:
            unimplemented("functional_call with different values for tied names")
        for n in names:
            untied[n] = state[given[0]]
    return untied


def _state_source(tx, module, name):
    prefix, _, attr = name.rpartition(".")
    sub = _submodule(tx, module, prefix)
    kind = "_parameters" if attr in sub.value._parameters else "_buffers"
    return sub._sub_source(kind, attr)


def _overrides(tx, module, state):
    """{(id(submodule), name): variable} for the names the call swaps in, and {id: submodule}."""
    overrides, touched = {}, {}
    for name, value in state.items():
        if not isinstance(value, TensorVariable):
            unimplemented(f"functional_call with a non-tensor value for {name!r}")
        prefix, _, attr = name.rpartition(".")
        sub = _submodule(tx, module, prefix)
        touched[id(sub.value)] = sub
        mod = sub.value
        own = attr in mod._parameters or attr in mod._buffers
        if not own and _class_attr(type(mod), attr) is not _MISSING:
            unimplemented(f"functional_call over {type(mod).__name__}.{attr}, a class attribute")
        if not own and attr in mod.__dict__ and not isinstance(mod.__dict__[attr], torch.Tensor):
            unimplemented(f"functional_call over {type(mod).__name__}.{attr}, not a tensor")
        overrides[(id(mod), attr)] = value
    for sub in touched.values():
        sub._guard_attr_dicts(tx)
    return overrides, touched


def _check_keys(tx, module, state):
    """strict=True: torch's missing/unexpected names error (NamedMemberAccessor.check_keys),
    with the state dicts of every submodule guarded by their keys."""
    mod = module.value
    for prefix, _ in mod.named_modules(remove_duplicate=False):
        _submodule(tx, module, prefix)._guard_attr_dicts(tx)
    names = {n for n, _ in mod.named_parameters(remove_duplicate=False)}
    names |= {n for n, _ in mod.named_buffers(remove_duplicate=False)}
    missing = sorted(names - set(state))
    unexpected = sorted(set(state) - names)
    messages = []
    if unexpected:
        messages.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
    if missing:
        messages.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
    if messages:
        raise_observed(
            tx,
            RuntimeError,
            "Error(s) in reparametrizing for {}:\n\t{}".format(
                mod._get_name(), "\n\t".join(messages)
            ),
        )


def functional_call(tx, fn, args, kwargs):
    """`torch.func.functional_call(...)` traced (the Note above)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        unimplemented("functional_call called with the wrong arguments (torch raises)")
    module = bound.arguments["module"]
    if type(module) is not NNModuleVariable or module.source is None:
        unimplemented("functional_call of a module kiln does not track by source")
    scripted = isinstance(getattr(module.value, "_c", None), torch._C.ScriptModule)
    if scripted or isinstance(module.value, torch.nn.DataParallel):
        unimplemented("functional_call of a scripted or DataParallel module (eager raises)")
    state = _merged_state(tx, bound.arguments["parameter_and_buffer_dicts"])
    tie = _constant(bound.arguments.get("tie_weights", ConstantVariable(True)), "tie_weights")
    strict = _constant(bound.arguments.get("strict", ConstantVariable(False)), "strict")
    if tie:
        state = _tied_groups(tx, module, state)
    if strict:
        _check_keys(tx, module, state)
    overrides, touched = _overrides(tx, module, state)
    call_args = bound.arguments.get("args", ConstantVariable(None))
    if isinstance(call_args, ConstantVariable) and call_args.value is None:
        call_args = []
    elif isinstance(call_args, TupleVariable):
        call_args = call_args.unpack_var_sequence(tx)
    else:
        call_args = [call_args]
    call_kwargs = bound.arguments.get("kwargs", ConstantVariable(None))
    if isinstance(call_kwargs, ConstantVariable) and call_kwargs.value is None:
        call_kwargs = {}
    elif isinstance(call_kwargs, ConstDictVariable):
        call_kwargs = dict(call_kwargs.items)
    else:
        unimplemented("functional_call with kwargs that are not a dict")
    output = tx.output
    saved = output.module_overrides
    output.module_overrides = {**saved, **overrides}
    try:
        result = module.call_function(tx, call_args, call_kwargs)
    finally:
        output.module_overrides = saved
    for mod_id, attr in overrides:
        if output.side_effects.load_attr(touched[mod_id], attr) is not None:
            unimplemented(f"functional_call whose module assigns {attr!r} (swapped back in eager)")
    return result
