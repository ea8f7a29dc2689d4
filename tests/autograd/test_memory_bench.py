"""benchmarks/memory.py's measurement on small models: kiln's min-cut saves less than eager."""

import copy
import importlib.util
import pathlib

import torch

from kiln.autograd.aot import nop
from kiln.autograd.aot_module import aot_module
from kiln.autograd.partition import default_partition, min_cut_rematerialization_partition

_PATH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "memory.py"
_spec = importlib.util.spec_from_file_location("kiln_memory_bench", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_min_cut_saves_less_than_eager_and_default():
    torch.manual_seed(0)
    for model, x in (
        (bench.mlp(d=32, depth=2), torch.randn(8, 32, requires_grad=True)),
        (bench.TransformerBlock(d=32, heads=2), torch.randn(2, 8, 32, requires_grad=True)),
    ):
        _, eager = bench.measure(model, x)
        mc = aot_module(copy.deepcopy(model), nop, partition_fn=min_cut_rematerialization_partition)
        df = aot_module(copy.deepcopy(model), nop, partition_fn=default_partition)
        bench.measure(mc, x)  # compile outside the measurement (as the benchmark does)
        bench.measure(df, x)
        _, kiln_mc = bench.measure(mc, x)
        _, kiln_df = bench.measure(df, x)
        assert kiln_mc < eager and kiln_mc < kiln_df
        assert kiln_df == eager


def test_user_saved_tensor_hooks_see_no_proxies_while_compiling():
    seen = []

    def pack(t):
        seen.append(type(t).__name__)
        return t

    model = bench.mlp(d=16, depth=1)
    compiled = aot_module(model, nop)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        compiled(torch.randn(4, 16, requires_grad=True)).sum().backward()
    assert seen and "ProxyTensor" not in seen
