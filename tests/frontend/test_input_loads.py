"""A graph's inputs read from nested modules share the reads of their common path (Note
[Bytecode: module paths read once]), and the results match eager."""

import dis

import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.norm(self.lin(x)).relu()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())

    def forward(self, x):
        return self.blocks(x) * 2


def _transformed(cf):
    return cf._kiln_cache.entry_info[0].fn.__code__


def test_shared_paths_are_read_once_and_cleared():
    torch.manual_seed(0)
    net = Net().eval()
    cf = kiln.compile(net, backend=CountingBackend())
    x = torch.randn(3, 4)
    torch.testing.assert_close(cf(x), net(x))
    code = _transformed(cf)
    paths = [n for n in code.co_varnames if n.startswith("___kiln_path_")]
    assert paths, code.co_varnames
    ins = list(dis.get_instructions(code))
    # each path is stored once before the call and set to None after it
    stores = [i.argval for i in ins if i.opname == "STORE_FAST" and i.argval in paths]
    assert sorted(stores) == sorted(paths * 2)
    reads = sum(1 for i in ins if i.opname == "LOAD_ATTR" and i.argval == "_modules")
    assert reads < 8  # (without sharing: 3 per parameter or buffer, 10 tensors)


def test_changed_parameters_are_read_anew():
    torch.manual_seed(0)
    net = Net().eval()
    cf = kiln.compile(net, backend="kiln")
    x = torch.randn(3, 4)
    for _ in range(2):
        torch.testing.assert_close(cf(x), net(x))
    with torch.no_grad():
        net.blocks[1].lin.weight.mul_(3)
        net.blocks[0].norm.running_mean.add_(1)
    torch.testing.assert_close(cf(x), net(x))
    net.blocks[1].lin.weight = torch.nn.Parameter(torch.randn(4, 4))
    net.blocks[0].norm.running_var = torch.rand(4) + 0.5
    torch.testing.assert_close(cf(x), net(x))


def test_training_mode_buffers_are_written_back():
    torch.manual_seed(0)
    net, ref = Net().train(), Net().train()
    ref.load_state_dict(net.state_dict())
    cf = kiln.compile(net, backend="kiln")
    x = torch.randn(3, 4)
    for _ in range(2):
        torch.testing.assert_close(cf(x), ref(x))
    for a, b in zip(net.buffers(), ref.buffers()):
        torch.testing.assert_close(a, b)
