"""Plain tensor subclasses with `__torch_function__` (`x.as_subclass(C)`) as traced values: the
subclass's __torch_function__ is traced at every torch call on them (Note [Tensors: subclasses
with __torch_function__])."""

import functools
import inspect
import operator
import types

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass_type

from kiln.bytecode import emit
from kiln.exc import unimplemented
from kiln.frontend.dispatch_modes import (
    compiling_torch_function_on,
    guard_torch_function_state,
    modes_traced,
)
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource
from kiln.frontend.variables import function_modes, tensor_attrs
from kiln.frontend.variables.base import VariableTracker, wrap_constant_like, wrap_value
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.functions import UserMethodVariable, inline_call, register_modelled
from kiln.frontend.variables.lists import BaseListVariable, ListVariable, TupleVariable
from kiln.frontend.variables.super_calls import BASE_ATTRS, BASE_NEWS
from kiln.frontend.variables.tensor import TensorVariable, register_method
from kiln.frontend.variables.tensor_subclass import (
    _OWN_NAMES,
    defined_below_tensor,
    is_wrapper_subclass,
    tensor_overrides,
)
from kiln.frontend.variables.torch import (
    TorchVariable,
    call_tensor_op,
    register_function,
    register_subclass_constructor,
    register_torch_function_dispatch,
)
from kiln.frontend.variables.user_attrs import instance_static

# Note [Tensors: subclasses with __torch_function__]
# A plain subclass of Tensor (made by `t.as_subclass(C)`, no __torch_dispatch__ of its own) holds
# an ordinary tensor; what makes it differ is `C.__torch_function__`, which torch calls for every
# torch function, Tensor method, operator and Tensor property getter that has a C argument, with
# (func, types, args, kwargs). Tensor's own __torch_function__ runs func with the subclass
# disabled and turns tensor results into C (`as_subclass`), except for the few functions torch
# never wraps (`get_default_nowrap_functions`).
# kiln traces that protocol: the input is a plain placeholder (its TENSOR_MATCH guard pins the
# exact class) whose variable is a TorchFunctionTensorVariable of C, and each of those calls
# (`dispatch`) traces C.__torch_function__: Tensor's own is modelled (`default_torch_function`:
# func traced on the plain tensors, tensor results made variables of C again); a classmethod of
# the user's is inlined, guarded by identity through `type(x).__torch_function__.__func__`, with
# func as the object torch would pass (the torch function, `Tensor.<method>`, or the property's
# `__get__`), and `super().__torch_function__(...)` inside it reaches the modelled default.
# Results that leave the graph are made C again by `as_subclass`, once per value (a value used
# twice is one object, as in eager), but for one that is already a C: an op that gave its
# operand back (`x.to("cpu")` is x), which torch's _convert keeps, and whose `is` with the
# operand is left to Python (Note [Operators: tensor identity]). A Python operator hands the
# func and argument order torch's binding does (`x + 2` Tensor.add, `2 & x`
# Tensor.bitwise_and(x, 2)), asked of torch by the probe the user's modes use
# (function_modes.operator_func). An in-place op (`y += 2`,
# `y[0] = v`: STORE_SUBSCR goes through here too) runs on the plain tensor and hands back the
# value itself, as torch's _convert does. What is not modelled breaks: two different subclasses
# in one call, a __torch_dispatch__ or a Tensor operator the class overrides, and any kiln path
# that would record an op on such a value without going through here (call_tensor_op refuses
# those: `torch_function_class`).

# Subclasses of Parameter are such subclasses too, measured from Parameter (its own methods are
# torch's): without a __torch_function__ of their own they have Parameter's disabled one (plain
# results), reached by `super().__torch_function__` too (DisabledTorchFunctionImplVariable); a
# new one is made by its own __new__ (`_make_subclass(C, t, False)`), and Parameter's __new__
# with requires_grad=True (a new leaf) breaks.

# Note [Tensors: a subclass's own attributes]
# What C defines itself (a method, a property, a class constant) is plain Python to torch: no
# __torch_function__ runs for `x.scale` or `x.twice()`. kiln reads them as Python does: a
# property's getter (a data descriptor, before the instance dict) is inlined on x; then the
# tensor's own __dict__ (its keys guarded, an input's); then a function is a method bound to x
# (inlined when called), a literal a constant. Each is reached and guarded through
# `x.__class__.<name>`, so a class attribute changed later recompiles. Other descriptors break.

