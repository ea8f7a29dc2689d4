"""torch.autograd.Function subclasses called inside compiled code: `MyFn.apply(x, 2.0)`.

Note [Autograd functions: one node, forward checked]
`MyFn.apply(*args)` becomes ONE call_function node whose target is the real `MyFn.apply`, with
the graph values as arguments:

    def f(x):                         graph():
        y = MyFn.apply(x * 2, 0.5)        mul = x * 2
        return y + 1                      apply = MyFn.apply(mul, 0.5)
                                          add = apply + 1

Before the node is made, the forward is traced speculatively on the traced values (under no_grad,
as Function.apply runs it) with a symbolic ctx that understands save_for_backward,
saved_tensors, mark_non_differentiable, set_materialize_grads, needs_input_grad and attributes.
The trace proves the forward is tensor code without effects outside ctx (a print, a store on a
module or a list, data-dependent code: a graph break at the apply call, which then runs in
Python) and gives the metadata of its outputs; its nodes are dropped again (the
node calls the real forward). Its guards stay: they pin what the check relied on.

Each backend then sees an ordinary call: "eager" runs `MyFn.apply` as is; aot_eager and kiln
trace the graph at the ATen level with the real autograd engine on proxy tensors, so the forward
is traced into the forward graph and the user's backward, called by the engine during the joint
trace, into the backward graph. For those backends the backward is checked first as well
(Note [Autograd functions: the backward is checked too]). Should the ATen trace still fail,
the backend's failure makes kiln run the graph eagerly with a warning: still right.
"""

import enum
import inspect
import types
import warnings

import torch

from kiln.bytecode import emit
from kiln.exc import Unsupported, unimplemented
from kiln.frontend.guards import GuardKind
from kiln.frontend.markers import is_allowed_in_graph
from kiln.frontend.source import AttrSource
from kiln.frontend.variables.allowed_calls import allowed_call
from kiln.frontend.variables.autograd_function_effects import (
    StoresBefore,
    leave_to_forward,
    start_serial,
)
from kiln.frontend.variables.autograd_function_nograd import apply_without_grad
from kiln.frontend.variables.autograd_function_objects import (
    module_fields,
    object_tensor_names,
    output_object,
    rebuilt_module,
    remade_object,
)
from kiln.frontend.variables.base import BoundMethodVariable, VariableTracker
from kiln.frontend.variables.constant import ConstantVariable, is_literal
from kiln.frontend.variables.dicts import ConstDictVariable
from kiln.frontend.variables.functions import inline_call
from kiln.frontend.variables.lists import BaseListVariable, ListVariable, TupleVariable
from kiln.frontend.variables.logging_vars import EffectCallVariable
from kiln.frontend.variables.speculation import Speculation
from kiln.frontend.variables.tensor import TensorVariable
from kiln.frontend.variables.torch import TorchVariable, _Unpack, wrap_tensor_result
from kiln.frontend.variables.user_defined import NewObjectVariable, UserDefinedObjectVariable

FUNCTION_APPLY = torch.autograd.Function.apply.__func__


def is_autograd_function(cls):
    """A user subclass of torch.autograd.Function (not Function itself)."""
    return (
        isinstance(cls, type)
        and issubclass(cls, torch.autograd.Function)
        and cls is not torch.autograd.Function
    )


def _tensor_cls():
    return TensorVariable


