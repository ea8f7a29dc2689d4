"""isinstance / issubclass as Python answers them, while tracing (Note [Builtins: isinstance])."""

import abc
import inspect
import types
import typing

import torch

from kiln.exc import unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource
from kiln.frontend.variables.constant import ConstantVariable, fold
from kiln.frontend.variables.functions import inline_call, pin_class_attr
from kiln.frontend.variables.user_defined import plain_class_attr

_ABC_TOKEN_CHECKS = {}  # token -> (check, True), the STATE_QUERY guard's value


def guard_abc_registry(tx, cls):
    """Guard on the ABC registry where `cls` (a class, tuple or union) involves an ABC."""
    if isinstance(cls, types.UnionType):
        cls = cls.__args__
    classes = cls if isinstance(cls, tuple) else (cls,)
    if not any(isinstance(c, abc.ABCMeta) for c in classes):
        return
    token = abc.get_cache_token()
    check = _ABC_TOKEN_CHECKS.get(token)
    if check is None:

        def abc_registry_unchanged():
            return abc.get_cache_token() == token

        check = _ABC_TOKEN_CHECKS[token] = (abc_registry_unchanged, True)
    tx.output.guards.add(GuardKind.STATE_QUERY, None, check)


def isinstance_check(tx, obj, cls, cls_var=None):
    """isinstance(obj, cls) as Python answers it, metaclass __instancecheck__ included.

    Note [Builtins: isinstance]
    isinstance(obj, cls) calls type(cls).__instancecheck__. For `type`, ABCMeta and
    nn.Parameter's metaclass that amounts to issubclass(type(obj), cls) (which itself runs any
    metaclass __subclasscheck__), answered from the traced value's Python type. Any other
    __instancecheck__ may look at the instance itself (torch.BoolStorage checks the storage's
    dtype): it is run on the real object where the trace has one; a metaclass's Python
    __instancecheck__ is inlined (after Python's own `type(obj) is cls` shortcut) and its result's
    truth taken when that is known while tracing; otherwise a graph break.
    """
    classes = cls if isinstance(cls, tuple) else (cls,)
    guard_abc_registry(tx, cls)
    if any(c in _FLAGGED for c in classes) and hasattr(obj, "hasattr"):  # (a tensor)
        return ConstantVariable(any(_flagged_isinstance(tx, obj, c) for c in classes))
    if all(_type_decides(c) for c in classes):
        t = obj.python_type()
        if not issubclass(t, cls) and not _class_is_type(t):
            # Python then asks obj.__class__ (a proxy's __getattribute__, a `__class__` property
            # or class attribute may answer another class)
            unimplemented(f"isinstance of a {t.__name__}, whose __class__ is not its type")
        return ConstantVariable(issubclass(t, cls))
    if obj.is_python_constant():
        return fold(isinstance, obj.as_python_constant(), cls)
    if isinstance(cls, type) and obj.python_type() is cls:
        return ConstantVariable(True)  # (Python answers this before asking the metaclass)
    check = inspect.getattr_static(type(cls), "__instancecheck__", None)
    if cls_var is not None and isinstance(check, types.FunctionType):
        return _user_instancecheck(tx, obj, cls, cls_var, check)
    unimplemented(f"isinstance with {cls!r}, whose metaclass has its own __instancecheck__")


# Note [Builtins: isinstance of Parameter and Buffer]
# `nn.Parameter(t)` of a tensor subclass (TwoTensor) returns an instance of that subclass with
# `_is_param = True` in its __dict__, and Parameter's metaclass answers isinstance(t, Parameter)
# from that flag (Buffer likewise from `_is_buffer`): for a tensor the answer is its type, else
# the flag read as `getattr(t, flag, False)` (the tensor's __dict__ keys guarded).
_FLAGGED = {torch.nn.Parameter: "_is_param", torch.nn.Buffer: "_is_buffer"}


def _flagged_isinstance(tx, obj, cls):
    """isinstance(tensor, cls) for one class of a (possibly tuple) check; see the note."""
    if issubclass(obj.python_type(), cls):
        return True
    flag = _FLAGGED.get(cls)
    if flag is None:
        return bool(isinstance_check(tx, obj, cls).as_python_constant())
    if not issubclass(obj.python_type(), torch.Tensor) or not obj.hasattr(tx, flag).value:
        return False
    value = obj.var_getattr(tx, flag)
    if not value.is_python_constant():
        unimplemented(f"isinstance(t, {cls.__name__}) with t.{flag} known only at run time")
    return bool(value.as_python_constant())


def _user_instancecheck(tx, obj, cls, cls_var, check):
    """isinstance(obj, cls) through the metaclass's Python __instancecheck__, inlined; Python
    takes the truth of what it returns."""
    source = None
    if cls_var.source is not None:
        source = AttrSource(AttrSource(cls_var.source, "__class__"), "__instancecheck__")
        pin_class_attr(tx, source, check)
    result = inline_call(tx, check, [cls_var, obj], {}, source)
    if result.is_python_constant():
        return ConstantVariable(bool(result.as_python_constant()))
    unimplemented(f"{type(cls).__name__}.__instancecheck__ returned a value known only at run time")


# Note [Builtins: checks against a typing Protocol]
# isinstance/issubclass against a `typing.Protocol` class run typing's hook, whose answer depends
# on the calling frame (`_allow_reckless_class_checks` reads the caller's module: from `abc` or
# `functools` a non-method protocol answers NotImplemented, from user code it raises TypeError) and
# whose NotImplemented fills the class's ABC caches. Run while tracing, the check would ask from
# kiln's frames and fill those caches ahead of the program (a later break that resumes at an
# earlier `with` replays an `issubclass` that then hits the cache and no longer raises: CPython's
# test_typing test_protocol_decorated_with_final_noncallable_members). So it is a graph break:
# Python asks, from the user's frame, in the program's order.
def check_protocols(cls):
    """A graph break for isinstance/issubclass against a typing Protocol (Note [Builtins: ...])."""
    classes = cls if isinstance(cls, tuple) else (cls,)
    for c in classes:
        if isinstance(c, _PROTOCOL_META) and getattr(c, "_is_protocol", False):
            unimplemented(
                f"isinstance/issubclass against the typing Protocol {c.__qualname__} (its answer "
                "depends on the calling frame and fills its caches)"
            )


_PROTOCOL_META = type(typing.Protocol)


def _class_is_type(t):
    """Whether `obj.__class__` is `type(obj)` for instances of `t` (no Python __getattribute__,
    no `__class__` of its own in the MRO)."""
    if not plain_class_attr(t):
        return False
    return not isinstance(inspect.getattr_static(t, "__getattribute__", None), types.FunctionType)


def _type_decides(cls):
    """Whether isinstance(obj, cls) depends only on type(obj) (Note [Builtins: isinstance])."""
    if isinstance(cls, tuple):
        return all(_type_decides(c) for c in cls)
    if isinstance(cls, types.UnionType):  # `int | None`: each member
        return all(_type_decides(c) for c in cls.__args__)
    check = getattr(type(cls), "__instancecheck__", None)
    return check in _TYPE_ONLY_CHECKS


_TYPE_ONLY_CHECKS = {
    type.__instancecheck__,
    abc.ABCMeta.__instancecheck__,
    type(torch.nn.Parameter).__instancecheck__,  # (for a tensor: Note [Builtins: isinstance
    type(torch.nn.Buffer).__instancecheck__,  # of Parameter and Buffer])
}
