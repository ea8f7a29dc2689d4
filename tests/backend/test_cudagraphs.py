"""mode="reduce-overhead": the CUDA-graph rules (Note [CUDA graphs: rules]) with a fake recorder
on CPU; the same through torch.cuda.CUDAGraph where CUDA exists."""

import copy

import pytest
import torch

import kiln
from kiln import logs
from kiln.backend import cudagraphs
from kiln.backend.cudagraphs import CUDAGraphed
from tests.backend.helpers import compile_fn


class FakeRecorder:
    """Records the function; a replay reruns it and writes the recorded outputs (as a CUDA graph
    replay writes the same memory)."""

    recordings = 0

    def __init__(self):
        FakeRecorder.recordings += 1

    @staticmethod
    def accepts(t):
        return True

    def record(self, fn):
        self.fn = fn
        self.outs = fn()
        return self.outs

    def replay(self):
        for o, n in zip(self.outs, self.fn()):
            if o.data_ptr() != n.data_ptr():  # (an input passed through is not written)
                o.data.copy_(n)  # .data: memory written, no version bump (as a graph replay)


def f(x, w):
    return ((x @ w).relu() + 1,)


def _graphed(fn=f, inputs=None, **kw):
    inputs = inputs or [torch.randn(4, 8), torch.randn(8, 3)]
    return CUDAGraphed(compile_fn(fn, inputs), inputs, recorder=FakeRecorder, **kw), inputs


@pytest.fixture(autouse=True)
def _fresh():
    FakeRecorder.recordings = 0
    logs.counters["cudagraphs"].clear()


def test_warm_up_then_record_then_replay_with_static_input_copies():
    g, (x, w) = _graphed()
    for _ in range(4):
        x = torch.randn(4, 8)  # new values each call: copied into the static input
        (got,) = g(x, w)
        torch.testing.assert_close(got, f(x, w)[0])
    c = logs.counters["cudagraphs"]
    assert FakeRecorder.recordings == 1 and c["recorded"] == 1
    assert c["replays"] == 3  # the first call is the warm-up


def test_unchanged_inputs_are_not_copied_changed_ones_are():
    g, (x, w) = _graphed()
    g(x, w)
    g(x, w)  # records
    before = logs.counters["cudagraphs"]["input_copies"]
    g(x, w)
    assert logs.counters["cudagraphs"]["input_copies"] == before  # same tensors, same versions
    w.mul_(2)  # a parameter updated in place: its version moves, it is copied again
    (got,) = g(x, w)
    assert logs.counters["cudagraphs"]["input_copies"] == before + 1
    torch.testing.assert_close(got, f(x, w)[0])


def test_one_recording_per_shape_and_a_limit(monkeypatch, capsys):
    monkeypatch.setattr(cudagraphs, "MAX_ENTRIES", 2)
    logs.set_logs("cudagraphs")
    try:  # a graph for every size (what a dynamic graph is): f itself
        w = torch.randn(8, 3)
        g = CUDAGraphed(f, [torch.randn(4, 8), w], recorder=FakeRecorder)
        for n in (2, 3, 5):
            for _ in range(3):
                x = torch.randn(n, 8)
                torch.testing.assert_close(g(x, w)[0], f(x, w)[0])
    finally:
        logs.set_logs("")
    assert FakeRecorder.recordings == 2  # the third shape runs unrecorded
    assert "not recorded: 2 recordings already" in capsys.readouterr().err


def test_earlier_outputs_are_not_overwritten_under_the_caller():
    g, (x, w) = _graphed()
    g(x, w)
    x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
    (y1,) = g(x1, w)
    (y2,) = g(x2, w)  # replays into the same memory: y1 is moved out first
    torch.testing.assert_close(y1, f(x1, w)[0])
    torch.testing.assert_close(y2, f(x2, w)[0])
    assert logs.counters["cudagraphs"]["outputs_copied"] == 1
    del y1, y2
    g(x1, w)  # nothing held: nothing copied
    assert logs.counters["cudagraphs"]["outputs_copied"] == 1


def _skip_reason(capsys, **kw):
    logs.set_logs("cudagraphs")
    try:
        g, (x, w) = _graphed(**kw)
        for _ in range(3):
            torch.testing.assert_close(g(x, w)[0], f(x, w)[0])
    finally:
        logs.set_logs("")
    assert FakeRecorder.recordings == 0
    return capsys.readouterr().err


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x))).sum(-1)


def _training_pair(monkeypatch):
    monkeypatch.setattr(cudagraphs, "RECORDER", FakeRecorder)
    kiln.reset()
    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    return ref, model, kiln.compile(model, backend="kiln", mode="reduce-overhead")


def _params_close(a, b):
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)


def test_training_steps_are_recorded_and_replayed(monkeypatch):
    """Forward and backward graphs each recorded once, then replayed; every step equals eager's
    (parameters used in place: the optimizer's updates are what the replays read)."""
    ref, model, compiled = _training_pair(monkeypatch)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, model)]
    for _ in range(5):
        x = torch.randn(6, 8)
        for m, opt in zip((ref, compiled), opts):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
        _params_close(ref, model)
    c = logs.counters["cudagraphs"]
    assert FakeRecorder.recordings == 2 and c["replays"] >= 6  # forward + backward, 3 steps each


