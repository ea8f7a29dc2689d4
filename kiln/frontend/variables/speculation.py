"""Speculative tracing: code traced only to check it (an autograd.Function's forward and
backward, a hook on a tensor made in the frame), its nodes dropped again afterwards."""

import torch


class Speculation:
    """A stretch of tracing with grad mode off (as autograd runs forwards, backwards and hooks):
    where the graph and the side effects stood before it, to check for effects and roll back."""

    def __init__(self, tx):
        self.output = tx.output
        self.effects = tx.output.side_effects

    def __enter__(self):
        self.checkpoint = self.output.last_node()
        self.snapshot, self.version = self.effects.snapshot(), self.effects.version
        self.grad = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        return self

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.grad)
        return False

    def had_effects(self):
        """Whether the traced code changed anything outside the graph."""
        return self.effects.version != self.version or self.effects.changed_since(self.snapshot)

    def drop_nodes(self):
        """The graph as it was before the speculation (placeholders stay)."""
        self.output.rollback(self.checkpoint)

    def undo_effects(self):
        self.effects.restore(self.snapshot)
