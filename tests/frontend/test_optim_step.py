"""opt.step() inside compiled code: traced into graphs, parameters and state equal to eager's."""

import copy

import pytest
import torch

import kiln

STEPS = 20
TOL = dict(rtol=1e-5, atol=1e-5)

CONFIGS = [
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01)),
    ("Adagrad", dict(lr=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.01, centered=True)),
]


@pytest.fixture(autouse=True)
def _reset():
    kiln.reset()
    yield
    assert torch.is_grad_enabled()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _set_grads(models, step):
    gen = torch.Generator().manual_seed(step)
    for ps in zip(*[m.parameters() for m in models]):
        g = torch.randn(ps[0].shape, generator=gen)
        for p in ps:
            p.grad = g.clone()


def _assert_same_state(oe, oc):
    for pe, pc in zip(oe.param_groups[0]["params"], oc.param_groups[0]["params"]):
        torch.testing.assert_close(pc, pe, **TOL)
        se, sc = oe.state[pe], oc.state[pc]
        assert sorted(se) == sorted(sc)
        for k in se:
            if isinstance(se[k], torch.Tensor):
                torch.testing.assert_close(sc[k], se[k], **TOL, msg=lambda m, k=k: f"{k}: {m}")
            else:
                assert sc[k] == se[k], k


def _run(name, kw, scheduler=None):
    me, mc = _model(), _model()
    oe = getattr(torch.optim, name)(me.parameters(), **kw)
    oc = getattr(torch.optim, name)(mc.parameters(), **copy.deepcopy(kw))
    se = scheduler(oe) if scheduler else None
    sc = scheduler(oc) if scheduler else None

    @kiln.compile
    def step():
        oc.step()

    for i in range(STEPS):
        _set_grads([me, mc], i)
        oe.step()
        step()
        if scheduler:
            se.step()
            sc.step()
    _assert_same_state(oe, oc)
    return oc


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("name, kw", CONFIGS)
def test_step_is_captured_and_equal_to_eager(name, kw, foreach):
    _run(name, dict(kw, foreach=foreach))
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == 0
    # the first step also creates the state; the later ones reuse one graph
    assert 1 <= stats["unique_graphs"] <= 2


def test_tensor_lr_with_a_scheduler_does_not_recompile():
    _run(
        "Adam",
        dict(lr=torch.tensor(0.01)),
        scheduler=lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
    )
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == 0
    assert stats["unique_graphs"] <= 2 and stats["recompiles"] <= 1


def test_sgd_training_step_with_backward():
    torch.manual_seed(0)
    me, mc = _model(), _model()
    oe = torch.optim.SGD(me.parameters(), lr=0.1, momentum=0.9)
    oc = torch.optim.SGD(mc.parameters(), lr=0.1, momentum=0.9)

    def train(m, opt, x, y):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss

    ctrain = kiln.compile(train)
    for i in range(5):
        gen = torch.Generator().manual_seed(i)
        x, y = torch.randn(4, 8, generator=gen), torch.randn(4, 3, generator=gen)
        le = train(me, oe, x, y)
        lc = ctrain(mc, oc, x, y)
        torch.testing.assert_close(lc, le, **TOL)
    _assert_same_state(oe, oc)


@pytest.mark.parametrize("op", [torch._foreach_addcmul, torch._foreach_addcdiv])
def test_foreach_with_a_zero_dim_tensor_value(op):
    # (one Scalar for every item, as eager converts it; was a select on the 0-d tensor)
    a, b, c = (list(torch.randn(3, 4, 4).unbind()) for _ in range(3))
    val = torch.tensor(0.5, dtype=torch.float64)

    def fn(a, b, c, val):
        return op(a, b, c, value=1 - val)

    got = kiln.compile(fn, backend="eager", fullgraph=True)(a, b, c, val)
    torch.testing.assert_close(got, fn(a, b, c, val))