_TENSOR_TF = torch.Tensor.__torch_function__.__func__
_DISABLED_TF = torch._C._disabled_torch_function_impl
_DEFAULT_DISPATCH = (
    torch.Tensor.__torch_dispatch__.__func__
    if hasattr(torch.Tensor.__torch_dispatch__, "__func__")
    else torch.Tensor.__torch_dispatch__,
    _DISABLED_TF,
)
_OWN_TF_NAMES = _OWN_NAMES - {"__torch_dispatch__"}


def _static_tf(cls):
    tf = inspect.getattr_static(cls, "__torch_function__", None)
    return tf


def has_torch_function_class(value):
    """Whether a tensor's type is a plain subclass whose __torch_function__ kiln traces (or
    breaks on, with the reason, in check_class)."""
    cls = type(value)
    return (
        isinstance(value, torch.Tensor)
        and cls not in (torch.Tensor, torch.nn.Parameter)
        and not is_wrapper_subclass(value)
    )


def check_class(cls):
    """Break unless kiln models this plain subclass: its __torch_function__ is Tensor's, the
    disabled one, or a classmethod of Python code; it changes nothing else of Tensor's."""
    name = cls.__name__
    td = inspect.getattr_static(cls, "__torch_dispatch__", None)
    if getattr(td, "__func__", td) not in _DEFAULT_DISPATCH:
        unimplemented(f"a tensor subclass input ({name}) with its own __torch_dispatch__")
    tf = _static_tf(cls)
    fn = getattr(tf, "__func__", tf)
    if fn is not _TENSOR_TF and fn is not _DISABLED_TF and not isinstance(fn, types.FunctionType):
        unimplemented(f"a tensor subclass ({name}) whose __torch_function__ is no Python function")
    for attr in tensor_overrides(cls, _OWN_TF_NAMES):
        if not _python_override(cls, attr):
            unimplemented(f"a tensor subclass input ({name}) overrides Tensor.{attr}")


def _python_override(cls, name):
    """Whether C's own `name` (one Tensor has too) is a method, property or constant that user
    code reaches by attribute (Note [Tensors: a subclass's own attributes]): not an operator
    or other dunder, which Python and torch reach through slots."""
    if name.startswith("__"):
        return False
    static = instance_static(cls, name)
    if isinstance(static, property):
        return isinstance(static.fget, types.FunctionType)  # (a store to it breaks)
    return isinstance(static, types.FunctionType) or is_literal(static)


def wrap_input(var, cls):
    """The variable of an input of plain subclass `cls` (its placeholder's variable `var`)."""
    check_class(cls)
    class_source = AttrSource(var.source, "__class__")
    return TorchFunctionTensorVariable.of(var, cls, class_source)


