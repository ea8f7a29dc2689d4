"""Shared code-generation pieces: indented text buffers, typed CSE values, dtype tables."""

import contextlib
import math
import re

import torch

# a Triton reduction whose static extent is at most this keeps the whole row in one block
# (persistent; Note [Triton: block sizes]); longer or symbolic ones loop
PERSISTENT_MAX = 1024

SIZE_PARAM = re.compile(r"ks\d+")  # a kernel's size parameter (symbol s0 is ks0)


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


class KernelBase:
    """What the C++ and Triton kernel writers share: the group, its buffers, CSE, parameters."""

    def __init__(self, group, graph, stores, inplace=None):
        mine = group.names()
        # buffer of this group -> the buffer of this group whose memory it is written over
        self.alias = {b: a for b, a in (inplace or {}).items() if b in mine}
        self.g = group
        self.graph = graph
        self.stores = stores
        self.code = IndentedBuffer(1)
        self.scopes = [{}]  # CSE maps, innermost last
        self.n = 0
        self.locals = {}  # buffer name -> (CSEVar, store Ix, is_loop_local)
        self.params = {}  # buffer name -> is_output
        self.const_values = {}  # text of a float constant -> its value

    def declare(self, name, expr, dtype):
        """The line defining a new temporary (each language's syntax)."""
        raise NotImplementedError

    def cse(self, expr, dtype):
        """The temporary holding expr: an existing one from an enclosing scope, else a new one."""
        for scope in reversed(self.scopes):
            if expr in scope:
                return scope[expr]
        name = f"tmp{self.n}"
        self.n += 1
        self.code.writeline(self.declare(name, expr, dtype))
        v = CSEVar(name, dtype)
        self.scopes[-1][expr] = v
        return v

    def param_name(self, name):
        """The kernel parameter a buffer is read through (registered as an input)."""
        name = self.alias.get(name, name)
        if name not in self.params:
            self.params[name] = False
        return name


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
