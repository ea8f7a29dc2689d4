"""`module.to(...)` in a forward (Note [Modules: a .to() that changes nothing]): a call that
converts nothing is the module itself, and storing it back is a no-op (one graph); a call that
converts is a graph break, and the module is converted as eagerly."""

import pytest
import torch
from torch import nn

import kiln
from tests.frontend.frontend_helpers import run_and_compare


class Router(nn.Module):
    """transformers' Switch Transformers router: `self.classifier.to(self.dtype)` each call."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.dtype = dtype
        self.classifier = nn.Linear(4, 3)
        self.register_buffer("counts", torch.zeros(3, dtype=torch.int64))

    def forward(self, x):
        self.classifier = self.classifier.to(self.dtype)
        return self.classifier(x.to(self.dtype)).softmax(-1)


@pytest.mark.parametrize("args", [(torch.float32,), ("cpu",), ("cpu", torch.float32), ()])
def test_a_to_that_changes_nothing_is_one_graph(args):
    def fn(m, x):
        m.classifier = m.classifier.to(*args)
        return m.classifier(x) + 1

    m = Router()
    run_and_compare(fn, m, torch.randn(2, 4), fullgraph=True)


def test_router_forward_every_backend():
    m, x = Router(), torch.randn(5, 4)
    for backend in ("eager", "aot_eager", "kiln"):
        kiln.reset()
        torch.testing.assert_close(kiln.compile(m, backend=backend, fullgraph=True)(x), m(x))


def test_a_to_that_converts_breaks_and_converts_as_eager():
    eager, mine = Router(torch.float64), Router(torch.float64)
    mine.load_state_dict(eager.state_dict())
    x = torch.randn(2, 4)
    expected = eager(x)
    got = kiln.compile(mine, backend="eager")(x)
    torch.testing.assert_close(got, expected)
    assert mine.classifier.weight.dtype == eager.classifier.weight.dtype == torch.float64
    assert mine.counts.dtype == torch.int64  # (integer buffers keep their dtype)


def test_int_dtype_raises_as_eager():
    def fn(m, x):
        return m.to(torch.int32)(x)

    with pytest.raises(TypeError):
        fn(nn.Linear(2, 2), torch.randn(2))
    with pytest.raises(TypeError):
        kiln.compile(fn, backend="eager")(nn.Linear(2, 2), torch.randn(2))
