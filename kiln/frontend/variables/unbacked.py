"""`t.item()` kept in the graph under config.capture_scalar_outputs: scalars read from tensor data.

Note [Shapes: item() in the graph]
With `config.capture_scalar_outputs` (torch.compile's switch of the same name), `t.item()` of a
one-element int or float tensor is a node `t.item()` of the graph whose value is an unbacked
symbol (Note [Shapes: unbacked scalars]): no value at trace time, never guarded.
  - An int is a SymNodeVariable: `max(n, 1024)`, `n + 1` stay symbolic and a tensor op takes it
    as a size (`torch.ones(max(x.item(), 1024))`).
  - A float is an ItemFloatVariable: `torch.tensor([v.item()])` takes it (tensor_of_list).
  - Anything that needs its value in Python (a branch, `int()`, formatting, an op kiln does not
    model with it) is a graph break with a data-dependent reason.
  - Left live at a break or returned, a float leaves the graph as `torch.scalar_tensor(v,
    dtype=float64)` and Python reads it back with `.item()` (exact: a double holds any float32 or
    float64 value), as torch.compile does; an int leaves as an int output of the graph.
`torch.split(x, [n, m])` / `x.split([n, x.size(0) - n])` by such ints gives views of those sizes
(the op checks their sum when it runs, as eagerly); `x.narrow(dim, start, n)` is a view of size n
where torch._check's facts show 0 <= n <= size - start, and `x[a:b]` (first dim) with such a
bound a view of size b - a where they show 0 <= a <= b <= size (else a break naming the check). `t.tolist()` of a 1-d tensor of static size is `[t[0].item(), t[1].item(), ...]`.
Without the switch, `.item()` is a graph break (the default, as in torch.compile); under
`fullgraph=True` it is always kept in the graph, as torch.compile does (`output.captures_scalars`):
the break would be an error there.
A bool tensor's item is a DataBoolVariable (Note [Shapes: a bool read from tensor data]);
complex tensors, and tensors whose element count is symbolic, still break.
"""

import math
import operator

import sympy
import torch

from kiln.bytecode import emit
from kiln.exc import DataDependentError, unimplemented
from kiln.frontend.variables import data_bools, data_sized, runtime_asserts, unspec_float  # noqa: F401
from kiln.frontend.variables import tensor as tensor_vars
from kiln.frontend.variables import torch as torch_vars
from kiln.frontend.variables.base import VariableTracker
from kiln.frontend.variables.constant import ConstantVariable
from kiln.frontend.variables.lists import BaseListVariable, ListVariable
from kiln.frontend.variables.sym import SymNodeVariable
from kiln.symbolic import shape_env
from kiln.symbolic.fake import ProxyTensor


def tensor_number(tx, fn, tensor):
    """`float(t)` / `int(t)` of a one-element tensor: `t.__float__()` is float(t.item()), read
    as the item of t in float64 (int64 and bool values convert to the same double Python's
    float() gives); `t.__int__()` of an int or bool tensor is its int64 item. int() of a float
    tensor (truncation, an error for inf and NaN) is not modelled: a graph break."""
    dtype = tensor.example.dtype
    if dtype.is_complex:
        unimplemented(f"{fn.__name__}() of a complex tensor")
    if fn is int and dtype.is_floating_point:
        unimplemented("int() of a floating-point tensor reads tensor data")
    if fn is float and dtype != torch.float64:
        tensor = tensor.call_method(tx, "to", [ConstantVariable(torch.float64)], {})
    elif fn is int and dtype != torch.int64:
        tensor = tensor.call_method(tx, "to", [ConstantVariable(torch.int64)], {})
    return tensor_item(tx, tensor, [], {})