class AutogradFunctionApplyVariable(VariableTracker):
    """`MyFn.apply` of a torch.autograd.Function subclass, before it is called."""

    def __init__(self, cls, cls_source=None, **kw):
        super().__init__(**kw)
        self.cls = cls
        self.cls_source = cls_source
        self.forward_broke = False  # its forward broke inside: run it as a compiled frame
        self.forward_start = None  # the serial from which variables are the forward's

    def python_type(self):
        return types.MethodType

    def call_function(self, tx, args, kwargs):
        cls = self.cls
        name = cls.__qualname__
        forward = _static_function(cls, "forward")
        setup = _static_function(cls, "setup_context")
        if forward is None:
            unimplemented(f"{name}.forward is not a staticmethod written in Python")
        base_setup = inspect.getattr_static(
            torch.autograd.function._SingleLevelFunction, "setup_context"
        )
        has_setup = inspect.getattr_static(cls, "setup_context") is not base_setup
        if has_setup and setup is None:
            unimplemented(f"{name}.setup_context is not a staticmethod written in Python")
        if kwargs:
            args, kwargs = _bind_keywords(forward, args, kwargs, setup_style=has_setup), {}
        if is_allowed_in_graph(cls):  # Note [allow_in_graph: one opaque call]
            self._guard_methods(tx, has_setup)
            return allowed_call(tx, apply_target(cls), args, {}, f"{name}.apply")
        if getattr(cls, "generate_vmap_rule", False) or _overrides(cls, "jvp"):
            unimplemented(f"{name} defines vmap/jvp rules (not traced)")
        objects = {}  # Note [Autograd functions: objects as arguments]
        for k, a in enumerate(args):
            if _apply_argument(a):
                continue
            fields = _object_fields(tx, a)
            if fields is None and not torch.is_grad_enabled():
                self._guard_methods(tx, has_setup)  # Note [Autograd functions: apply with grad
                ctx = AutogradCtxVariable(tuple(False for _ in args))  # mode off]
                setup_fn = setup if has_setup else None
                return apply_without_grad(tx, self, forward, setup_fn, ctx, list(args))
            if fields is None:
                unimplemented(f"{name}.apply argument {a} (only tensors and constants)")
            objects[k] = fields
        self._guard_methods(tx, has_setup)
        grad_on = torch.is_grad_enabled()
        needs = tuple(
            grad_on and isinstance(a, _tensor_cls()) and a.example.requires_grad for a in args
        )
        ctx = AutogradCtxVariable(needs)
        check_backward = any(needs) and tx.output.settings.backend_name != "eager"
        # Note [Autograd functions: appends to a list argument]
        lists = {k: a for k, a in enumerate(args) if type(a) is ListVariable}
        traced = [ListVariable(list(a.items)) if k in lists else a for k, a in enumerate(args)]
        dicts = {k: a for k, a in enumerate(args) if _constant_dict(a)}  # Note [Autograd ...
        for k, a in dicts.items():  # ... functions: a dict of constants as an argument]
            traced[k] = ConstDictVariable(dict(a.items))
        out = self._check_forward(
            tx, forward, setup if has_setup else None, ctx, traced, check_backward
        )
        for k, a in dicts.items():
            if dict(traced[k].items) != dict(a.items):
                unimplemented(f"{name}.forward changes a dict argument")
        appended = self._appended(lists, traced, out)
        result = self._apply_node(tx, args, out, ctx, any(needs), objects, appended)
        if appended:
            result, extras = result
            for k, items in extras.items():
                for item in items:
                    args[k].call_method(tx, "append", [item], {})
        return result

    def _appended(self, lists, traced, out):
        """Position -> (length before, items) of the list arguments forward appended to."""
        name = self.cls.__qualname__
        outs = out.items if isinstance(out, TupleVariable) else [out]
        appended = {}
        for k, orig in lists.items():
            now, n = traced[k].items, len(orig.items)
            if len(now) < n or any(a is not b for a, b in zip(now, orig.items)):
                unimplemented(f"{name}.forward changes a list argument other than by appending")
            for item in now[n:]:
                if not isinstance(item, _tensor_cls()) or item.example._is_view():
                    unimplemented(f"{name}.forward appends {item} to a list argument")
                if any(item is v for v in [*outs, *traced]):
                    unimplemented(f"{name}.forward appends an input or an output to a list")
            if len(now) > n:
                appended[k] = (n, now[n:])
        return appended

    def _guard_methods(self, tx, has_setup):
        """forward, backward and setup_context are pinned (what the checks traced)."""
        if self.cls_source is None:
            return
        for attr in ("forward", "backward", "setup_context")[: 3 if has_setup else 2]:
            src = AttrSource(self.cls_source, attr)
            tx.output.guards.add(GuardKind.ID_MATCH, src, getattr(self.cls, attr))

    def _method_source(self, name):
        """`MyFn.<name>` (a decorated forward's closure and defaults are read through it)."""
        return AttrSource(self.cls_source, name) if self.cls_source is not None else None

    def _check_forward(self, tx, forward, setup, ctx, args, check_backward):
        """Trace the forward (and setup_context, and the backward where the backend traces it)
        speculatively; drop their nodes; the forward's outputs."""
        what, start = "forward", start_serial()
        self.forward_start = start  # (objects the forward made are newer)
        with Speculation(tx) as spec:
            try:
                before = StoresBefore(tx)  # Note [Autograd functions: stores undone before
                out = self._trace_forward(tx, forward, setup, ctx, args)  # returning]
                before.drop_if_undone()
                if check_backward:  # (no backward runs without an input that needs grad)
                    what = "backward"
                    before = StoresBefore(tx)
                    self._trace_backward(tx, ctx, out)
                    before.drop_if_undone()
            except Unsupported as e:
                self.forward_broke = what == "forward"
                e.msg = f"{self.cls.__qualname__}.{what} is not traceable: {e.msg}"
                e.args = (e.msg, *e.args[1:])
                raise
            except BaseException:
                spec.drop_nodes()  # (an exception raised by the traced code)
                raise
        name = self.cls.__qualname__  # Note [Autograd functions: containers the forward changes]
        if spec.had_effects() and not leave_to_forward(tx, spec, start, name):
            unimplemented(f"{name} has side effects outside ctx")
        spec.drop_nodes()
        return out

    def _trace_forward(self, tx, forward, setup, ctx, args):
        source = self._method_source("forward")
        if _amp_wrapped(forward, "decorate_fwd"):
            # torch.amp.custom_fwd with autocast off (every compiled frame: the global-state
            # guard) sets two ctx attributes for its custom_bwd and calls the forward as is
            forward = forward.__wrapped__
            source = AttrSource(source, "__wrapped__") if source is not None else None
        if setup is None:
            return inline_call(tx, forward, [ctx, *args], {}, source)
        out = inline_call(tx, forward, list(args), {}, source)
        setup_args = [ctx, TupleVariable(list(args)), out]
        inline_call(tx, setup, setup_args, {}, self._method_source("setup_context"))
        return out

    def _trace_backward(self, tx, ctx, out):
        """Note [Autograd functions: the backward is checked too]
        aot_eager and kiln run the user's backward once, while tracing the joint graph: a print
        or a counter in it would happen at compile time only. So for those backends the
        backward is traced here as well (on zero gradients, grad mode off as the engine runs
        it), and one with effects outside ctx, or that kiln cannot trace, makes the apply
        call a graph break: it then runs in Python, its backward with it. Stores the backward
        itself undoes before it returns are no effect (Note [Autograd functions: stores undone
        before returning])."""
        backward = _static_function(self.cls, "backward")
        source = self._method_source("backward")
        if backward is None:
            unimplemented("backward is not a staticmethod written in Python")
        if _amp_wrapped(backward, "decorate_bwd"):
            backward = backward.__wrapped__  # autocast(enabled=False) around it: a no-op here
            source = AttrSource(source, "__wrapped__") if source is not None else None
        items = out.items if isinstance(out, TupleVariable) else [out]
        zeros = TorchVariable(torch.zeros_like)
        grads = [
            zeros.call_function(tx, [v], {}) if isinstance(v, _tensor_cls()) else v for v in items
        ]
        output, before = tx.output, getattr(tx.output, "checking_backward", False)
        output.checking_backward = True  # (Tensor.data reads as detach(): nothing here runs)
        try:
            inline_call(tx, backward, [ctx, *grads], {}, source)
        finally:
            output.checking_backward = before

    def _apply_node(self, tx, args, out, ctx, any_needs, objects, appended):
        """The call_function node `MyFn.apply(*args)` with the forward's output metadata."""
        items = out.items if isinstance(out, TupleVariable) else [out]
        if isinstance(out, BaseListVariable) and not isinstance(out, TupleVariable):
            unimplemented(f"{self.cls.__qualname__}.forward returned a list")
        tensors = [v for v in items if isinstance(v, _tensor_cls())]
        start = self.forward_start
        made = {k: o for k, v in enumerate(items) if (o := output_object(v, args, items, start))}
        if not tensors or not all(
            isinstance(v, _tensor_cls()) or _constant_output(v) or k in made
            for k, v in enumerate(items)
        ):
            unimplemented(f"{self.cls.__qualname__}.forward returned {out} (tensors expected)")
        examples, containers = [], {}
        for k, v in enumerate(items):
            if k in made:  # Note [Autograd functions: objects among the outputs]
                examples.append(None)
                continue
            if isinstance(v, BaseListVariable):  # a list/tuple of constants: made anew below
                containers[k] = v
                examples.append(None)
                continue
            if not isinstance(v, _tensor_cls()):
                examples.append(v.as_python_constant())
                continue
            differentiable = v.example.dtype.is_floating_point or v.example.dtype.is_complex
            grad = any_needs and differentiable and id(v.proxy) not in ctx.non_differentiable
            examples.append(_output_example(v.example, grad))
        dirty = self._dirty_outputs(args, items, ctx)
        for k in dirty:
            examples[k] = _dirty_example(items[k], examples[k])
        unpack = _Unpack(tx)
        baked = {k: a.as_python_constant() for k, a in enumerate(args) if _baked(a)}
        shown = [TupleVariable(objects[k][1]) if k in objects else a for k, a in enumerate(args)]
        node_args = tuple(unpack(a)[0] for k, a in enumerate(shown) if k not in baked)
        layouts = {k: (type_, names) for k, (type_, _, names) in objects.items()}
        grown = {k: (n, len(items)) for k, (n, items) in appended.items()}
        outs = {k: object_tensor_names(names, fields) for k, (_, names, fields) in made.items()}
        target = apply_target(self.cls, baked, layouts, grown, outs)
        node = tx.output.create_node("call_function", target, node_args, {})
        result = tuple(examples) if isinstance(out, TupleVariable) else examples[0]
        if made:
            return self._made_outputs(tx, node, out, examples, made, (dirty, containers, appended))
        if appended:
            if dirty or containers:
                unimplemented(f"{self.cls.__qualname__}.forward appends to a list and returns more")
            extra = [
                _output_example(i.example, False) for _, items in appended.values() for i in items
            ]
            flat = wrap_tensor_result(tx, node, (*examples, *extra), tensors[0].device).items
            main, rest = flat[: len(examples)], iter(flat[len(examples) :])
            wrapped = TupleVariable(main) if isinstance(out, TupleVariable) else main[0]
            extras = {k: [next(rest) for _ in items] for k, (_, items) in appended.items()}
            return wrapped, extras
        wrapped = wrap_tensor_result(tx, node, result, tensors[0].device)
        for k, v in containers.items():
            # apply returns forward's own (new) list: a new one of the same constants
            fresh = [ConstantVariable(i.as_python_constant()) for i in v.items]
            wrapped.items[k] = (
                type(v)(fresh) if type(v) is not TupleVariable else TupleVariable(fresh)
            )
        for k in dirty:  # apply returns the input itself, changed in place
            items[k].example = examples[k]
            if isinstance(out, TupleVariable):
                wrapped.items[k] = items[k]
            else:
                wrapped = items[k]
        return wrapped

    def _made_outputs(self, tx, node, out, examples, made, others):
        """The apply result where forward returned objects it made (Note [Autograd functions:
        objects among the outputs]): the node's outputs, then the objects' tensors."""
        if any(others) or not isinstance(out, TupleVariable):
            unimplemented(f"{self.cls.__qualname__}.forward returns an object and more")
        fields = [f for _, names, fs in made.values() for f in fs if isinstance(f, _tensor_cls())]
        extra = [_output_example(f.example, False) for f in fields]
        device = next(f.device for f in out.items if isinstance(f, _tensor_cls()))
        flat = wrap_tensor_result(tx, node, (*examples, *extra), device).items
        main, rest = list(flat[: len(examples)]), iter(flat[len(examples) :])
        for k, (cls, names, fs) in made.items():
            tensors = [next(rest) for f in fs if isinstance(f, _tensor_cls())]
            main[k] = remade_object(cls, names, fs, tensors)
        return TupleVariable(main)

    # Note [Autograd functions: mark_dirty]
    # A forward that changes an input in place and says so (`x.mul_(3); ctx.mark_dirty(x);
    # return x`) makes apply return that very tensor, its history rebased onto the function's
    # backward. The node `MyFn.apply(x)` does the change when it runs (eager FX, or the ATen
    # trace, which functionalizes it), so the apply result is the input's own TensorVariable (`z
    # is x`; later reads of x read the node after the apply ran) with the output's
    # requires_grad, and the node stays in the graph when its result is unused. Only tensors
    # made in the frame qualify: an input of the frame, a view, a leaf that requires grad (eager
    # raises) or a dirty tensor the forward does not return are a graph break.
    def _dirty_outputs(self, args, items, ctx):
        """Positions of the outputs that are inputs the forward marked dirty."""
        name = self.cls.__qualname__
        positions = []
        for d in ctx.dirty:
            if not any(d is a for a in args):
                unimplemented(f"{name}: ctx.mark_dirty of a tensor that is not an input")
            if d.source is not None:
                unimplemented(f"{name}: ctx.mark_dirty of an input of the compiled frame")
            if d.example._is_view() or (d.example.requires_grad and d.example.is_leaf):
                unimplemented(f"{name}: ctx.mark_dirty of {_dirty_kind(d.example)}")
            where = [k for k, v in enumerate(items) if v is d]
            if not where:
                unimplemented(f"{name}: a tensor marked dirty is not returned by forward")
            positions += where
        return positions

    def reconstruct(self, cg):
        forward = _static_function(self.cls, "forward")
        broke = cg.compile_callees and self.forward_broke
        if broke and forward is not None and forward.__closure__ is None:
            # Note [Autograd functions: a break inside forward]
            sub = function_with_forward(self.cls, forward, cg.callee(forward))
            if sub is not None:
                cg.load_object(sub.apply)
                return
        if self.cls_source is not None:
            self.cls_source.reconstruct(cg)
        else:
            cg.load_object(self.cls)
        cg.extend(emit.load_attr("apply"))

    def __repr__(self):
        return f"AutogradFunctionApplyVariable({self.cls.__qualname__})"


