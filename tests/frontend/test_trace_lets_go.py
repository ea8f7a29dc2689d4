"""Values a trace read are freed by reference counting once the caller drops them (no cycle)."""

import gc
import weakref

import pytest
import torch

import kiln


@pytest.fixture
def no_gc():
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_grad_read_by_a_compiled_step_dies_with_zero_grad(no_gc):
    lin = torch.nn.Linear(8, 8, bias=False)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)

    def step():
        opt.step()

    compiled = kiln.compile(step, backend="eager")
    lin(torch.ones(8)).sum().backward()
    compiled()
    grad = weakref.ref(lin.weight.grad)
    opt.zero_grad(set_to_none=True)
    assert grad() is None


def test_global_tensor_read_by_a_trace_is_not_kept(no_gc):
    holder = {"t": torch.ones(3)}

    def f(x):
        return x + holder["t"]

    out = kiln.compile(f, backend="eager")(torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    t = weakref.ref(holder["t"])
    holder["t"] = torch.zeros(3)
    assert t() is None


def test_optimizer_state_dies_with_the_optimizer(no_gc):
    # (PyTorch's test_optim_state_references_cleared: an inlined call's translator sat in a
    # cycle with its parent and with the dict input it read key by key)
    lin = torch.nn.Linear(8, 8, bias=False)
    opt = torch.optim.Adadelta(lin.parameters(), lr=0.01)

    def step():
        opt.step()

    compiled = kiln.compile(step, backend="eager")
    lin(torch.ones(8)).sum().backward()
    compiled()
    state = weakref.ref(opt.state[lin.weight]["square_avg"])
    opt = None
    assert compiled is not None and state() is None