def tensor_item(tx, tensor, args, kwargs):
    """`t.item()`: a graph node with an unbacked value, or a graph break (see the note)."""
    if not tx.output.captures_scalars:
        unimplemented("Tensor.item() reads tensor data")
    if args or kwargs:
        unimplemented("Tensor.item() with arguments")
    ex = tensor.example
    sizes = [shape_env.from_torch(s) for s in ex.shape]
    if any(isinstance(s, shape_env.SymNode) for s in sizes):
        unimplemented("Tensor.item() of a tensor with a symbolic size")
    numel = 1
    for s in sizes:
        numel *= s
    if numel != 1:
        unimplemented("Tensor.item() of a tensor of more than one element (eager raises)")
    if ex.dtype == torch.bool:
        return data_bools.bool_item(tx, tensor)  # Note [Shapes: a bool read from tensor data]
    if ex.dtype.is_complex:
        unimplemented(f"Tensor.item() of a {ex.dtype} tensor")
    kind = "float" if ex.dtype.is_floating_point else "int"
    output = tx.output
    node = output.create_node("call_method", "item", (tensor.proxy,), {})
    value = output.shape_env.create_unbacked(kind)
    node.meta["example_value"] = shape_env.to_torch(value)
    if kind == "int":  # (its tensor: Note [Shapes: torch._check of an unbacked fact])
        output.__dict__.setdefault("item_nodes", {})[value.expr] = node
        return SymNodeVariable(node, value)
    return ItemFloatVariable(output, node, value)


# a float item's arithmetic kept in the graph: Python's float operators on the run-time values
# (as an unspecialised float's, but no power: a negative base with a fraction is complex)
_FLOAT_ARITH = {k: op for k, op in unspec_float.ARITH.items() if op is not operator.pow}


_FLOAT_COMPARE = (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne)


def _float_operand(v):
    """The FX argument of a float item, a literal int/float, or an int size; else None."""
    if hasattr(v, "op_argument"):
        return v.proxy
    if isinstance(v, ConstantVariable) and type(v.value) in (int, float):
        return v.value
    if isinstance(v, SymNodeVariable) and getattr(v.value, "kind", "int") == "int":
        return v.proxy
    return None


def float_binary(tx, fn, a, b):
    """`v <op> w` (+ - * /) with a float read by `.item()` and a number: a node of the graph whose
    value is another such float (Python's float arithmetic at run time, its errors included), or
    None."""
    op = _FLOAT_ARITH.get(fn)
    pa, pb = _float_operand(a), _float_operand(b)
    if fn in _FLOAT_COMPARE and pa is not None and pb is not None:
        # a Python bool of a value only the run knows: torch's data-dependent error (a break)
        raise DataDependentError(
            f"data-dependent: {fn.__name__} of a float read from tensor data (`.item()`)"
        )
    if op is None or pa is None or pb is None:
        return None
    output = tx.output
    node = output.create_node("call_function", op, (pa, pb), {})
    value = output.shape_env.create_unbacked("float")
    node.meta["example_value"] = shape_env.to_torch(value)
    return ItemFloatVariable(output, node, value)


class ItemFloatVariable(VariableTracker):
    """A float read from tensor data in the graph (Note [Shapes: item() in the graph])."""

    def __init__(self, output, proxy, value, **kw):
        super().__init__(**kw)
        self.output = output
        self.proxy = proxy
        self.value = value  # an unbacked SymNode of kind float
        self._tensor = None

    def python_type(self):
        return float

    def is_python_constant(self):
        return False

    def as_python_constant(self):
        unimplemented("data-dependent: a float read from tensor data (`.item()`) used in Python")

    def truthy(self, tx):
        self.as_python_constant()

    def op_argument(self):
        """(FX argument, meta stand-in) as a scalar argument of a tensor op: the graph computes
        with the value; the meta run takes 0.5 (settle_args already specialised the floats of
        ops whose output metadata depends on them, where this one breaks)."""
        return self.proxy, 0.5

    def bool_in_graph(self, tx):
        """`bool(v)`: Note [Shapes: a bool read from tensor data]."""
        return data_bools.scalar_bool(tx, self, self.as_tensor)

    def as_tensor(self, dtype=torch.float64):
        """`torch.scalar_tensor(v, dtype=dtype)` in the graph."""
        node = self.output.create_node(
            "call_function", torch.scalar_tensor, (self.proxy,), {"dtype": dtype}
        )
        example = torch.empty((), dtype=dtype, device="meta")
        node.meta["example_value"] = example
        return tensor_vars.TensorVariable(node, example, torch.device("cpu"))

    def reconstruct(self, cg):
        t = self._tensor
        if t is None or getattr(t.proxy, "_erased", False):
            t = self._tensor = self.as_tensor()
        cg.load_object(torch.Tensor.item, push_null=True)
        cg.reconstruct_tensor(t)
        cg.extend(emit.call(1))

    def __repr__(self):
        return f"ItemFloatVariable({self.proxy.name})"