class TorchFunctionTensorVariable(TensorVariable):
    """A traced tensor whose value is a plain subclass `tf_class` of Tensor: torch calls on it go
    through the class's __torch_function__."""

    # made by as_subclass once per value where it leaves the graph: every use gets that object
    keeps_identity = True

    def __init__(self, proxy, example, device, *, tf_class, class_source, **kwargs):
        super().__init__(proxy, example, device, **kwargs)
        self.torch_function_class = tf_class
        self.class_source = class_source

    @classmethod
    def of(cls, var, tf_class, class_source, source=...):
        """`var`'s tensor as a value of tf_class: the input itself (var's source, by default), or
        a new object (source=None: `as_subclass` makes one, an alias of it)."""
        return cls(
            var.proxy,
            var.example,
            var.device,
            tf_class=tf_class,
            class_source=class_source,
            source=var.source if source is ... else source,
            is_leaf_input=var.is_leaf_input,
        )

    def python_type(self):
        return self.torch_function_class

    def plain(self):
        """The same traced tensor as a plain Tensor (what func sees with the subclass disabled)."""
        return TensorVariable(
            self.proxy, self.example, self.device, source=None, is_leaf_input=self.is_leaf_input
        )

    def _own_attr(self, name):
        return defined_below_tensor(self.torch_function_class, name)

    def var_getattr(self, tx, name):
        if name == "__class__":
            return super().var_getattr(tx, name)
        if self._own_attr(name):
            return self._class_attr(tx, name)
        attr = inspect.getattr_static(torch.Tensor, name, None)
        if isinstance(attr, types.GetSetDescriptorType):  # a property: torch calls the TF
            return dispatch(tx, ("getter", name), [self], {})
        return super().var_getattr(tx, name)

    def _class_attr(self, tx, name):
        """`x.name` of an attribute the subclass defines (Note [Tensors: a subclass's own
        attributes])."""
        stored = tensor_attrs.load_attr(tx, self, name)
        if stored is not None:
            return stored
        cls = self.torch_function_class
        static = instance_static(cls, name)
        what = f"attribute {name!r} of a tensor subclass ({cls.__name__})"
        if self.class_source is None:
            unimplemented(f"{what} of a value without a source for its class")
        src = AttrSource(self.class_source, name)
        if isinstance(static, property) and isinstance(static.fget, types.FunctionType):
            fget_source = AttrSource(src, "fget")
            wrap_value(tx, static.fget, fget_source)  # (its guard)
            return inline_call(tx, static.fget, [self], {}, fget_source)
        if hasattr(type(static), "__set__"):
            unimplemented(f"{what}: a data descriptor ({type(static).__name__})")
        found = self._instance_dict(tx, name)  # (its keys guarded)
        if found is not None:
            return found
        if isinstance(static, types.FunctionType):
            wrap_value(tx, static, src)  # (its guard)
            return UserMethodVariable(static, self)
        if not is_literal(static):
            unimplemented(f"{what}: a {type(static).__name__}")
        return wrap_value(tx, static, src)

    def call_method(self, tx, name, args, kwargs):
        # (a name Tensor has too is Tensor's here: user code reaches C's own through
        # var_getattr, kiln's own calls of Tensor methods mean Tensor's)
        if self._own_attr(name) and not hasattr(torch.Tensor, name):
            return self._class_attr(tx, name).call_function(tx, args, kwargs)
        if name == "as_subclass" and self.source is None:  # (torch skips __torch_function__
            return _as_subclass(tx, self, args, kwargs)  # for it; an input's: Tensor's modelled)
        if not callable(getattr(torch.Tensor, name, None)):
            unimplemented(f"Tensor.{name}() on a tensor subclass with __torch_function__")
        return dispatch(tx, ("method", name), [self, *args], kwargs)

    def unpack_var_sequence(self, tx):
        """Tensor.__iter__ as Python runs it: `self.dim()`, then `self.unbind(0)`, both through
        __torch_function__ (no call for __iter__ itself)."""
        dim = self.call_method(tx, "dim", [], {})
        if not dim.is_python_constant() or dim.as_python_constant() == 0:
            unimplemented("iteration over a 0-d tensor subclass value")
        items = self.call_method(tx, "unbind", [ConstantVariable(0)], {})
        if not isinstance(items, BaseListVariable):
            unimplemented(f"iteration over a {self.torch_function_class.__name__}: its unbind")
        return list(items.items)

    def reconstruct(self, cg):
        if self.source is not None:
            return super().reconstruct(cg)
        base = _input_source(cg.output, self.proxy)
        if base is not None:  # (`x.as_subclass(C)` of an input x: a new object over it)
            cg.load_object(torch.Tensor.as_subclass, push_null=True)
            base.reconstruct(cg)
        else:  # (a graph output: the input itself where the op gave its operand back)
            cg.load_object(converted, push_null=True)
            cg.reconstruct_tensor(self)
        cg.load_object(self.torch_function_class)
        cg.extend(_call(2))

    def __repr__(self):
        return f"TorchFunctionTensorVariable({self.torch_function_class.__name__}, {self.proxy})"


def converted(out, cls):
    """torch's _convert of one result at run time: `out` made cls unless it is one already."""
    return out if isinstance(out, cls) else torch.Tensor.as_subclass(out, cls)


def _call(n):
    return emit.call(n)


def _input_source(output, node):
    """The source of the graph input whose placeholder is `node`, or None."""
    if getattr(node, "op", None) != "placeholder":
        return None
    return next((source for source, _, n in output.graph_inputs if n is node), None)


def _flat(values):
    out = []
    for v in values:
        if isinstance(v, BaseListVariable):
            out.extend(_flat(v.items))
        else:
            out.append(v)
    return out


def _func_object(func):
    """The object torch passes as `func`: ("function", f) is f itself; ("method", name) is
    Tensor.<name>; ("getter", name) is the property's __get__."""
    kind, what = func
    if kind == "function":
        return what
    if kind == "method":
        return getattr(torch.Tensor, what)
    return getattr(torch.Tensor, what).__get__


def _func_of_object(f):
    """Inverse of _func_object, for the func a user __torch_function__ passes on."""
    if (
        isinstance(f, types.MethodWrapperType)
        and f.__name__ == "__get__"
        and isinstance(f.__self__, types.GetSetDescriptorType)
        and f.__self__.__objclass__ in (torch.Tensor, torch._C.TensorBase)
    ):
        return ("getter", f.__self__.__name__)
    name = getattr(f, "__name__", None)
    if name is not None and getattr(torch.Tensor, name, None) is f:
        return ("method", name)
    dunder = _tensor_dunders().get(f) if isinstance(f, types.FunctionType) else None
    if dunder is not None:  # (Tensor.__pow__: a wrapper of TensorBase.pow, named "pow")
        return ("method", dunder)
    return ("function", f)


