"""Numbers a leaf_function reads from tensor data (`t.item()`) and returns.

Note [leaf_function: numbers read from tensor data]
A leaf function may return a number its body read from a tensor (`out.sum().item()`); its fake
implementation does the same on meta tensors, where `.item()` has no value. While a fake
implementation runs (`scalar_reads()`), `.item()` of a one-element meta tensor gives a stand-in: a
`DataFloat` / `DataInt` that may only be returned as it is (any arithmetic, comparison or
conversion raises, so a fake that computes with the value fails: a graph break that says why,
never a made-up constant). The output plan keeps such a result as a ("scalar", dtype) slot: the
op returns it as a 0-d tensor of that dtype (the real body's number at run time, a meta tensor
in the fake run), and traced code reads it with `.item()`, an unbacked scalar of the graph.
"""

import contextlib

import torch

SCALAR = "scalar"  # a plan's kind: a number read from tensor data, a 0-d tensor of the op


def _refuse(self, *args, **kwargs):
    raise RuntimeError(
        "a number read from tensor data (.item()) in a leaf_function's fake implementation can "
        "only be returned as it is (its value is known at run time only)"
    )


_REFUSED = (
    "__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__ "
    "__rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __neg__ __pos__ __abs__ __bool__ __int__ "
    "__float__ __index__ __round__ __trunc__ __floor__ __ceil__ __lt__ __le__ __gt__ __ge__ "
    "__eq__ __ne__ __hash__ __and__ __or__ __xor__ __lshift__ __rshift__ __invert__"
).split()


class DataFloat(float):
    """A float read from meta tensor data in a fake implementation: returned only."""

    dtype = torch.float64


class DataInt(int):
    """An int read from meta tensor data in a fake implementation: returned only."""

    dtype = torch.int64


for _cls in (DataFloat, DataInt):
    for _name in _REFUSED:
        setattr(_cls, _name, _refuse)

DATA_SCALARS = (DataFloat, DataInt)


@contextlib.contextmanager
def scalar_reads():
    """While a fake implementation runs: `.item()` of a meta tensor is a stand-in number
    (Tensor.item itself, for the run: a value returned by a dispatch mode would come back from
    C++ as a plain float)."""
    own = vars(torch.Tensor).get("item")
    base = own or torch._C.TensorBase.item

    def item(self):
        if self.device.type == "meta" and self.numel() == 1:
            if self.dtype.is_floating_point:
                return DataFloat(0.0)
            if self.dtype != torch.bool and not self.dtype.is_complex:
                return DataInt(0)
        return base(self)

    torch.Tensor.item = item
    try:
        yield
    finally:
        if own is not None:
            torch.Tensor.item = own
        else:
            del torch.Tensor.item


def stand_in(value):
    """The 0-d meta tensor standing for a number read from tensor data."""
    return torch.empty((), dtype=value.dtype, device="meta")


def as_output(value, dtype, name):
    """The real body's number as the op's 0-d tensor output."""
    if isinstance(value, torch.Tensor) or not isinstance(value, (int, float)):
        raise RuntimeError(
            f"leaf_function {name}: its fake implementation returned a number read from tensor "
            f"data where the real function returned a {type(value).__name__}"
        )
    return torch.tensor(value, dtype=dtype)
