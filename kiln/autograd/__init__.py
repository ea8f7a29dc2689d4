"""Ahead-of-time autograd: ATen tracing, functionalization, joint graphs and partitioning."""

from kiln.autograd.aot import aot_autograd, aot_eager, aot_function, nop
from kiln.autograd.aot_module import aot_module
from kiln.autograd.aten_tracer import trace_aten
from kiln.autograd.partition import default_partition, min_cut_rematerialization_partition
from kiln.symbolic.fake import ProxyTensor

__all__ = [
    "ProxyTensor",
    "aot_autograd",
    "aot_eager",
    "aot_function",
    "aot_module",
    "default_partition",
    "min_cut_rematerialization_partition",
    "nop",
    "trace_aten",
]
