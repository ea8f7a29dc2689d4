"""`fully_shard` (FSDP2) models compiled per block and whole, against eager FSDP: 2 gloo processes
on 127.0.0.1 (fully_shard runs on CPU/gloo in torch 2.13), results equal every step."""

from dist_helpers import NEEDS_GLOO, results_fixture

pytestmark = NEEDS_GLOO
results = results_fixture("fsdp_worker.py")


def test_per_block_compile(results):
    # each block's hooks (all-gather, reshard) run in Python around its compiled forward
    r = results["per_block"]
    assert r["ok"], r.get("error")
    assert r["graph_breaks"] == 0
    assert r["unique_graphs"] == 3


def test_whole_model_compile(results):
    # Note [FSDP: hooks stay Python]: the root's forward breaks at each fully_shard block (its
    # hooks all-gather and reshard); each block's forward is a graph of its own, its hooks run in
    # Python around it (before: 1 graph, the blocks ran eagerly); equal to eager FSDP
    r = results["whole_model"]
    assert r["ok"], r.get("error")
    assert r["graph_breaks"] > 0
    assert r["unique_graphs"] >= 3  # the three Linear blocks' forwards
    # the glue between blocks (the ReLUs, the rest of Sequential's loop) is compiled too: the
    # only breaks are at the blocks (Note [Iterators: inputs])
    assert r["other_breaks"] == 0
