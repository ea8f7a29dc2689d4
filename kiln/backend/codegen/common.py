"""Shared code-generation pieces: indented text buffers, typed CSE values, dtype tables."""

import contextlib
import math

import torch


class IndentedBuffer:
    """Lines of code with an indentation level."""

    def __init__(self, indent=0):
        self.lines = []
        self.level = indent

    def writeline(self, line=""):
        self.lines.append(("    " * self.level + line) if line else "")

    def writelines(self, lines):
        for ln in lines:
            self.writeline(ln)

    @contextlib.contextmanager
    def indent(self, n=1):
        self.level += n
        try:
            yield
        finally:
            self.level -= n

    def getvalue(self):
        return "\n".join(self.lines) + "\n"


class CSEVar:
    """A named value in generated code, with the dtype it holds (compute dtype)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name, dtype):
        self.name = name
        self.dtype = dtype

    def __str__(self):
        return self.name

    __repr__ = __str__


# dtype -> (C type of storage, C type of compute)
CTYPES = {
    torch.float32: ("float", "float"),
    torch.float64: ("double", "double"),
    torch.float16: ("uint16_t", "float"),  # its bits (kiln_f16_to_f)
    torch.bfloat16: ("uint16_t", "float"),
    torch.int64: ("int64_t", "int64_t"),
    torch.int32: ("int32_t", "int32_t"),
    torch.int16: ("int16_t", "int16_t"),
    torch.int8: ("int8_t", "int8_t"),
    torch.uint8: ("uint8_t", "uint8_t"),
    torch.bool: ("bool", "bool"),
}


def storage_ctype(dtype):
    return CTYPES[dtype][0]


def compute_ctype(dtype):
    return CTYPES[dtype][1]


def compute_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def cpp_constant(value, dtype):
    """A C++ literal of `value` converted to `dtype` the way eager converts a Python scalar."""
    ct = compute_ctype(dtype)
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        v = float(value)
        if math.isnan(v):
            return f"std::numeric_limits<{ct}>::quiet_NaN()"
        if math.isinf(v):
            return f"{'-' if v < 0 else ''}std::numeric_limits<{ct}>::infinity()"
        if dtype in (torch.float16, torch.bfloat16):
            v = float(torch.tensor(v, dtype=dtype).item())
        text = repr(v)
        return f"static_cast<{ct}>({text})" if ct == "float" else text
    v = int(value)
    info = torch.iinfo(dtype)
    v = (v - info.min) % (info.max - info.min + 1) + info.min  # wrap like eager's cast
    if dtype == torch.int64 and v == info.min:
        return "(-9223372036854775807LL - 1)"
    return f"static_cast<{ct}>({v}LL)" if ct != "int64_t" else f"{v}LL"