# Note [Autograd functions: a break inside forward]
# A forward kiln cannot trace to the end (a graph break in it) makes the apply call a graph
# break; like any user function that broke inside, the forward then runs as its own compiled
# frame. apply calls the forward it finds on its class, and the user's class is never changed
# (another thread, a reentrant apply, code reading cls.forward would see it). So the call is
# `Sub.apply(*args)` for a class kiln makes and owns: a subclass of the user's class, of the
# same name, whose only own attribute is forward, the compiled wrapper of cls's forward.
# backward, setup_context, vmap/jvp and every class attribute are read through to the user's
# class; ctx and grad_fn are a node class of the same name ("MyFnBackward"), made for Sub by
# Function's metaclass (so `type(ctx)` and `ctx._forward_cls` are Sub's). One Sub per
# (compiled wrapper, class), kept on the wrapper. A class with its own metaclass or
# __init_subclass__ (making a subclass could run user code) keeps the plain call: the
# forward then runs uncompiled.
def function_with_forward(cls, forward, compiled):
    """A kiln-owned subclass of `cls` whose forward is `compiled` (None where not made)."""
    if compiled is forward or type(cls) is not torch.autograd.function.FunctionMeta:
        return None
    if _overrides(cls, "__init_subclass__") or not isinstance(compiled, types.FunctionType):
        return None
    made = compiled.__dict__.setdefault("_kiln_function_classes", {})
    sub = made.get(cls)
    if sub is None:
        attrs = {
            "forward": staticmethod(compiled),
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        }
        sub = made[cls] = type(cls)(cls.__name__, (cls,), attrs)
    return sub


