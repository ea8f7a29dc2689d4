"""Gradient parity with eager: models with hooks on parameters and activations, accumulation into
existing .grad, retain_grad, custom Functions, autograd.grad, and the eager fallbacks."""

import copy

import pytest
import torch
import torch.nn as nn
from ca_helpers import assert_same_grads, ca_counters, clean, grads, parity

import kiln
import kiln.compiled_autograd as ca


def _hook_params(model, scale=0.5):
    for p in model.parameters():
        p.register_hook(lambda g, s=scale: g * s)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x, log=None):
        h = torch.relu(self.fc1(x))
        h.retain_grad()
        h.register_hook(lambda g: g * 2)
        if log is not None:
            h.register_hook(lambda g: log.append(round(g.abs().sum().item(), 3)))
        self.h = h
        return self.fc3(torch.tanh(self.fc2(h)))


def test_mlp_hooks_retain_grad_accumulation():
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(8, 16)
    logs_ref, logs_test = [], []

    def step(m):
        log = logs_ref if m is model else logs_test
        m(x, log).pow(2).mean().backward()
        return m.h.grad

    with clean():
        ref, test = parity(model, step, steps=3)
        counters = ca_counters()
    assert logs_ref == logs_test and len(logs_ref) == 3  # the hook ran once per backward
    assert counters == {"captures": 1, "compiles": 1, "calls": 3}


def test_parameter_hooks_like_ddp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    seen = []

    def setup(m):
        _hook_params(m)
        for name, p in m.named_parameters():
            p.register_post_accumulate_grad_hook(
                lambda p, n=name: seen.append((n, p.grad.sum().item()))
            )

    x = torch.randn(4, 16)
    with clean():
        parity(model, lambda m: m(x).sum().backward(), steps=2, setup=setup)
    # post-accumulate hooks ran for both models with the same grads (order may differ)
    assert len(seen) == 2 * 2 * 4
    assert sorted(seen[:4]) == sorted(seen[4:8])


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2)
        self.fc = nn.Linear(8 * 3 * 3, 10)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv1(x)))
        h = nn.functional.max_pool2d(h, 2)
        h.register_hook(lambda g: g.clamp(-1, 1))
        h = torch.relu(self.conv2(h))
        return self.fc(h.flatten(1))


def test_conv_net():
    torch.manual_seed(0)
    model = ConvNet()
    x = torch.randn(2, 3, 16, 16)
    target = torch.randint(0, 10, (2,))

    def step(m):
        nn.functional.cross_entropy(m(x), target).backward()

    with clean():
        parity(model, step, steps=2, setup=lambda m: _hook_params(m, 2.0))
        assert ca_counters()["captures"] == 1