@functools.cache
def _tensor_dunders():
    """{Tensor's Python-level dunder method: its name}."""
    out = {}
    for name in dir(torch.Tensor):
        attr = inspect.getattr_static(torch.Tensor, name, None)
        if name.startswith("__") and isinstance(attr, types.FunctionType):
            out.setdefault(getattr(torch.Tensor, name), name)
    return out


def dispatch(tx, func, args, kwargs):
    """`func(*args, **kwargs)` where some argument is a value of a plain subclass with
    __torch_function__: trace that __torch_function__ (Note [Tensors: subclasses with
    __torch_function__])."""
    if modes_traced(tx) and function_modes.active(tx):  # (the user's modes come first)
        return function_modes.dispatch(tx, func, args, kwargs)
    guard_torch_function_state(tx)
    values = _flat([*args, *kwargs.values()])
    classes = []
    for v in values:
        c = getattr(v, "torch_function_class", None)
        if c is not None and c not in classes:
            classes.append(c)
    if len(classes) != 1:
        names = ", ".join(c.__name__ for c in classes)
        unimplemented(f"a torch call on several tensor subclasses with __torch_function__: {names}")
    cls = classes[0]
    owner = next(v for v in values if getattr(v, "torch_function_class", None) is cls)
    if tx.output.__dict__.get("torch_function_disabled") or not compiling_torch_function_on():
        # inside DisableTorchFunctionSubclass, or the frame was called under it (or under
        # DisableTorchFunction: guarded, Note [Frames: under a user's torch function mode])
        return _call_plain(tx, func, args, kwargs)
    kind, what = func
    tf = _static_tf(cls)
    fn = getattr(tf, "__func__", tf)
    # the class's __torch_function__ is guarded, Tensor's and the disabled one too (a class may
    # be given its own later)
    tf_source = AttrSource(owner.class_source, "__torch_function__")
    if fn is _DISABLED_TF:  # no __torch_function__: plain results
        tx.output.guards.add(GuardKind.ID_MATCH, tf_source, fn)
        return _call_plain(tx, func, args, kwargs)
    # (a plain function, no classmethod: torch gets it from the argument, a method bound to it)
    bound = not isinstance(tf, classmethod)
    fn_source = tf_source if bound else AttrSource(tf_source, "__func__")
    tx.output.guards.add(GuardKind.ID_MATCH, fn_source, fn)
    if fn is _TENSOR_TF:
        return default_torch_function(tx, cls, owner.class_source, func, args, kwargs)
    cls_var = _class_variable(cls, owner.class_source)
    func_var = _wrap_func(tx, _func_object(func))
    call_args = [
        owner if bound else cls_var,
        func_var,
        TupleVariable([cls_var]),
        TupleVariable(list(args)),
        ConstDictVariable({k: v for k, v in kwargs.items()}),
    ]
    return inline_call(tx, fn, call_args, {}, fn_source)


def _class_variable(cls, class_source):
    return TorchFunctionClassVariable(cls, source=class_source)


def _wrap_func(tx, f):
    return wrap_constant_like(tx, f)


class TorchFunctionClassVariable(TorchVariable):
    """The subclass itself as `cls` of its __torch_function__ (a torch class to kiln)."""

    def var_getattr(self, tx, name):
        if name == "__torch_function__" and self.source is not None:
            return TorchFunctionMethodVariable(self.value, self.source)
        return super().var_getattr(tx, name)


class TorchFunctionMethodVariable(VariableTracker):
    """`C.__torch_function__` reached from `super()` or the class: Tensor's (modelled) when the
    class does not define its own."""

    def __init__(self, cls, class_source, **kw):
        super().__init__(**kw)
        self.cls = cls
        self.class_source = class_source

    def call_function(self, tx, args, kwargs):
        return call_default(tx, self.cls, self.class_source, args, kwargs)


class DisabledTorchFunctionImplVariable(VariableTracker):
    """`torch._C._disabled_torch_function_impl` (Parameter's __torch_function__) reached by
    `super().__torch_function__(func, types, args, kwargs)`: func on the plain tensors, results
    left plain."""

    def call_function(self, tx, args, kwargs):
        func, _, items, kw = _torch_function_call(tx, args, kwargs)
        return _call_plain(tx, func, items, kw)