def is_item_scalar(v):
    """An int or float read by `.item()` in the graph (an unbacked value)."""
    if isinstance(v, ItemFloatVariable):
        return True
    return isinstance(v, SymNodeVariable) and not v.value.has_hint()


def scalar_leaf(tx, v, dtype):
    """An item scalar as a 0-d tensor of `dtype` in the graph (torch.tensor of it)."""
    node = tx.output.create_node("call_function", torch.scalar_tensor, (v.proxy,), {"dtype": dtype})
    example = torch.empty((), dtype=dtype, device="meta")
    node.meta["example_value"] = example
    return tensor_vars.TensorVariable(node, example, torch.device("cpu"))


def leaf_dtype(v):
    """The dtype torch.tensor infers for an item scalar (as for a Python float or int)."""
    return torch.get_default_dtype() if isinstance(v, ItemFloatVariable) else torch.int64


_TOLIST_ITEMS = 1024  # more elements than this: a break (each is one .item() in the graph)


def tensor_tolist(tx, tensor, args, kwargs):
    """`t.tolist()`: nested lists of `t[i, j].item()` in the graph (a 0-d tensor gives the scalar
    itself, as eagerly). A symbolic size is specialised (the list's length is a Python fact, a
    guard), as torch does; a size read from tensor data breaks the graph."""
    if not tx.output.captures_scalars:
        unimplemented("Tensor.tolist() reads tensor data")
    ex = tensor.example
    sizes = [shape_env.from_torch(n) for n in ex.shape]
    if args or kwargs or any(_is_unbacked_size(n) for n in sizes):
        unimplemented("Tensor.tolist() of a tensor whose size is read from tensor data")
    sizes = [n if isinstance(n, int) else n.env.specialize(n.expr) for n in sizes]
    if math.prod(sizes) > _TOLIST_ITEMS:
        unimplemented(f"Tensor.tolist() of more than {_TOLIST_ITEMS} elements")
    return _tolist(tx, tensor, sizes)


def _is_unbacked_size(n):
    return not isinstance(n, int) and bool(n.expr.free_symbols & n.env.unbacked)


def _tolist(tx, tensor, sizes):
    if not sizes:
        return tensor_item(tx, tensor, [], {})
    items = []
    for k in range(sizes[0]):
        element = tensor.call_method(tx, "__getitem__", [ConstantVariable(k)], {})
        items.append(_tolist(tx, element, sizes[1:]))
    return ListVariable(items)


def split_by_items(tx, fn, args, kwargs):
    """`torch.split(x, [n, m, ...], dim)` with sizes read by `.item()`: views of x whose sizes
    are those symbols; torch's split checks that they add up when the graph runs (as eagerly).
    None (torch.split as usual) when no size is such a value."""
    if len(args) < 2 or not isinstance(args[1], BaseListVariable):
        return None
    sizes = args[1].items
    if not any(is_item_scalar(v) for v in sizes):
        return None
    x = args[0]
    dim = args[2] if len(args) > 2 else kwargs.get("dim", ConstantVariable(0))
    if len(args) > 3 or set(kwargs) - {"dim"} or not isinstance(x, tensor_vars.TensorVariable):
        unimplemented("torch.split by sizes read from tensor data with these arguments")
    if (
        not all(
            is_item_scalar(v) or (isinstance(v, ConstantVariable) and type(v.value) is int)
            for v in sizes
        )
        or not dim.is_python_constant()
    ):
        unimplemented("torch.split by sizes read from tensor data with these arguments")
    ex = x.example
    dim = dim.as_python_constant()
    dim = dim + ex.dim() if dim < 0 else dim
    x_sizes = [shape_env.from_torch(n) for n in ex.shape]
    x_strides = [shape_env.from_torch(n) for n in ex.stride()]
    if any(isinstance(n, shape_env.SymNode) for n in (*x_sizes, *x_strides)):
        unimplemented("torch.split by sizes read from tensor data of a tensor of symbolic size")
    offset = shape_env.from_torch(ex.storage_offset())
    parts = []
    for v in sizes:
        n = v.value
        part_sizes = [n if d == dim else x_sizes[d] for d in range(ex.dim())]
        parts.append(_view(ex, x.device, part_sizes, x_strides, offset))
        offset = offset + n * x_strides[dim]
    node_sizes = [v.proxy if is_item_scalar(v) else v.value for v in sizes]
    node = tx.output.create_node("call_function", torch.split, (x.proxy, node_sizes, dim), {})
    return torch_vars.wrap_tensor_result(tx, node, tuple(parts), x.device)


