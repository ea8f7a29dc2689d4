"""kiln.compile(DDP(model)) and DDP(kiln.compile(model)) against eager DDP: 2 gloo processes on
127.0.0.1, started here; losses, gradients, parameters and buffers equal every step
(tests/distributed/ddp_worker.py runs every scenario in one spawn)."""

import pytest
from dist_helpers import NEEDS_GLOO, results_fixture

pytestmark = NEEDS_GLOO
results = results_fixture("ddp_worker.py")


def passed(results, name):
    r = results[name]
    assert r["ok"], r.get("error")
    return r


@pytest.mark.parametrize("name", ["outer_kiln", "inner_kiln"])
def test_ddp_training_equals_eager_one_graph(results, name):
    # DDP's forward around one captured graph: no break, one graph, results equal to eager DDP
    r = passed(results, name)
    assert r["graph_breaks"] == 0
    assert r["unique_graphs"] == 1


@pytest.mark.parametrize("name", ["outer_find_unused", "inner_find_unused"])
def test_find_unused_parameters(results, name):
    # the branch on a Python flag makes two graphs (one per flag value), none breaks
    r = passed(results, name)
    assert r["graph_breaks"] == 0
    assert r["unique_graphs"] == 2


def test_no_sync_gradient_accumulation(results):
    r = passed(results, "no_sync_accumulation")
    assert r["graph_breaks"] == 0


def test_batchnorm_buffers_broadcast(results):
    r = passed(results, "batchnorm_buffers")
    for order in ("outer", "inner"):
        assert r[order]["graph_breaks"] == 0
        assert r[order]["unique_graphs"] == 1


@pytest.mark.parametrize("order", ["outer", "inner"])
def test_graph_split_at_buckets_overlaps_allreduce(results, order):
    r = passed(results, "bucket_overlap")[order]
    assert r["graph_breaks"] == 0 and r["unique_graphs"] == 1
    assert r["ddp_pieces"] == 2  # one compiled piece per bucket of <= 10 KB of parameters
    assert r["nodes"].count("CompiledFunctionBackward") == 2
    # step 0: DDP puts every parameter in one bucket until it has seen the gradients' order;
    # step 1 (rebuilt buckets): a bucket is all-reduced before autograd reaches the input, that
    # is, while the first piece's backward is still to run
    first, second = r["events"]
    assert first == [["input grad", 0], ["bucket", 6]]
    assert second[0][0] == "bucket" and second[-1][0] == "bucket"
    assert ["input grad", 0] in second