def function_instance(tx, cls, cls_source, args, kwargs):
    """`MyFn()`: Function.__init__ only warns (DeprecationWarning, replayed after the graph);
    the instance stands for its class, whose static methods are all it offers."""
    if args or kwargs or _overrides(cls, "__init__") or _overrides(cls, "__new__"):
        unimplemented(f"creating an instance of {cls.__qualname__} while tracing")
    message = (
        f"{cls} should not be instantiated. Methods on autograd functions are all static, so "
        "you should invoke them on the class itself. Instantiating an autograd function will "
        "raise an error in a future version of PyTorch."
    )
    warn = EffectCallVariable("warnings.warn", fn=warnings.warn)
    const = ConstantVariable
    # (Function.__init__'s stacklevel=2 names the frame that made the instance: level 1 here,
    # where the traced frames start at that one)
    warn.call_function(tx, [const(message), const(DeprecationWarning)], {"stacklevel": const(1)})
    return AutogradFunctionInstanceVariable(cls, cls_source)


class AutogradFunctionInstanceVariable(VariableTracker):
    """An instance of a torch.autograd.Function subclass made in the frame (`MyFn()`)."""

    def __init__(self, cls, cls_source=None, **kw):
        super().__init__(**kw)
        self.cls, self.cls_source = cls, cls_source

    def python_type(self):
        return self.cls

    def var_getattr(self, tx, name):
        if name == "apply":
            return AutogradFunctionApplyVariable(self.cls, self.cls_source)
        unimplemented(f"attribute {name!r} of an instance of {self.cls.__qualname__}")

    def reconstruct(self, cg):
        unimplemented(f"an instance of {self.cls.__qualname__} made in the frame escapes")


