"""`if self.sub:` on a submodule: True for a module without __bool__/__len__ (an optional
layer that is present), a container's length for Sequential/ModuleList/ModuleDict."""

import torch
from frontend_helpers import run_and_compare


class Block(torch.nn.Module):
    def __init__(self, with_act, n_extra):
        super().__init__()
        self.act = torch.nn.ReLU() if with_act else None
        self.extra = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(n_extra)])
        self.named = torch.nn.ModuleDict({"a": torch.nn.Identity()} if n_extra else {})

    def forward(self, x):
        x = x.sin()
        if self.act:
            x = self.act(x)
        if self.extra:
            x = x + len(self.extra)
        if not self.named:
            x = x * 3
        return x


def test_present_and_absent_layers():
    for with_act, n_extra in ((True, 0), (False, 2), (True, 1)):
        run_and_compare(Block(with_act, n_extra), torch.randn(5), fullgraph=True)