def call_default(tx, cls, class_source, args, kwargs):
    """`Tensor.__torch_function__(func, types, args=(), kwargs=None)` called as a method of cls."""
    func, types_var, items, kw = _torch_function_call(tx, args, kwargs)
    for t in types_var.items:
        if not (t.is_python_constant() or hasattr(t, "value")):
            unimplemented("Tensor.__torch_function__ with types kiln does not know")
        tv = t.value if hasattr(t, "value") else t.as_python_constant()
        if not (isinstance(tv, type) and issubclass(cls, tv)):
            return ConstantVariable(NotImplemented)
    return default_torch_function(tx, cls, class_source, func, items, kw)


def _torch_function_call(tx, args, kwargs):
    """The (func, types, args, kwargs) a `__torch_function__(func, types, args=(), kwargs=None)`
    call is given: func as dispatch's key, the args' variables, the kwargs by name."""
    names = ("func", "types", "args", "kwargs")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    func_var = bound.get("func")
    if func_var is None or not hasattr(func_var, "value"):
        unimplemented("Tensor.__torch_function__ with a func kiln does not know")
    types_var = bound.get("types")
    call_args = bound.get("args")
    call_kwargs = bound.get("kwargs")
    if types_var is None or not isinstance(types_var, BaseListVariable):
        unimplemented("Tensor.__torch_function__ with types that are no tuple")
    items = [] if call_args is None else call_args.unpack_var_sequence(tx)
    if isinstance(call_kwargs, ConstDictVariable):
        kw = {getattr(k, "value", k): v for k, v in call_kwargs.items.items()}
        if not all(isinstance(k, str) for k in kw):
            unimplemented("Tensor.__torch_function__ with kwargs kiln does not read")
    elif call_kwargs is None or (
        call_kwargs.is_python_constant() and call_kwargs.as_python_constant() is None
    ):
        kw = {}
    else:
        unimplemented("Tensor.__torch_function__ with kwargs kiln does not read")
    return _func_of_object(func_var.value), types_var, items, kw


def default_torch_function(tx, cls, class_source, func, args, kwargs):
    """Tensor.__torch_function__ for cls: func on the plain tensors, results made cls again."""
    result = _call_plain(tx, func, args, kwargs)
    if _func_object(func) in torch.overrides.get_default_nowrap_functions():
        return result
    return _convert(result, cls, class_source, [*args, *kwargs.values()])


def _unwrap(v):
    if isinstance(v, TorchFunctionTensorVariable):
        return v.plain()
    if type(v) in (TupleVariable, ListVariable):
        return type(v)([_unwrap(i) for i in v.items])
    return v


def _call_plain(tx, func, args, kwargs):
    """func traced on the plain tensors (the subclass disabled)."""
    kind, what = func
    args = [_unwrap(a) for a in args]
    kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
    if kind == "getter":
        return args[0].var_getattr(tx, what)
    if kind == "method":
        if not args or not isinstance(args[0], TensorVariable):
            return _wrap_func(tx, getattr(torch.Tensor, what)).call_function(tx, args, kwargs)
        return args[0].call_method(tx, what, args[1:], kwargs)
    return _wrap_func(tx, what).call_function(tx, args, kwargs)


def _convert(result, cls, class_source, inputs):
    """torch's _convert: tensor results (and those in tuples/lists) become cls."""
    if isinstance(result, TorchFunctionTensorVariable):
        return result
    if isinstance(result, TensorVariable):
        for v in _flat(inputs):  # the same tensor as an input: that input (its object)
            if isinstance(v, TorchFunctionTensorVariable) and v.proxy is result.proxy:
                return v
        if getattr(result, "wrapper_subclass", False):
            unimplemented(f"a {cls.__name__} op returned a wrapper subclass")
        made = TorchFunctionTensorVariable.of(result, cls, class_source, source=None)
        origin = result
        while getattr(origin, "may_be", None) is not None:
            origin = origin.may_be
        if origin is not result:  # (`x.to(x.dtype)` may be x: Note [Operators: tensor identity])
            made.may_be = next(
                (v for v in _flat(inputs) if getattr(v, "proxy", None) is origin.proxy), origin
            )
        return made
    if type(result) is ListVariable:
        return ListVariable([_convert(i, cls, class_source, inputs) for i in result.items])
    if type(result) is TupleVariable and (
        result.tuple_cls is tuple or hasattr(result.tuple_cls, "n_fields")  # (a structseq)
    ):
        items = [_convert(i, cls, class_source, inputs) for i in result.items]
        return TupleVariable(items, tuple_cls=result.tuple_cls)
    if isinstance(result, BaseListVariable) and any(
        isinstance(i, TensorVariable) for i in result.items
    ):
        unimplemented(f"a {type(result).__name__} of tensors from a {cls.__name__} op")
    return result


