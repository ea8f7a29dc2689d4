"""`fully_shard` (FSDP2) models compiled per block and whole, against eager FSDP: 2 gloo processes
on 127.0.0.1 (fully_shard runs on CPU/gloo in torch 2.13), results equal every step."""

import pathlib

import pytest
import torch.distributed as dist
from dist_helpers import run_workers

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed gloo"
)

WORKER = pathlib.Path(__file__).with_name("fsdp_worker.py")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_workers(WORKER, tmp_path_factory.mktemp("fsdp"))


def test_per_block_compile(results):
    # each block's hooks (all-gather, reshard) run in Python around its compiled forward
    r = results["per_block"]
    assert r["ok"], r.get("error")
    assert r["graph_breaks"] == 0
    assert r["unique_graphs"] == 3


def test_whole_model_compile(results):
    # the blocks' FSDP hooks are called with kwargs, which the frontend does not trace: the
    # whole-model compile breaks at each block (they run eagerly) and stays equal to eager
    r = results["whole_model"]
    assert r["ok"], r.get("error")
    assert r["graph_breaks"] > 0