class Block(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        x.register_hook(lambda g: g * 1.5)
        return x + self.mlp(self.ln2(x))


def test_attention_block():
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(2, 6, 32)
    with clean():
        parity(
            model, lambda m: m(x).square().mean().backward(), steps=2, atol=1e-5, setup=_hook_params
        )
        assert ca_counters()["captures"] == 1


def test_gpt2_small():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=32, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(cfg)
    model.eval()  # no dropout: eager and compiled draw the same
    ids = torch.randint(0, 128, (2, 12))

    def step(m):
        out = m(ids, labels=ids, output_hidden_states=True)
        out.hidden_states[1].register_hook(lambda g: g * 0.25)
        out.loss.backward()
        return out.loss.detach()

    with clean():
        parity(model, step, steps=2, atol=1e-5, setup=_hook_params)
        assert ca_counters()["captures"] == 1


def test_kiln_compiled_model_inlines_aot_backward():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    test_mod = copy.deepcopy(model)
    _hook_params(model)
    _hook_params(test_mod)
    ref = kiln.compile(model, backend="aot_eager")
    test = kiln.compile(test_mod, backend="aot_eager")
    x = torch.randn(4, 8)
    with clean("compiled_autograd") as log:
        for _ in range(2):
            ref(x).sum().backward()
            with ca.enable(None):
                test(x).sum().backward()
    assert_same_grads(grads(model), grads(test_mod))
    assert "aot0_" in log.getvalue()


def test_custom_function_is_an_opaque_call():
    calls = []

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            calls.append(1)
            (a,) = ctx.saved_tensors
            return 2 * a * g

    w = torch.randn(5, requires_grad=True)
    ref = w.detach().clone().requires_grad_()
    with clean("compiled_autograd") as log:
        for _ in range(2):
            Square.apply(ref * 3).sum().backward()
            with ca.enable(None):
                Square.apply(w * 3).sum().backward()
        counters = ca_counters()
    torch.testing.assert_close(w.grad, ref.grad)
    assert len(calls) == 4  # ran (for real) on every backward
    assert "call_backward_SquareBackward" in log.getvalue()
    assert counters["captures"] == 1


def test_autograd_grad_and_backward_inputs():
    w = torch.randn(5, requires_grad=True)
    b = torch.randn(5, requires_grad=True)
    with clean():
        with ca.enable(None):
            (gw,) = torch.autograd.grad((w.sin() * b).sum(), w)
            (b * w).sum().backward(inputs=[b])
        counters = ca_counters()
    torch.testing.assert_close(gw, w.cos() * b)
    assert w.grad is None  # autograd.grad does not accumulate; inputs=[b] leaves w alone
    torch.testing.assert_close(b.grad, w.detach())
    assert counters["captures"] == 2


def test_accumulates_into_existing_grad_and_steals_fresh_grads():
    w = torch.randn(3, 4, requires_grad=True)
    w.grad = torch.ones(3, 4)
    old = w.grad
    with ca.enable(None):
        (w * 2).sum().backward()
    assert w.grad is old  # in place, as eager
    torch.testing.assert_close(w.grad, torch.full((3, 4), 3.0))
    g = torch.randn(3, 4)
    v = torch.randn(3, 4, requires_grad=True)
    with ca.enable(None):
        v.backward(g)
    assert v.grad is not g and torch.equal(v.grad, g)  # a graph input is cloned, not stolen


def test_fallbacks_are_logged_and_correct():
    w = torch.randn(4, requires_grad=True)
    with clean("compiled_autograd") as log:
        with ca.enable(None):
            (gw,) = torch.autograd.grad((w**3).sum(), w, create_graph=True)
            gw.sum().backward()
        counters = ca_counters()
    torch.testing.assert_close(w.grad, 6 * w.detach())
    assert "create_graph=True" in log.getvalue()
    assert counters["fallbacks"] == 1 and counters["captures"] == 1


def test_module_full_backward_hook_falls_back():
    m = nn.Linear(4, 4)
    seen = []
    m.register_full_backward_hook(lambda mod, gi, go: seen.append(go[0].shape))
    with clean("compiled_autograd") as log:
        with ca.enable(None):
            m(torch.randn(2, 4, requires_grad=True)).sum().backward()
    assert seen == [torch.Size([2, 4])]
    assert "backward runs in the eager engine" in log.getvalue()


def test_second_backward_raises_like_eager():
    w = torch.randn(4, requires_grad=True)
    loss = (w * w).sum()
    with ca.enable(None):
        loss.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            loss.backward()
    loss = (w * w).sum()
    with ca.enable(None):
        loss.backward(retain_graph=True)
        loss.backward()
    torch.testing.assert_close(w.grad, 6 * w.detach())


def test_final_callbacks_run_after_the_graph():
    from torch.autograd.variable import Variable

    w = torch.randn(4, requires_grad=True)
    order = []

    def hook(g):
        Variable._execution_engine.queue_callback(lambda: order.append(("cb", w.grad is not None)))
        order.append("hook")
        return g

    w.register_hook(hook)
    with ca.enable(None):
        (w * 2).sum().backward()
    assert order == ["hook", ("cb", True)]


def test_changing_batch_size_reuses_one_generic_graph():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    test = copy.deepcopy(model)
    with clean():
        for b in [4, 6, 9, 4]:
            x = torch.randn(b, 5, 8)
            model(x).sum().backward()
            with ca.enable(None):
                test(x).sum().backward()
            assert_same_grads(grads(model), grads(test), atol=1e-5, rtol=1e-5)
        counters = ca_counters()
    assert counters["compiles"] == 2 and counters["calls"] == 4


def test_compiler_fn_receives_the_graph_once():
    seen = []

    def compiler_fn(gm):
        seen.append(gm)
        return gm

    w = torch.randn(3, requires_grad=True)
    with clean():
        for _ in range(3):
            with ca.enable(compiler_fn):
                (w.exp() * 2).sum().backward()
    assert len(seen) == 1 and type(seen[0]).__name__ == "CompiledAutograd"
    torch.testing.assert_close(w.grad, 6 * w.detach().exp())


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing(reentrant):
    import torch.utils.checkpoint as cp

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
    x = torch.randn(4, 8, requires_grad=reentrant)
    with clean():
        parity(model, lambda m: cp.checkpoint(m, x, use_reentrant=reentrant).sum().backward())
        # saved-tensor hooks / a custom Function with non-tensor inputs: the eager engine runs it
        assert ca_counters()["fallbacks"] >= 1


def test_ddp_hooks_with_a_fullgraph_compiler():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    x = torch.randn(4, 16)
    compiler = kiln.compile(backend="aot_eager", fullgraph=True)

    def scale(p):
        p.grad.mul_(0.5)

    def setup(m):
        _hook_params(m)
        for p in m.parameters():
            p.register_post_accumulate_grad_hook(scale)

    with clean() as log:
        kiln.counters["stats"].clear()
        parity(model, lambda m: m(x).sum().backward(), steps=2, setup=setup, compiler_fn=compiler)
        assert kiln.counters["stats"]["unique_graphs"] == 1  # tensor work: one graph
    assert "compiler failed" not in log.getvalue()


def test_hook_feeding_tensor_work_compiles_the_graphs_around_it():
    torch.manual_seed(0)
    model = MLP()  # a hook on a non-leaf activation: a Python call inside the tensor work
    x = torch.randn(8, 16)
    with clean("compiled_autograd_verbose") as log:
        kiln.counters["stats"].clear()
        parity(
            model,
            lambda m: m(x).sum().backward(),
            steps=2,
            compiler_fn=kiln.compile(backend="eager", fullgraph=True),
        )
        counters = ca_counters()
        unique = kiln.counters["stats"]["unique_graphs"]
    assert counters["chunked"] == 1 and counters["compiles"] == 1
    assert "compiling 2 graphs around" in log.getvalue()
    assert unique == 2 and "compiler failed" not in log.getvalue()


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(4, 3).t(),
        lambda: torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last),
        lambda: torch.randn(4, 6)[:, ::2],
    ],
    ids=["transposed", "channels_last", "strided"],
)
def test_grad_layout_contract(make):
    torch.manual_seed(0)
    ref = make().detach().requires_grad_()
    torch.manual_seed(0)
    w = make().detach().requires_grad_()
    for f in (lambda t: t * 2, torch.exp):
        f(ref).sum().backward()
        with ca.enable(None):
            f(w).sum().backward()
        assert w.grad.stride() == ref.grad.stride()
        torch.testing.assert_close(w.grad, ref.grad)