def test_training_micro_batches_keep_saved_activations(monkeypatch):
    """Two forwards before their backwards: the second replay must not overwrite the activations
    the first one saved (moved to memory of their own); gradients accumulate as in eager."""
    ref, model, compiled = _training_pair(monkeypatch)
    for _ in range(4):
        xs = [torch.randn(6, 8), torch.randn(6, 8)]
        for m in (ref, compiled):
            losses = [m(x).pow(2).mean() for x in xs]
            for loss in losses:
                loss.backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)
    assert logs.counters["cudagraphs"]["outputs_copied"] > 0


def test_training_grads_kept_across_replays(monkeypatch):
    """A .grad autograd took over from a backward replay's output stays intact when the next
    backward replays (no zero_grad: gradients accumulate)."""
    ref, model, compiled = _training_pair(monkeypatch)
    for _ in range(4):
        x = torch.randn(6, 8)
        for m in (ref, compiled):
            m(x).sum().backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6)


def test_input_mutated_in_place_is_not_recorded(capsys):
    """An output written over input 0 (Note [Backend: mutated inputs written in place]): a replay
    would write the static copy, not the caller's tensor."""

    class Mutating:
        output_sources = [("written", 0), "fresh"]

        def __call__(self, x, w):
            return (x.add_(1), x @ w)

    logs.set_logs("cudagraphs")
    try:
        x, w = torch.randn(4, 8), torch.randn(8, 3)
        g = CUDAGraphed(Mutating(), [x, w], recorder=FakeRecorder)
        for _ in range(3):
            want = x.clone().add_(1)
            got = g(x, w)
            torch.testing.assert_close(x, want)  # the caller's tensor was mutated
            assert got[0] is x
    finally:
        logs.set_logs("")
    assert "output 0 is input 0 written in place" in capsys.readouterr().err
    assert FakeRecorder.recordings == 0


def test_cpu_tensors_are_not_recorded_by_the_cuda_recorder(capsys):
    logs.set_logs("cudagraphs")
    try:
        inputs = [torch.randn(4, 8), torch.randn(8, 3)]
        g = CUDAGraphed(compile_fn(f, inputs), inputs)  # the real recorder
        torch.testing.assert_close(g(*inputs)[0], f(*inputs)[0])
    finally:
        logs.set_logs("")
    assert "input 0 is a CPU tensor" in capsys.readouterr().err and g.skip


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_reduce_overhead_on_cuda_replays():  # pragma: no cover (runs where CUDA exists)
    import kiln

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).cuda().eval()
    compiled = kiln.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(8, 64, device="cuda")
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert logs.counters["cudagraphs"]["replays"] >= 2


def test_graph_feeding_a_graph_sees_each_replays_values(monkeypatch):
    """Two recorded graphs split by a break: the second's input is the first's output, in the
    same memory each call and with no version change (Note [CUDA graphs: stamps and version
    counters]); it must still be copied in every call."""
    monkeypatch.setattr(cudagraphs, "RECORDER", FakeRecorder)
    kiln.reset()

    def fn(x):
        y = x.sin() * 2
        kiln.graph_break()
        return (y + 1).cos()

    compiled = kiln.compile(fn, backend="kiln", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(16)
            torch.testing.assert_close(compiled(x), fn(x))
    assert FakeRecorder.recordings == 2 and logs.counters["cudagraphs"]["replays"] >= 6


def test_broadcast_input_keeps_its_layout():
    """An expanded input (stride 0: HF's attention mask saved for the backward) is recorded in
    its own layout; each call's new values are copied into its one row (a dense copy did not
    match the compiled strides, and the wrapper's layout fix cannot write a stride-0 tensor)."""

    def fn(x, m):
        return ((x * m).sum(-1),)

    x = torch.randn(4, 8)
    m = torch.randn(1, 8).expand(4, 8)
    g = CUDAGraphed(compile_fn(fn, [x, m]), [x, m], recorder=FakeRecorder)
    for _ in range(4):
        m = torch.randn(1, 8).expand(4, 8)
        torch.testing.assert_close(g(x, m)[0], fn(x, m)[0])
    assert FakeRecorder.recordings == 1 and logs.counters["cudagraphs"]["replays"] == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_replays_draw_new_random_numbers_on_cuda():  # pragma: no cover (runs where CUDA exists)
    """The graph's seeds are drawn by a recorded randint (Note [Random: numbers from a seed per
    graph]): each replay draws new ones, and dropout keeps its rate."""
    import torch.nn.functional as F

    import kiln

    kiln.reset()
    compiled = kiln.compile(lambda x: F.dropout(x, 0.5, training=True) * 1, mode="reduce-overhead")
    x = torch.ones(8192, device="cuda")
    outs = [compiled(x).clone() for _ in range(5)]
    assert logs.counters["cudagraphs"]["replays"] >= 2
    assert not torch.equal(outs[-1], outs[-2])
    for y in outs:
        assert set(y.unique().tolist()) <= {0.0, 2.0}
        assert 0.45 < (y == 0).float().mean().item() < 0.55