def apply_target(cls, baked=None, objects=None, grown=None, made=None):
    """The graph's target for `cls.apply`: a function named after the class (FX would print a
    torch function by its module path, and `torch.autograd.function.apply` does not exist).
    `objects`: position -> (class, attribute names) of the objects passed by their fields;
    `grown`: position -> (length, count) of the list arguments forward appends to (the items
    are returned after forward's outputs); `made`: output position -> tensor attribute names of
    the objects forward returns (returned after its outputs, None in their places)."""

    def apply(*args):
        if baked:  # the enum members and dicts back in their places (a new dict each call)
            it = iter(args)
            args = [
                _fresh(baked[k]) if k in baked else next(it) for k in range(len(args) + len(baked))
            ]
        if objects:
            args = [
                rebuilt_object(*objects[k], a) if k in objects else a for k, a in enumerate(args)
            ]
        out = cls.apply(*args)
        if made:
            extra = [getattr(out[k], n) for k, names in made.items() for n in names]
            return (*(None if k in made else o for k, o in enumerate(out)), *extra)
        if grown:
            outs = out if isinstance(out, tuple) else (out,)
            extra = [t for k, (n, m) in grown.items() for t in args[k][n : n + m]]
            return (*outs, *extra)
        return out

    apply.__name__ = apply.__qualname__ = f"{cls.__name__}_apply"
    apply.autograd_function = cls
    return apply