def test_one_grad_for_two_leaves_is_not_aliased():
    x = torch.randn(4, requires_grad=True)
    y = torch.randn(4, requires_grad=True)
    c = torch.randn(4)
    with ca.enable(None):
        ((x + y) * c).sum().backward()  # AddBackward hands the same grad to both leaves
    assert x.grad.data_ptr() != y.grad.data_ptr()
    x.grad += 1
    torch.testing.assert_close(y.grad, c)


def test_disable_and_nesting_and_maybe_enable():
    from kiln import config

    w = torch.randn(3, requires_grad=True)
    with clean():
        with ca.enable(None):
            assert ca.active()
            with ca.disable():
                assert not ca.active()
                w.exp().sum().backward()  # eager engine
            with ca.enable(None):  # nested: the inner compiler applies
                w.exp().sum().backward()
        assert not ca.active()
        w.exp().sum().backward()  # outside: the eager engine again
        prev = config.compiled_autograd
        try:
            config.compiled_autograd = False
            with ca.maybe_enable("eager"):
                assert not ca.active()
            config.compiled_autograd = True
            with ca.maybe_enable("eager"):
                assert ca.active()
        finally:
            config.compiled_autograd = prev
        counters = ca_counters()
    assert counters == {"captures": 1, "compiles": 1, "calls": 1}
    torch.testing.assert_close(w.grad, 3 * w.detach().exp())


def test_gpt2_kiln_forward_and_fullgraph_backward():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=32, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(cfg)
    model.eval()
    test = copy.deepcopy(model)
    _hook_params(model)
    _hook_params(test)
    compiled = kiln.compile(test, backend="aot_eager")
    ids = torch.randint(0, 128, (2, 12))
    with clean("compiled_autograd") as log:
        for _ in range(2):
            model(ids, labels=ids).loss.backward()
            loss = compiled(ids, labels=ids).loss
            with ca.enable(kiln.compile(backend="aot_eager", fullgraph=True)):
                loss.backward()
        counters = ca_counters()
    assert_same_grads(grads(model), grads(test), atol=1e-5)
    assert counters == {"captures": 1, "compiles": 1, "calls": 2}
    assert "compiler failed" not in log.getvalue()  # the tensor work compiled with fullgraph


def test_custom_function_between_compiled_graphs():
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            (b,) = ctx.saved_tensors
            return g * b, None

    torch.manual_seed(0)
    body, head = nn.Sequential(nn.Linear(6, 6), nn.Tanh()), nn.Linear(6, 2)
    ref_body, ref_head = copy.deepcopy(body), copy.deepcopy(head)
    b, x = torch.randn(6), torch.randn(3, 6)

    def step(body, head):
        head(Scale.apply(body(x), b)).exp().sum().backward()

    with clean("compiled_autograd_verbose") as log:
        step(ref_body, ref_head)
        with ca.enable(kiln.compile(backend="eager", fullgraph=True)):
            step(body, head)
    assert_same_grads(grads(ref_body), grads(body))
    assert_same_grads(grads(ref_head), grads(head))
    assert "compiling 2 graphs around" in log.getvalue()  # the opaque call sits between them
    assert "compiler failed" not in log.getvalue()
