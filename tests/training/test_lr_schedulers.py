"""LR schedulers writing a float lr every step: no recompile per value (Note [Optimizers: float
hyper-parameters], Note [AOT: floats lifted to tensors]); state equal to eager's."""

import copy

import pytest
import torch

import kiln

STEPS = 20
SCHEDULERS = {
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
    "lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1 / (e + 1)),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=STEPS),
}


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    yield


def _counts():
    stats, backend = kiln.counters["stats"], kiln.counters["backend"]
    compiled = backend["graphs_compiled"] + backend["graph_cache_hits"]
    return stats["unique_graphs"], stats["recompiles"], compiled


@pytest.mark.parametrize("sched", sorted(SCHEDULERS))
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_float_lr_schedule_compiles_once(name, sched, backend):
    torch.manual_seed(0)
    me = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    mc = copy.deepcopy(me)
    oe = getattr(torch.optim, name)(me.parameters(), lr=0.01, foreach=True)
    oc = getattr(torch.optim, name)(mc.parameters(), lr=0.01, foreach=True)
    se, sc = SCHEDULERS[sched](oe), SCHEDULERS[sched](oc)
    step = kiln.compile(oc.step, backend=backend)
    half = None
    for i in range(STEPS):
        gen = torch.Generator().manual_seed(i)
        for p, q in zip(me.parameters(), mc.parameters()):
            p.grad = torch.randn(p.shape, generator=gen)
            q.grad = p.grad.clone()
        oe.step()
        step()
        se.step()
        sc.step()
        if i == STEPS // 2:
            half = _counts()
    assert oc.param_groups[0]["lr"] == oe.param_groups[0]["lr"]
    for p, q in zip(me.parameters(), mc.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
        for k, v in oe.state[p].items():
            torch.testing.assert_close(oc.state[q][k], v, rtol=1e-5, atol=1e-6)
    frames, recompiles, plans = _counts()
    # the first step (creating the state), the first changed lr (it becomes an input), and at
    # most one more (StepLR keeps the lr for 2 steps: the object's attributes change first)
    assert frames <= 3 and recompiles <= 2, (frames, recompiles)
    assert kiln.counters["stats"]["graph_breaks"] == 0
    # nothing compiled in the second half of the schedule: every new lr reuses the plan
    assert (frames, recompiles) == half[:2]
    if backend == "kiln":
        assert plans == half[2] and plans <= 3, (plans, half)


# `-lr` (SGD, RMSprop, Adagrad): unary_op makes it a node of the unspecialised float, not a
# folded constant (one frame per value until the cache limit, before)
@pytest.mark.parametrize("name", ["SGD", "RMSprop", "Adagrad"])
def test_negated_float_lr_compiles_once(name):
    torch.manual_seed(0)
    mc = torch.nn.Linear(4, 2)
    oc = getattr(torch.optim, name)(mc.parameters(), lr=0.1, foreach=True)
    sc = SCHEDULERS["cosine"](oc)
    step = kiln.compile(oc.step)
    for i in range(12):
        for q in mc.parameters():
            q.grad = torch.full_like(q, 0.1 * (i + 1))
        step()
        sc.step()
    assert kiln.counters["stats"]["unique_graphs"] <= 2


def test_a_float_lr_reaching_a_scalar_only_argument_is_specialised_not_wrong():
    """SGD's `alpha=-lr`: the results are eager's whether the float is an input or a value."""
    torch.manual_seed(0)
    me = torch.nn.Linear(4, 2)
    mc = copy.deepcopy(me)
    oe = torch.optim.SGD(me.parameters(), lr=0.1, momentum=0.9, foreach=True)
    oc = torch.optim.SGD(mc.parameters(), lr=0.1, momentum=0.9, foreach=True)
    se, sc = SCHEDULERS["cosine"](oe), SCHEDULERS["cosine"](oc)
    step = kiln.compile(oc.step)
    for i in range(5):
        for p, q in zip(me.parameters(), mc.parameters()):
            p.grad = torch.full_like(p, 0.1 * (i + 1))
            q.grad = p.grad.clone()
        oe.step()
        step()
        se.step()
        sc.step()
    for p, q in zip(me.parameters(), mc.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)