# Note [Autograd functions: objects as arguments]
# `MyFn.apply(x, cfg)` where cfg is a plain object (a dataclass, a class without __slots__, a
# custom __new__ or __getattribute__) whose instance attributes are all tensors and constants:
# the node gets cfg's attribute values as one tuple argument (tensors as graph values), and its
# target rebuilds an object of cfg's class from them before calling the real apply, so forward
# reads the same attributes. The speculative forward checked that forward only reads cfg (a
# store on it is an effect outside ctx: a break), so a copy stands for it. For an input of the
# frame the attribute names are guarded (the instance dict's keys) and each value is read
# through its source (tensors become graph inputs, constants are guarded).


# Note [Autograd functions: appends to a list argument]
# `MyFn.apply(x, found)` whose forward does `found.append(t)` for a tensor t it made: the trace
# of forward gets a copy of the list (so the append is no effect outside ctx), and what was
# appended to the copy is all that may change (no other change, no input, output or view
# appended). At run time the node's list argument is a new list each call; its target returns
# the items forward appended after forward's outputs (made under no_grad, they need no grad),
# and the traced list gets them appended after the node, as eager's list does (a list of the
# caller's is then changed as every traced list change is).


def rebuilt_object(cls, names, values):
    """An object of `cls` with these instance attributes (made without calling __init__)."""
    if issubclass(cls, torch.nn.Module):  # Note [Autograd functions: a module as argument]
        return rebuilt_module(cls, names, values)
    obj = object.__new__(cls)
    obj.__dict__.update(zip(names, values))
    return obj


def _object_fields(tx, var):
    """(class, field VariableTrackers, names) of a plain object apply can take by its fields,
    or None (Note [Autograd functions: objects as arguments])."""
    fields = module_fields(tx, var)
    if fields is not None:
        return fields
    cls = (
        var.python_type()
        if isinstance(var, (NewObjectVariable, UserDefinedObjectVariable))
        else None
    )
    if (
        cls is None
        or isinstance(var, AutogradCtxVariable)
        or issubclass(cls, torch.nn.Module)
        or cls.__new__ is not object.__new__
        or cls.__getattribute__ is not object.__getattribute__
        or hasattr(cls, "__getattr__")
        or "__slots__" in vars(cls)
        or "__dict__" not in dir(cls)
    ):
        return None
    if isinstance(var, NewObjectVariable):
        if var.dict_base is not None:
            return None
        names = list(var.attrs)
        fields = [var.attrs[n] for n in names]
    else:
        d = var.value.__dict__
        if type(d) is not dict or not all(type(n) is str for n in d) or var.source is None:
            return None
        if var.has_plain_attr(tx, "") is None:  # (guards the instance dict's keys)
            return None
        names = list(d)
        fields = [var.var_getattr(tx, n) for n in names]
    if not all(isinstance(f, _tensor_cls()) or _is_constant(f) for f in fields):
        return None
    return cls, fields, tuple(names)


