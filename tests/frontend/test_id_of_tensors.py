"""id() of a tensor read from a source, compiled vs eager (pinned by an ID_MATCH guard)."""

import torch
from frontend_helpers import CountingBackend

import kiln


class _Pick(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.y1 = torch.ones(2)
        self.y2 = torch.zeros(2)

    def forward(self, x, ref_id):
        if ref_id == id(self.y1):
            return torch.mul(x, self.y1)
        return torch.mul(x, self.y2)


def test_id_of_a_module_tensor_attribute():
    kiln.reset()
    m = _Pick()
    backend = CountingBackend()
    compiled = kiln.compile(m, backend=backend, fullgraph=True)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x, id(m.y1)), m(x, id(m.y1)))
    assert backend.calls == 1
    torch.testing.assert_close(compiled(x, id(m.y2)), m(x, id(m.y2)))
    m.y1 = torch.full((2,), 3.0)  # another tensor there: the id guard fails, as eager differs
    torch.testing.assert_close(compiled(x, id(m.y1)), m(x, id(m.y1)))


def test_id_of_inputs_compared():
    def fn(x, y):
        return x + (id(x) == id(y)), id(x) == id(x)

    kiln.reset()
    compiled = kiln.compile(fn, fullgraph=True)
    a, b = torch.ones(1), torch.ones(1)
    for args in ((a, a), (a, b), (b, a), (b, b)):
        got, expected = compiled(*args), fn(*args)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