def involved(args, kwargs):
    """Whether some argument (or an item of a list/tuple argument) is such a value."""
    return any(
        getattr(v, "torch_function_class", None) is not None
        for v in _flat([*args, *kwargs.values()])
    )


def _tensor_torch_function(tx, args, kwargs):
    """`Tensor.__torch_function__` reached as a function (`super().__torch_function__(...)` in
    a subclass's own): args[0] is the class it is called on."""
    if not args or not isinstance(getattr(args[0], "value", None), type):
        unimplemented("Tensor.__torch_function__ called without its class")
    cls_var = args[0]
    class_source = cls_var.source
    if class_source is None:
        found = [v for v in _flat(args) if isinstance(v, TorchFunctionTensorVariable)]
        for v in args[1:]:
            if isinstance(v, BaseListVariable):
                found += [i for i in _flat(v.items) if isinstance(i, TorchFunctionTensorVariable)]
        if not found:
            unimplemented("Tensor.__torch_function__ on no tensor subclass value")
        class_source = found[0].class_source
    return call_default(tx, cls_var.value, class_source, args[1:], kwargs)


# operator -> (Tensor's method for `tensor <op> other`, its reflected one for `other <op> tensor`)
_OPERATOR_METHODS = {
    operator.add: ("__add__", "__radd__"),
    operator.sub: ("__sub__", "__rsub__"),
    operator.mul: ("__mul__", "__rmul__"),
    operator.truediv: ("__truediv__", "__rtruediv__"),
    operator.floordiv: ("__floordiv__", "__rfloordiv__"),
    operator.mod: ("__mod__", "__rmod__"),
    operator.pow: ("__pow__", "__rpow__"),
    operator.matmul: ("__matmul__", "__rmatmul__"),
    operator.and_: ("__and__", "__rand__"),
    operator.or_: ("__or__", "__ror__"),
    operator.xor: ("__xor__", "__rxor__"),
    operator.lshift: ("__lshift__", "__rlshift__"),
    operator.rshift: ("__rshift__", "__rrshift__"),
    operator.lt: ("__lt__", "__gt__"),
    operator.le: ("__le__", "__ge__"),
    operator.gt: ("__gt__", "__lt__"),
    operator.ge: ("__ge__", "__le__"),
    operator.eq: ("__eq__", "__eq__"),
    operator.ne: ("__ne__", "__ne__"),
}


def operator_call(tx, op, a, b=None):
    """`a <op> b` (or `<op> a`) with such a value: the call torch hands __torch_function__, as
    it hands a mode (`x + 2` passes Tensor.add, `2 & x` Tensor.bitwise_and with x first); else
    Tensor's operator method, as Python picks it (the left operand's when it is a tensor, else
    the right one's reflected method)."""
    operands = [a] if b is None else [a, b]
    kinds = tuple(function_modes.operand_kind(v) for v in operands)
    found = None if "other" in kinds else function_modes.operator_func(op, kinds)
    if found is not None:
        func, order = found
        return dispatch(tx, _func_of_object(func), [operands[i] for i in order], {})
    if op in _OPERATOR_METHODS and b is not None:
        method, reflected = _OPERATOR_METHODS[op]
        if isinstance(a, TensorVariable):
            return dispatch(tx, ("method", method), [a, b], {})
        if isinstance(b, TensorVariable):
            return dispatch(tx, ("method", reflected), [b, a], {})
    what = getattr(op, "__name__", op)
    unimplemented(f"operator {what} on a tensor subclass with __torch_function__")


class DisabledTorchFunctionVariable(VariableTracker):
    """`with torch._C.DisableTorchFunctionSubclass():` traced: inside, torch calls on subclass
    values run on the plain tensors and give plain results (no __torch_function__)."""

    traced_manager = True  # (ctx_managers.context_manager: entered and left by these methods)

    def python_type(self):
        return torch._C.DisableTorchFunctionSubclass

    def enter(self, tx):
        d = tx.output.__dict__
        d["torch_function_disabled"] = d.get("torch_function_disabled", 0) + 1
        return ConstantVariable(None)

    def exit(self, tx):
        tx.output.__dict__["torch_function_disabled"] -= 1
        return ConstantVariable(None)

    def reconstruct(self, cg):
        cg.load_object(torch._C.DisableTorchFunctionSubclass, push_null=True)
        cg.extend(_call(0))

    load_fresh = reconstruct


def _disable_subclass(tx, fn, args, kwargs):
    if args or kwargs:
        return None
    return DisabledTorchFunctionVariable()