def _amp_wrapped(fn, name):
    """A forward/backward decorated by torch.amp.custom_fwd/custom_bwd (`name` is the wrapper's
    name), while autocast is off."""
    code = fn.__code__
    return (
        code.co_name == name
        and code.co_filename.endswith(("amp/autocast_mode.py", "amp\\autocast_mode.py"))
        and isinstance(getattr(fn, "__wrapped__", None), types.FunctionType)
        and not torch._C._is_any_autocast_enabled()
    )


def _static_function(cls, name):
    static = inspect.getattr_static(cls, name, None)
    if isinstance(static, staticmethod) and isinstance(static.__func__, types.FunctionType):
        return static.__func__
    return None


def _bind_keywords(forward, args, kwargs, setup_style):
    """`MyFn.apply(x, factor=6)`: the arguments in forward's order.

    Note [Autograd functions: keyword arguments]
    Function.apply binds keywords in two ways. With setup_context it binds them in Python by
    inspect.signature(forward) and fills in every default. Without it, C++ places each keyword
    at its name's position in forward's code (after ctx; a functools.wraps wrapper's own names,
    not a __signature__) and fills in nothing: a gap before the last keyword raises TypeError,
    the trailing parameters keep forward's defaults. The node is the positional call that eager
    makes; a call that does not bind (TypeError) or a forward with *args/**kwargs breaks."""
    if setup_style:
        markers = [object() for _ in range(len(args) + len(kwargs))]
        by_marker = dict(zip(map(id, markers), [*args, *kwargs.values()]))
        try:
            bound = inspect.signature(forward).bind(
                *markers[: len(args)], **dict(zip(kwargs, markers[len(args) :]))
            )
        except TypeError:
            unimplemented("apply with arguments that do not bind (Python raises TypeError)")
        bound.apply_defaults()
        if bound.kwargs:
            unimplemented("apply with keyword-only arguments")
        out = []
        for value in bound.args:
            if id(value) in by_marker:
                out.append(by_marker[id(value)])
            elif is_literal(value):
                out.append(ConstantVariable(value))
            else:
                unimplemented("apply with a default argument that is not a constant")
        return out
    code = forward.__code__
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS) or code.co_kwonlyargcount:
        unimplemented("apply with keyword arguments for a forward with *args/**kwargs")
    names = code.co_varnames[1 : code.co_argcount]
    if len(args) > len(names) or set(kwargs) - set(names[len(args) :]):
        unimplemented("apply with arguments that do not bind (Python raises TypeError)")
    last = max(names.index(k) for k in kwargs)
    out = list(args)
    for name in names[len(args) : last + 1]:
        if name not in kwargs:
            unimplemented(f"apply missing the argument {name!r} (Python raises TypeError)")
        out.append(kwargs[name])
    return out


def _overrides(cls, name):
    base = inspect.getattr_static(torch.autograd.Function, name, None)
    return inspect.getattr_static(cls, name, None) is not base


def _is_constant(v):
    return v.is_python_constant() and is_literal(v.as_python_constant())


def _constant_output(v):
    """A constant output of forward, or a list/tuple of constants."""
    if isinstance(v, BaseListVariable) and v.python_type() in (list, tuple):
        return all(_is_constant(i) for i in v.items)
    return _is_constant(v)


def _baked(v):
    """An enum member argument, or a plain dict of literals (Note [Autograd functions: a dict
    of constants as an argument]): held by the node's target (FX cannot print the member, and
    would hand forward a read-only copy of the dict)."""
    if _constant_dict(v):
        return True
    return v.is_python_constant() and isinstance(v.as_python_constant(), enum.Enum)


# Note [Autograd functions: a dict of constants as an argument]
# `MyFn.apply(x, {"num_hash": 64, "use_fast_hash": True})` (transformers' YOSO passes its config
# so): a plain dict whose keys and values are literals is a constant of the call (its values are
# guarded as any constant the trace reads). The target hands forward a new dict of them each call.
# A forward that changes the dict would need the change written back to the caller's dict: the
# traced forward gets a copy, and a copy that changed is a graph break.
def _fresh(value):
    return dict(value) if type(value) is dict else value


