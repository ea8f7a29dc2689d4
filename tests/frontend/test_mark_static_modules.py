"""kiln.mark_static on an nn.Module class or instance: ints read from its attributes stay
constants (one entry per value) instead of becoming size symbols; results equal eager's."""

import torch

import kiln


class Counting:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


class Scale(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x.repeat(self.k, 1) * self.k


@kiln.mark_static
class StaticScale(Scale):
    pass


def _run(mods, be):
    x = torch.randn(2, 3)
    for m in mods:
        torch.testing.assert_close(kiln.compile(m, backend=be)(x), m(x))


def _symbolic_graphs(be):
    return sum("shape_env" in gm.meta for gm in be.graphs)


def test_unmarked_module_ints_become_symbols():
    be = Counting()
    _run([Scale(2), Scale(3), Scale(4)], be)
    assert len(be.graphs) == 2 and _symbolic_graphs(be) == 1  # (the control: automatic dynamic)


def test_marked_class_keeps_its_ints_constants():
    be = Counting()
    _run([StaticScale(2), StaticScale(3), StaticScale(4)], be)
    assert len(be.graphs) == 3 and _symbolic_graphs(be) == 0


def test_marked_instance_keeps_its_ints_constants():
    be = Counting()
    mods = [Scale(5), Scale(6), Scale(7)]
    for m in mods:
        assert kiln.mark_static(m) is m
    _run(mods, be)
    assert len(be.graphs) == 3 and _symbolic_graphs(be) == 0


def test_mark_static_without_dim_pins_every_dim_of_a_tensor():
    be = Counting()
    f = kiln.compile(lambda x: x * 2, backend=be, dynamic=True)
    x = torch.randn(4, 5)
    kiln.mark_static(x)
    torch.testing.assert_close(f(x), x * 2)
    assert _symbolic_graphs(be) == 0


def test_mark_static_called_inside_a_compiled_frame_makes_its_sizes_static():
    def fn(x):
        kiln.mark_static(x, 0)
        return x * x.size(0)

    kiln.reset()
    compiled = kiln.compile(fn, backend="eager", dynamic=True, fullgraph=True)
    for n in (3, 4):
        x = torch.randn(n, 2)
        torch.testing.assert_close(compiled(x), fn(x))
    assert kiln.counters["stats"]["unique_graphs"] == 2  # dim 0 static: one entry per size