def _as_subclass(tx, t, args, kwargs):
    """`t.as_subclass(C)` (t plain here: a subclass value's call went through its
    __torch_function__ first): the same traced tensor as a value of C."""
    arg = args[0] if len(args) == 1 and not kwargs else kwargs.get("cls")
    cls = getattr(arg, "value", None)
    if not isinstance(cls, type) or not issubclass(cls, torch.Tensor):
        unimplemented("Tensor.as_subclass with a class kiln does not know")
    plain = t.plain() if isinstance(t, TorchFunctionTensorVariable) else t
    if cls is torch.Tensor:
        return plain
    if getattr(t, "wrapper_subclass", False) or cls is torch.nn.Parameter:
        unimplemented(f"Tensor.as_subclass({cls.__name__}) of this tensor")
    check_class(cls)
    if arg.source is None:
        unimplemented(f"Tensor.as_subclass({cls.__name__}) of a class without a source")
    return TorchFunctionTensorVariable.of(plain, cls, arg.source, source=None)


# Note [Tensors: constructing a plain subclass]
# `C(*args)` of a plain subclass C runs type.__call__'s steps: C.__new__ (the first of C's bases
# below Tensor that defines one, inlined with (C, *args)), then C.__init__ on its result when that
# is a C. Tensor's own __new__ (reached directly or by `super().__new__(cls, t)`) on one tensor is
# its legacy constructor: an alias of t of class C, with t's autograd history, which is what
# `t.as_subclass(C)` makes; any other arguments (a shape, a list of data) are a break.
# `torch.Tensor._make_subclass(C, t)` (the other way a __new__ makes its object) is the same over
# `t.detach()`: an alias out of autograd (make_subclass).
def _own_method(cls, name):
    """The function `name` of the first class of cls's MRO below Tensor that defines it (None:
    Tensor's own); False for something else (a builtin, a descriptor kiln does not run)."""
    for klass in cls.__mro__[: cls.__mro__.index(torch.Tensor)]:
        if name in vars(klass):
            attr = vars(klass)[name]
            attr = attr.__func__ if isinstance(attr, staticmethod) else attr
            return attr if isinstance(attr, types.FunctionType) else False
    return None


# Note [Tensors: wrappers made in the frame]
# `C(*args)` of a traceable wrapper subclass (`__tensor_flatten__`, its own __torch_dispatch__:
# TwoTensor, float8 tensors) is one graph call of C, run on the meta arguments for its example
# (a C over meta inner tensors, whose dispatch later ops run), as torch.compile proxies such
# constructors: the eager backend calls C at run time, AOT desugars it like a subclass input
# (Note [AOT: wrapper subclasses]: a graph whose outputs hold one compiles over inner tensors).
# What the constructor does besides making the object is not seen; Python that builds it
# eagerly is what runs.
def _construct(tx, cls_var, args, kwargs):
    """`C(*args)` of a plain Tensor subclass C, or None."""
    cls = cls_var.value
    if cls is torch.Tensor or not issubclass(cls, torch.Tensor):
        return None
    if is_traceable_wrapper_subclass_type(cls):  # Note [Tensors: wrappers made in the frame]
        return call_tensor_op(tx, "call_function", cls, args, kwargs, what=cls.__name__)
    if cls is torch.nn.Parameter or cls_var.source is None:
        return None
    new, init = _own_method(cls, "__new__"), _own_method(cls, "__init__")
    if new is False or init is False:
        return None
    if new is None:
        made = tensor_new(tx, cls_var, args, kwargs)
    else:
        made = inline_call(tx, new, [cls_var, *args], kwargs, None)
    made_cls = getattr(made, "torch_function_class", None)
    if init is not None and made_cls is not None and issubclass(made_cls, cls):
        inline_call(tx, init, [made, *args], kwargs, None)
    return made


def tensor_new(tx, cls_var, args, kwargs):
    """`Tensor.__new__(C, t)`: Tensor's legacy constructor on one tensor, an alias of t of class C
    (Note [Tensors: constructing a plain subclass])."""
    if len(args) != 1 or kwargs or type(args[0]) is not TensorVariable:
        unimplemented(f"Tensor.__new__ of {cls_var.value.__name__} with these arguments")
    return _as_subclass(tx, args[0], [cls_var], {})