def _view(ex, device, sizes, strides, offset):
    """A fake view of `ex` with these (partly unbacked) sizes and storage offset (its meta
    tensor's sizes are the hints, `size - u0` clamped at 0: only the traced sizes are read)."""
    meta = torch.empty_strided(
        [max(0, shape_env.hint_of(n)) for n in sizes], strides, dtype=ex.dtype, device="meta"
    )
    return ProxyTensor(meta, device, None, ex.requires_grad, sizes, strides, offset)


def _as_method(tx, name, tensor, args, kwargs):
    return torch_vars.call_tensor_op(tx, "call_method", name, [tensor, *args], kwargs)


def split_method(tx, tensor, args, kwargs):
    """`x.split([n, m], dim)`: as torch.split (sizes read from tensor data), else as usual."""
    done = split_by_items(tx, torch.split, [tensor, *args], dict(kwargs))
    return done if done is not None else _as_method(tx, "split", tensor, args, kwargs)


def narrow_by_item(tx, tensor, args, kwargs):
    """`x.narrow(dim, start, n)` with n read from tensor data: a view of size n, where the facts
    torch._check recorded show 0 <= n <= size - start (eager's own checks, asserted in the graph);
    else a break. Other narrows as usual."""
    call = dict(zip(("dim", "start", "length"), args)) | kwargs
    n = call.get("length")
    if len(call) != 3 or len(args) + len(kwargs) != 3 or not is_item_scalar(n):
        return _as_method(tx, "narrow", tensor, args, kwargs)
    dim, start = call["dim"], call["start"]
    ex = tensor.example
    if not (dim.is_python_constant() and start.is_python_constant()) or isinstance(
        n, ItemFloatVariable
    ):
        unimplemented("Tensor.narrow by a length read from tensor data with these arguments")
    dim, start = dim.as_python_constant(), start.as_python_constant()
    dim = dim + ex.dim() if dim < 0 else dim
    sizes = [shape_env.from_torch(v) for v in ex.shape]
    strides = [shape_env.from_torch(v) for v in ex.stride()]
    if any(isinstance(v, shape_env.SymNode) for v in (*sizes, *strides)) or not (
        isinstance(start, int) and 0 <= start <= sizes[dim]
    ):
        unimplemented("Tensor.narrow by a length read from tensor data of a symbolic size")
    env = tx.output.shape_env
    expr = n.value.expr
    if not (env._static_value(expr >= 0) and env._static_value(expr <= sizes[dim] - start)):
        unimplemented(
            "Tensor.narrow by a length read from tensor data: torch._check(0 <= n <= size - "
            "start) first (kiln cannot tell the length is in range)"
        )
    offset = shape_env.from_torch(ex.storage_offset()) + start * strides[dim]
    part = _view(
        ex,
        tensor.device,
        [n.value if d == dim else sizes[d] for d in range(ex.dim())],
        strides,
        offset,
    )
    node = tx.output.create_node("call_method", "narrow", (tensor.proxy, dim, start, n.proxy), {})
    return torch_vars.wrap_tensor_result(tx, node, part, tensor.device)


