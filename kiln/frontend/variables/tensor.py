"""Tensors: an FX node, its meta example value, and the real device."""

import inspect
import operator

import torch

from kiln import config
from kiln.exc import CompiledAutogradCall, unimplemented
from kiln.frontend import frame_shapes
from kiln.frontend.dispatch_modes import modes_traced
from kiln.frontend.guards import GuardKind
from kiln.frontend.source import AttrSource
from kiln.frontend.variables import frame_leaves, optim, tensor_attrs
from kiln.frontend.variables.base import VariableTracker, wrap_constant_like, wrap_value
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.exceptions import raise_observed
from kiln.frontend.variables.lists import ListIteratorVariable, SizeVariable, TupleVariable
from kiln.frontend.variables.misc import TensorMethodVariable
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.frontend.variables.tensor_hooks import (
    register_hook,
    register_post_accumulate_grad_hook,
)
from kiln.frontend.variables.tensor_new import tensor_new
from kiln.frontend.variables.torch import _call_torch, call_tensor_op
from kiln.frontend.variables.user_defined import _dunder_missing
from kiln.symbolic import shape_env
from kiln.symbolic.fake import ProxyTensor

# Attributes answered from metadata at trace time (specialised; guarded by TENSOR_MATCH).
_META_ATTRS = {
    "dtype": lambda v: v.example.dtype,
    "device": lambda v: v.device,
    "ndim": lambda v: v.example.dim(),
    "requires_grad": lambda v: tensor_attrs.tensor_requires_grad(v),
    "is_leaf": lambda v: v.example.is_leaf if v.source is None else v.is_leaf_input,
    "layout": lambda v: v.example.layout,
    "is_cuda": lambda v: v.device.type == "cuda",
    "is_cpu": lambda v: v.device.type == "cpu",
    "is_sparse": lambda v: v.example.is_sparse,
    "is_quantized": lambda v: v.example.is_quantized,
    "is_meta": lambda v: v.device.type == "meta",
    "is_nested": lambda v: v.example.is_nested,
    "is_mkldnn": lambda v: False,
    "is_sparse_csr": lambda v: False,
    "is_mps": lambda v: v.device.type == "mps",
    "is_xpu": lambda v: v.device.type == "xpu",
}

# Attributes the program may change after a break (backward sets .grad): Note [Generators:
# a drained rest reads only its own state].
_CHANGING_ATTRS = {"grad", "requires_grad", "is_leaf"}

# Attributes that are tensors computed from the tensor: recorded as getattr nodes.
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}

# Methods answered from metadata at trace time.
_META_METHODS = {
    "dim": lambda v: v.example.dim(),
    "ndimension": lambda v: v.example.dim(),
    "numel": None,  # symbolic for a dynamic tensor (Note [Shapes: SymNodeVariable])
    "nelement": None,
    "element_size": lambda v: v.example.element_size(),
    "is_floating_point": lambda v: v.example.is_floating_point(),
    "is_complex": lambda v: v.example.is_complex(),
    "is_contiguous": None,  # takes memory_format
    "get_device": lambda v: v.device.index if v.device.type != "cpu" else -1,
    "stride": None,
    "size": None,
}

# What a batched tensor inside torch.vmap answers differently from the traced example: not folded
# while a vmap body is traced (Note [Vmap: metadata] in functorch_vmap.py).
_VMAP_UNFOLDED = frozenset({"requires_grad", "is_leaf", "stride", "is_contiguous"})

# Methods that read tensor data or leave the graph: a graph break, never a guess.
_BREAKING_METHODS = {
    "item": "Tensor.item() reads tensor data",
    "tolist": "Tensor.tolist() reads tensor data",
    "numpy": "Tensor.numpy() leaves torch",
    "__bool__": "bool() of a tensor reads tensor data",
    "__int__": "int() of a tensor reads tensor data",
    "__float__": "float() of a tensor reads tensor data",
    "backward": "Tensor.backward() inside the compiled frame",
    "register_hook": "Tensor.register_hook() inside the compiled frame",
    "data_ptr": "Tensor.data_ptr()",
    "nonzero": "Tensor.nonzero() has a data-dependent shape",
    "unique": "Tensor.unique() has a data-dependent shape",
    "masked_select": "masked_select has a data-dependent shape",
}