def make_subclass(tx, fn, args, kwargs):
    """`torch.Tensor._make_subclass(C, t, require_grad=False)`: a new object of class C over
    t's storage, out of autograd (t.detach() made C: Note [Tensors: constructing a plain
    subclass]); a new leaf that requires grad (require_grad=True) is a break."""
    names = ("cls", "data", "require_grad")
    if len(args) > 3 or any(k not in names for k in kwargs):
        unimplemented("Tensor._make_subclass with arguments kiln does not know")
    given = dict(zip(names, args), **kwargs)
    flag = given.get("require_grad", ConstantVariable(False))
    if not flag.is_python_constant() or flag.as_python_constant() is not False:
        unimplemented("Tensor._make_subclass that makes a leaf requiring grad")
    data = given.get("data")
    if isinstance(data, TorchFunctionTensorVariable):
        data = data.plain()  # (no __torch_function__ for it: torch ignores _make_subclass)
    if type(data) is not TensorVariable or "cls" not in given:
        unimplemented("Tensor._make_subclass of something other than a plain tensor")
    detached = data.call_method(tx, "detach", [], {})
    return _as_subclass(tx, detached, [given["cls"]], {})


# Note [Tensors: objects with __torch_function__]
# An object that is no tensor but whose class has a `__torch_function__` classmethod (a duck-typed
# wrapper: `torch.add(w, 1)` of a class holding a tensor) takes over every overridable torch
# function it is an argument of (or an item of a list argument: `torch.stack([w1, w2])`): torch
# calls `type(w).__torch_function__(func, (type(w),), args, kwargs)` instead, whatever it does.
# kiln inlines that call, guarded through `w.__class__.__torch_function__.__func__`. One class of
# such objects per call, with no tensor subclass next to it, and an answer other than
# NotImplemented; the rest breaks.
def _torch_function_object(v):
    """The class of `v`, an object (no tensor) whose class has a __torch_function__, or None."""
    if isinstance(v, TensorVariable) or not hasattr(v, "value") or isinstance(v.value, type):
        return None
    cls = type(v.value)
    if cls.__module__ == "builtins" or getattr(cls, "__torch_function__", None) is None:
        return None  # (a type attribute lookup: cached by CPython per type)
    return cls


def object_dispatch(tx, fn, args, kwargs):
    """`fn(*args, **kwargs)` handed to an argument's class's __torch_function__ (Note [Tensors:
    objects with __torch_function__]), or None when no argument has one."""
    values = []
    for v in [*args, *kwargs.values()]:
        values += v.items if type(v) in (ListVariable, TupleVariable) else [v]
    found = [(v, c) for v in values if (c := _torch_function_object(v)) is not None]
    if not found:
        return None
    classes = list(dict.fromkeys(c for _, c in found))
    name = getattr(fn, "__name__", fn)
    if len(classes) != 1 or any(hasattr(v, "torch_function_class") for v in values):
        unimplemented(f"torch.{name} on objects of several classes with __torch_function__")
    obj, cls = found[0]
    tf = inspect.getattr_static(cls, "__torch_function__")
    if not isinstance(tf, classmethod) or not isinstance(tf.__func__, types.FunctionType):
        unimplemented(f"{cls.__name__}.__torch_function__ (no classmethod)")
    if obj.source is None:
        unimplemented(f"torch.{name} on a {cls.__name__} made in the frame (__torch_function__)")
    class_source = AttrSource(obj.source, "__class__")
    fn_source = AttrSource(AttrSource(class_source, "__torch_function__"), "__func__")
    tx.output.guards.add(GuardKind.ID_MATCH, fn_source, tf.__func__)
    cls_var = wrap_value(tx, cls, class_source)
    call_args = [
        cls_var,
        _wrap_func(tx, fn),
        TupleVariable([cls_var]),
        TupleVariable(list(args)),
        ConstDictVariable(dict(kwargs)),
    ]
    result = inline_call(tx, tf.__func__, call_args, {}, fn_source)
    if result.is_python_constant() and result.as_python_constant() is NotImplemented:
        unimplemented(f"{cls.__name__}.__torch_function__ returned NotImplemented")
    return result


class TensorNewVariable(VariableTracker):
    """`Tensor.__new__` reached by `super().__new__` in a subclass's own __new__."""

    def call_function(self, tx, args, kwargs):
        if not args or not isinstance(getattr(args[0], "value", None), type):
            unimplemented("Tensor.__new__ without its class")
        return tensor_new(tx, args[0], args[1:], kwargs)


register_torch_function_dispatch(dispatch, operator_call, object_dispatch)
register_subclass_constructor(_construct)
BASE_NEWS[torch._C.TensorBase] = TensorNewVariable
BASE_ATTRS[(torch.nn.Parameter, "__torch_function__")] = DisabledTorchFunctionImplVariable
register_function(torch._C.DisableTorchFunctionSubclass, _disable_subclass)
register_function(torch.Tensor._make_subclass, make_subclass)
register_method("as_subclass", _as_subclass)
register_modelled(_TENSOR_TF, _tensor_torch_function)