def slice_by_items(tx, tensor, index):
    """`x[a:b]` (first dim, step 1) with a bound read from tensor data: a view of size b - a
    where torch._check's facts show 0 <= a <= b <= size (Python's slice then clamps nothing);
    `x[i]` with i read from tensor data: `x.select(0, i)`; None for other indexes."""
    from kiln.frontend.variables.sym import SliceVariable

    if is_item_scalar(index) and not isinstance(index, ItemFloatVariable):
        if tensor.example.dim() == 0:
            return None
        # `x[i]` with i read from tensor data is eager's `x.select(0, i)` (negative i wrapped,
        # IndexError out of range); select's meta asks its questions of the facts
        return tensor.call_method(tx, "select", [ConstantVariable(0), index], {})
    if not isinstance(index, SliceVariable):
        return None
    start, stop, *step = index.parts + [ConstantVariable(None)] * (3 - len(index.parts))
    if not (is_item_scalar(start) or is_item_scalar(stop)):
        return None
    step = step[0]
    ex = tensor.example
    sizes = [shape_env.from_torch(v) for v in ex.shape]
    strides = [shape_env.from_torch(v) for v in ex.stride()]
    bounds = []
    for bound, default in ((start, 0), (stop, sizes[0] if sizes else None)):
        if isinstance(bound, ConstantVariable) and bound.value is None:
            bound = ConstantVariable(default)
        if isinstance(bound, ItemFloatVariable) or not (
            is_item_scalar(bound) or isinstance(bound.value, int)
        ):
            return None
        bounds.append(bound)
    if (
        not (step.is_python_constant() and step.as_python_constant() in (None, 1))
        or ex.dim() == 0
        or any(isinstance(v, shape_env.SymNode) for v in (*sizes, *strides))
    ):
        unimplemented("slicing by a bound read from tensor data with a step or symbolic sizes")
    env = tx.output.shape_env
    lo, hi = (_expr(b) for b in bounds)
    known = (env._static_value(f) for f in (lo >= 0, hi >= lo, hi <= sizes[0]))
    if not all(v is True for v in known):
        unimplemented(
            "slicing by a bound read from tensor data: torch._check(0 <= start <= stop <= "
            "size) first (kiln cannot tell Python's slice clamps nothing)"
        )
    length = env.wrap(hi - lo)
    offset = shape_env.from_torch(ex.storage_offset()) + env.wrap(lo) * strides[0]
    part = _view(ex, tensor.device, [length, *sizes[1:]], strides, offset)
    fx = slice(*[b.proxy if is_item_scalar(b) else b.value for b in bounds])
    node = tx.output.create_node("call_function", operator.getitem, (tensor.proxy, fx), {})
    return torch_vars.wrap_tensor_result(tx, node, part, tensor.device)


def _expr(bound):
    return bound.value.expr if is_item_scalar(bound) else sympy.Integer(bound.value)


# Note [Shapes: a factory's size read from tensor data]
# `torch.zeros(n)` (ones, empty, full, rand, randn, new_zeros ...) with n read by `.item()` and
# nothing known about its sign: eager raises RuntimeError ("Trying to create tensor with negative
# dimension") for n < 0, and the factory's fake run cannot decide `n >= 0`. As torch.compile
# does, the graph asserts `n >= 0` before the factory (a RuntimeError when false, its text not
# eager's: eager's names the value) and the fact is assumed, so the factory and later questions
# (`if y.size(0) < 0:`) are static. A size kiln cannot check as tensor ops stays a break.
_NEGATIVE_SIZE = "Trying to create tensor with negative dimension (a size read from tensor data)"


def _size_args(args, kwargs, first_only):
    sizes = list(args[:1] if first_only else args)
    if "size" in kwargs:
        sizes.append(kwargs["size"])
    out = []
    for v in sizes:
        out.extend(v.items if isinstance(v, BaseListVariable) else [v])
    return out


def _checked_sizes(tx, args, kwargs, first_only):
    for v in _size_args(args, kwargs, first_only):
        if isinstance(v, SymNodeVariable) and is_item_scalar(v):
            runtime_asserts.assert_nonnegative_size(tx, v.value.expr, _NEGATIVE_SIZE)


def _factory(first_only):
    def hook(tx, fn, args, kwargs):
        if tx.output.captures_scalars:
            _checked_sizes(tx, args, kwargs, first_only)
        return None  # (the factory as usual, its sizes now known nonnegative)

    return hook


def _new_factory(name, first_only):
    def hook(tx, tensor, args, kwargs):
        if tx.output.captures_scalars:
            _checked_sizes(tx, args, kwargs, first_only)
        return _as_method(tx, name, tensor, args, kwargs)

    return hook


_ARANGE_BOUNDS = (
    "upper bound and larger bound inconsistent with step sign (bounds read from tensor data)"
)