_NOT_FOUND = object()

# Methods answered by another family's module (Tensor.numpy -> numpy_vars), registered by it.
_METHOD_HOOKS = {}


def register_method(name, fn):
    """`t.name(...)` is answered by fn(tx, t, args, kwargs)."""
    _METHOD_HOOKS[name] = fn


# (is_value, variable class) for example values of tensor subclasses kiln traces, registered by
# their family's module (Note [Tensors: wrapper subclass inputs] in tensor_subclass.py)
_SUBCLASS_VARIABLES = []


def register_subclass_variable(is_value, cls):
    """Traced tensors whose example satisfies is_value are instances of cls."""
    _SUBCLASS_VARIABLES.append((is_value, cls))


def tensor_variable(proxy, example, device, **kwargs):
    """The variable of a traced tensor: a TensorVariable, or its subclass family's variable."""
    if type(example) is not torch.Tensor:
        for is_value, cls in _SUBCLASS_VARIABLES:
            if is_value(example):
                return cls(proxy, example, device, **kwargs)
        if not isinstance(example, (ProxyTensor, torch.nn.Parameter)):
            unimplemented(f"a traced op returned a {type(example).__name__} (a tensor subclass)")
    return TensorVariable(proxy, example, device, **kwargs)


class TensorVariable(VariableTracker):
    """A tensor in the graph under construction."""

    wrapper_subclass = False

    def __init__(self, proxy, example, device, *, source=None, is_leaf_input=True):
        super().__init__(source=source)
        self.proxy = proxy
        self.example = example
        self.device = device
        self.is_leaf_input = is_leaf_input

    def python_type(self):
        parameter = self.__dict__.get("parameter_type", self.proxy.meta.get("is_parameter"))
        return torch.nn.Parameter if parameter else torch.Tensor

    def truthy(self, tx):
        unimplemented(
            "Data-dependent branching: bool() of a tensor reads tensor data (data-dependent branch)"
        )

    def traced_sizes(self):
        """The sizes of the traced value: ints, and SymNodes for dynamic dimensions."""
        return [shape_env.from_torch(s) for s in self.example.shape]

    def is_symbolic(self):
        """Whether some size of this tensor is symbolic."""
        return any(isinstance(s, shape_env.SymNode) for s in self.traced_sizes())

    def size_var(self, tx=None, dim=None):
        """`x.shape` / `x.size(dim)`: constants, or SymNodeVariables (size nodes in the graph)."""
        sizes = self.traced_sizes()
        if dim is None:
            return SizeVariable([self._size_item(tx, d, s) for d, s in enumerate(sizes)])
        if not -len(sizes) <= dim < len(sizes):
            unimplemented(f"Tensor.size({dim}) out of range for {len(sizes)} dimensions")
        return self._size_item(tx, dim % len(sizes), sizes[dim])

    def _size_item(self, tx, dim, size):
        if not isinstance(size, shape_env.SymNode):
            return ConstantVariable(size)
        return tx.output.size_node(self, dim, size)

    def numel_var(self, tx):
        """`x.numel()`: a constant, or a node `x.numel()` with the symbolic product."""
        n = 1
        for s in self.traced_sizes():
            n = n * s
        if not isinstance(n, shape_env.SymNode):
            return ConstantVariable(n)
        node = tx.output.create_node("call_method", "numel", (self.proxy,), {})
        return SymNodeVariable.create(tx, node, n)

    def var_getattr(self, tx, name):
        if modes_traced(tx):  # Note [Frames: tracing a user's torch function modes]
            from kiln.frontend.variables import function_modes

            if function_modes.active(tx) and function_modes.is_getter(name):
                return function_modes.tensor_getter(tx, self, name)
        stored = tensor_attrs.load_attr(tx, self, name)  # Note [Tensors: attributes stored ...]
        if stored is not None:
            return stored
        if getattr(self, "data_assigned", False) and name in ("grad", "_grad", "grad_fn"):
            unimplemented(f"Tensor.{name} of a tensor whose .data was assigned in the frame")
        if name == "shape":
            return self.size_var(tx)
        if name == "__class__":  # pinned by the tensor's guard (its exact type)
            return wrap_constant_like(tx, self.python_type())
        if name in _CHANGING_ATTRS:  # (a generator drained at a break reads them too early)
            tx.output.side_effects.note_read(("tensor attribute", name))
        if name in _META_ATTRS:
            if name in _VMAP_UNFOLDED and tx.output.__dict__.get("functorch_levels"):
                unimplemented(f"Tensor.{name} inside a traced torch.vmap (Note [Vmap: metadata])")
            return ConstantVariable(_META_ATTRS[name](self))
        if name in _TENSOR_ATTRS:
            return call_tensor_op(
                tx, "call_function", getattr, [self, ConstantVariable(name)], {}, what=name
            )
        if name == "grad" and self.source is not None:
            return optim.read_grad(tx, self)
        if name in ("grad", "_grad") and self.source is None:
            return frame_leaves.frame_grad(tx, self)  # Note [Autograd: leaves made in the frame]
        if name == "grad_fn" and frame_leaves.is_frame_leaf(tx, self):
            return ConstantVariable(None)  # (a leaf has no grad_fn)
        if name == "data" and getattr(tx.output, "checking_backward", False):
            # an autograd.Function's backward being checked (its nodes are dropped; the engine
            # runs the real one): `.data` is an alias outside autograd, as detach() is
            return TensorMethodVariable(self, "detach").call_function(tx, [], {})
        if name == "data" and not self.example.requires_grad:
            # no autograd here: `.data` is the same storage and metadata, as detach() gives
            return TensorMethodVariable(self, "detach").call_function(tx, [], {})
        if name == "data" and self.example.requires_grad:
            tx.output.eager_autograd = True  # Note [Output graph: a write autograd cannot see]
        if name == "grad_fn" and not self.example.requires_grad:
            return ConstantVariable(None)  # (a grad_fn makes a tensor require grad)
        if name in ("grad", "data", "grad_fn", "_version", "storage"):
            unimplemented(f"Tensor.{name} inside the compiled frame")
        if callable(getattr(torch.Tensor, name, None)):
            return TensorMethodVariable(self, name)
        return self.missing_attr(tx, name)

    def setattr(self, tx, name, value):
        """`x.name = value` (Note [Tensors: attributes stored in the frame])."""
        return tensor_attrs.store_attr(tx, self, name, value)

    def hasattr(self, tx, name):
        """hasattr(x, name): Tensor's class attributes, else the tensor's instance __dict__
        (guarded). (builtin hasattr answers tensors itself today, from the class only.)"""
        if inspect.getattr_static(self.python_type(), name, _NOT_FOUND) is not _NOT_FOUND:
            return ConstantVariable(True)
        if tensor_attrs.load_attr(tx, self, name) is not None:
            return ConstantVariable(True)
        return ConstantVariable(self._instance_dict(tx, name) is not None)

    def _instance_dict(self, tx, name):
        """The real tensor's own attribute `name` (wrapped from its source), else None; the keys
        of its __dict__ are guarded (a graph-made tensor has none)."""
        if self.source is None:
            return None
        if getattr(self, "data_assigned", False):
            unimplemented(f"Tensor attribute {name!r} of a tensor whose .data was assigned")
        real = next((v for _, v, n in tx.output.graph_inputs if n is self.proxy), None)
        d = getattr(real, "__dict__", None)
        if type(d) is not dict:
            unimplemented(f"Tensor attribute {name!r} (the tensor has no plain __dict__)")
        tx.output.guards.add(
            GuardKind.DICT_KEYS, AttrSource(self.source, "__dict__"), (dict, tuple(d))
        )
        if name in d:
            return wrap_value(tx, d[name], AttrSource(self.source, name))
        return None

    def missing_attr(self, tx, name):
        """`x.name` that Tensor's class does not have: AttributeError (raised in the traced
        code), unless the tensor may carry it in its instance __dict__ (a break)."""
        cls = self.python_type()
        _dunder_missing(cls, name)
        if inspect.getattr_static(cls, name, _NOT_FOUND) is not _NOT_FOUND:
            unimplemented(f"Tensor attribute {name!r}")
        found = self._instance_dict(tx, name)
        if found is not None:
            return found
        raise_observed(tx, AttributeError, f"{cls.__name__!r} object has no attribute {name!r}")

    def call_method(self, tx, name, args, kwargs):
        if modes_traced(tx):  # Note [Frames: tracing a user's torch function modes]
            from kiln.frontend.variables import function_modes

            if function_modes.active(tx):
                done = function_modes.tensor_method(tx, self, name, args, kwargs)
                if done is not None:
                    return done
        if name == "backward" and config.compiled_autograd:
            raise CompiledAutogradCall("Tensor.backward() runs through compiled autograd")
        if name == "backward" and config.trace_autograd_ops:
            return frame_leaves.backward(tx, self, args, kwargs)  # Note [Autograd: leaves made...]
        if name == "register_hook":
            return register_hook(tx, self, args, kwargs)
        if name == "register_post_accumulate_grad_hook":
            return register_post_accumulate_grad_hook(tx, self, args, kwargs)
        if name in optim.METHOD_REWRITES:  # Note [Optimizers: scalar tensors as op scalars]
            done = optim.rewrite_method(
                tx, self, name, args, kwargs, _call_torch(tx), TensorVariable
            )
            if done is not None:
                return done
        if name in _METHOD_HOOKS:
            return _METHOD_HOOKS[name](tx, self, args, kwargs)
        if name in _BREAKING_METHODS:
            unimplemented(_BREAKING_METHODS[name])
        if name in ("size", "stride") or name in _META_METHODS:
            if name in _VMAP_UNFOLDED and tx.output.__dict__.get("functorch_levels"):
                unimplemented(f"Tensor.{name}() inside a traced torch.vmap (Note [Vmap: metadata])")
            cargs = [a.as_python_constant() for a in args]
            ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
            if name == "size":
                if not cargs and not ckw:
                    return self.size_var(tx)
                return self.size_var(tx, cargs[0] if cargs else ckw["dim"])
            if name in ("numel", "nelement"):
                return self.numel_var(tx)
            if name == "stride":
                strides = frame_shapes.static_strides(self.example)
                if not cargs and not ckw:
                    return TupleVariable([ConstantVariable(s) for s in strides])
                return ConstantVariable(strides[cargs[0] if cargs else ckw["dim"]])
            if name == "is_contiguous":
                return ConstantVariable(self.example.is_contiguous(*cargs, **ckw))
            return ConstantVariable(_META_METHODS[name](self))
        if name == "new":
            return tensor_new(tx, self, args, kwargs)
        if name == "__len__":
            if self.example.dim() == 0:
                unimplemented("len() of a 0-d tensor")
            return self.size_var(tx, 0)
        if name == "__iter__" and not args and not kwargs:  # x.__iter__(): iter(x)
            return ListIteratorVariable.over(tx, self)
        if name == "__getitem__":
            return call_tensor_op(tx, "call_function", operator.getitem, [self, *args], {})
        if name == "__setitem__" and len(args) == 2 and not kwargs:
            tx.tensor_setitem(self, *args)  # (an in-place node; `x.__setitem__(i, v)` is None)
            return ConstantVariable(None)
        if name == "requires_grad_" and self.example.requires_grad and not kwargs:
            if all(a.is_python_constant() and a.as_python_constant() is True for a in args):
                return self  # (already requires grad: nothing changes)
        if name == "requires_grad_" and self.source is None:
            return frame_leaves.requires_grad_(tx, self, args, kwargs)
        if name in ("requires_grad_", "retain_grad", "share_memory_", "pin_memory"):
            unimplemented(f"Tensor.{name}() changes tensor state")
        if name == "type_as" and not args:
            unimplemented("Tensor.type_as() without an argument")
        return call_tensor_op(tx, "call_method", name, [self, *args], kwargs)

    def bool_in_graph(self, tx):
        """`bool(t)` computed by the graph, or None (Note [Shapes: a bool read from tensor data])."""
        from kiln.frontend.variables import data_bools

        return data_bools.tensor_bool(tx, self)

    def unpack_var_sequence(self, tx):
        if self.example.dim() == 0:
            unimplemented("iteration over a 0-d tensor")
        n = frame_shapes.static_size(self.example, 0)
        return [
            call_tensor_op(tx, "call_function", operator.getitem, [self, ConstantVariable(i)], {})
            for i in range(n)
        ]

    def reconstruct(self, cg):
        cg.reconstruct_tensor(self)

    def __repr__(self):
        return (
            f"TensorVariable({self.proxy.name}, {tuple(self.example.shape)}, {self.example.dtype})"
        )