def _constant_dict(v):
    """A plain dict whose keys and values are literals (immutable constants)."""
    if type(v) is not ConstDictVariable or v.user_cls is not dict or not v.is_python_constant():
        return False
    value = v.as_python_constant()
    return all(is_literal(k) and is_literal(i) for k, i in value.items())


def _apply_argument(v):
    """What the apply node can take: tensors, constants, enum members (baked into the target),
    and lists/tuples of those (a new list each call: a forward that mutates one breaks as a
    side effect outside ctx)."""
    if isinstance(v, _tensor_cls()) or _is_constant(v) or _baked(v):
        return True
    if isinstance(v, BaseListVariable) and v.python_type() in (list, tuple):
        return all(isinstance(i, _tensor_cls()) or _is_constant(i) for i in v.items)
    return False


def _dirty_kind(example):
    """What a tensor marked dirty is, in the words of eager's error where eager raises one."""
    if not example._is_view():
        return "a leaf Variable that requires grad (eager raises RuntimeError)"
    base = example._base
    if base is not None and base.is_leaf and base.requires_grad:
        return "a view of a leaf Variable that requires grad (eager raises RuntimeError)"
    return "a view"


def _dirty_example(var, example):
    """The example of an input returned changed in place: its own, with the output's grad."""
    if example.requires_grad == var.example.requires_grad:
        return var.example
    return example


def _output_example(example, requires_grad):
    """A new tensor like `example`: a non-leaf that requires grad when the output will."""
    out = example.detach()
    if requires_grad:
        with torch.enable_grad():
            out = out.requires_grad_(True).clone()
    return out


class AutogradCtxVariable(NewObjectVariable):
    """The `ctx` of a traced forward / setup_context: attributes, and the methods that only
    tell autograd what to keep (they change nothing while tracing: the real call does it)."""

    def __init__(self, needs_input_grad, **kw):
        super().__init__(torch.autograd.function.FunctionCtx, **kw)
        self.needs_input_grad = needs_input_grad
        self.saved = ()
        self.non_differentiable = set()
        self.dirty = []  # the tensors ctx.mark_dirty named (Note [Autograd functions: mark_dirty])

    def var_getattr(self, tx, name):
        if name == "needs_input_grad" and name not in self.attrs:
            return TupleVariable([ConstantVariable(b) for b in self.needs_input_grad])
        if name in ("saved_tensors", "saved_variables") and name not in self.attrs:
            return TupleVariable(list(self.saved))
        if name in _CTX_METHODS:
            return BoundMethodVariable(self, name)
        return super().var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if name not in _CTX_METHODS or kwargs:
            unimplemented(f"ctx.{name} in an autograd.Function forward")
        if name == "save_for_backward" or name == "save_for_forward":
            for a in args:
                if not (isinstance(a, _tensor_cls()) or _is_constant(a)):
                    unimplemented(f"ctx.{name} of {a}")
            if name == "save_for_backward":
                self.saved = tuple(args)
        elif name == "mark_non_differentiable":
            for a in args:
                if not isinstance(a, _tensor_cls()):
                    unimplemented(f"ctx.mark_non_differentiable of {a}")
                self.non_differentiable.add(id(a.proxy))
        elif name == "set_materialize_grads":
            if len(args) != 1 or not args[0].is_python_constant():
                unimplemented("ctx.set_materialize_grads with a non-constant")
        elif name == "mark_dirty":  # the forward mutated these inputs in place
            for a in args:
                if not isinstance(a, _tensor_cls()):
                    unimplemented(f"ctx.mark_dirty of {a}")
                self.dirty.append(a)
        else:
            unimplemented(f"ctx.{name} in an autograd.Function forward")
        return ConstantVariable(None)

    def setattr(self, tx, name, value):
        if name in ("needs_input_grad", "saved_tensors", "saved_variables") or name in _CTX_METHODS:
            unimplemented(f"assignment to ctx.{name}")
        self.store_attr(name, value)

    def reconstruct(self, cg):
        unimplemented("the ctx of an autograd.Function escapes its forward")

    def __repr__(self):
        return "AutogradCtxVariable()"


_CTX_METHODS = (
    "save_for_backward",
    "save_for_forward",
    "mark_non_differentiable",
    "set_materialize_grads",
    "mark_dirty",
)