def _arange(tx, fn, args, kwargs):
    """`torch.arange(end)` / `(start, end[, 1])` with an int bound read by `.item()`: `end - start
    >= 0` asserted at run time (eager raises then too) and assumed, so the length is `end - start`
    with no question asked."""
    if not tx.output.captures_scalars or kwargs.keys() - {"dtype", "device", "layout"}:
        return None
    bounds = list(args)
    if not 1 <= len(bounds) <= 3 or not any(is_item_scalar(b) for b in bounds):
        return None
    if len(bounds) == 1:
        bounds = [ConstantVariable(0), *bounds]
    step = bounds[2] if len(bounds) == 3 else ConstantVariable(1)
    if not step.is_python_constant() or step.as_python_constant() != 1:
        return None  # (another step's length is a floor the facts do not decide: a break)
    exprs = []
    for b in bounds[:2]:
        if isinstance(b, SymNodeVariable) and b.value.kind == "int":
            exprs.append(b.value.expr)
        elif b.is_python_constant() and type(b.as_python_constant()) is int:
            exprs.append(b.as_python_constant())
        else:
            return None
    runtime_asserts.assert_nonnegative_size(tx, exprs[1] - exprs[0], _ARANGE_BOUNDS)
    if _float_arange_as_ints(kwargs):
        return _float_arange_of_ints(tx, fn, args, kwargs)
    return None  # (arange as usual, its length now known nonnegative)


def _float_arange_as_ints(kwargs):
    """Whether a float arange with int bounds computes exactly its int64 arange cast: float64
    anywhere, float32 on the CPU (Note [Shapes: a float arange over bounds read from ...])."""
    dtype, device = kwargs.get("dtype"), kwargs.get("device")
    if dtype is None or not dtype.is_python_constant():
        return False
    if device is not None and not device.is_python_constant():
        return False
    dtype = dtype.as_python_constant()
    device = device.as_python_constant() if device is not None else None
    device = torch.get_default_device() if device is None else torch.device(device)
    return dtype is torch.float64 or (dtype is torch.float32 and device.type == "cpu")


def _float_arange_of_ints(tx, fn, args, kwargs):
    """Note [Shapes: a float arange over bounds read from tensor data]
    `torch.arange(n, dtype=torch.float32)` with int bounds and step 1 holds the ints start ..
    end - 1 in the dtype. Its meta kernel asks whether `n == 1` (a broadcast check torch answers
    False for an unbacked n without a guard), which kiln's sizes cannot answer: it is traced as
    the int64 arange, whose length rule is symbolic, cast to the dtype. The values are eager's
    where eager computes `start + i` exactly in a wider type and rounds once to nearest, as the
    cast of the int does: float64 (exact below 2**53), float32 on the CPU (a double
    accumulator). float16/bfloat16 (eager's rounding differs above 2048), float32 on other
    devices (a float accumulator) keep the break."""
    dtype = kwargs["dtype"].as_python_constant()
    int_kwargs = {k: v for k, v in kwargs.items() if k != "dtype"}
    ints = torch_vars.call_tensor_op(tx, "call_function", fn, list(args), int_kwargs)
    return ints.call_method(tx, "to", [ConstantVariable(dtype)], {})


torch_vars.register_function(torch.arange, _arange)
for _fn in (torch.zeros, torch.ones, torch.empty, torch.rand, torch.randn):
    torch_vars.register_function(_fn, _factory(first_only=False))
torch_vars.register_function(torch.full, _factory(first_only=True))
for _name in ("new_zeros", "new_ones", "new_empty"):
    tensor_vars.register_method(_name, _new_factory(_name, first_only=False))
tensor_vars.register_method("new_full", _new_factory("new_full", first_only=True))
tensor_vars.register_method("item", tensor_item)
torch_vars.register_function(torch.split, split_by_items)


def _aten_split_with_sizes(tx, fn, args, kwargs):
    """`torch.ops.aten.split_with_sizes(x, sizes, dim)` by item sizes: as torch.split, a list."""
    done = split_by_items(tx, fn, args, kwargs)
    return None if done is None else ListVariable(list(done.unpack_var_sequence(tx)))


for _op in (torch.ops.aten.split_with_sizes, torch.ops.aten.split_with_sizes.default):
    torch_vars.register_function(_op, _aten_split_with_sizes)
tensor_vars.register_method("split", split_method)
tensor_vars.register_method("narrow", narrow_by_item)
tensor_vars.register_method("tolist", tensor_tolist)
