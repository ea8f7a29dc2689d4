"""kiln.export: one graph with specs and state; runs, prints, compiles; errors for breaks/inputs."""

import pytest
import torch

import kiln
from kiln.export import Dim, ExportError, InputError


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.register_buffer("offset", torch.arange(8.0))

    def forward(self, x, extra):
        y = self.norm(self.lin(x)).relu() + self.offset
        return {"y": y, "pair": [extra["scale"] * x.shape[0], 3]}


def _inputs(batch):
    return torch.randn(batch, 8), {"scale": torch.randn(8)}


def _close(a, b):
    torch.testing.assert_close(a["y"], b["y"])
    torch.testing.assert_close(a["pair"][0], b["pair"][0])
    assert a["pair"][1] == b["pair"][1]


@pytest.fixture
def program():
    torch.manual_seed(0)
    model = _Net().eval()
    batch = Dim("batch", max=128)
    return model, kiln.export(model, _inputs(4), dynamic_shapes={"x": {0: batch}})


def test_export_runs_every_batch_size_like_eager(program):
    model, prog = program
    for b in (2, 5, 17):
        args = _inputs(b)
        _close(prog(*args), model(*args))
        _close(prog.module()(*args), model(*args))


def test_export_prints_specs_dims_guards_and_graph(program):
    _, prog = program
    text = str(prog)
    assert "leaf 0: float32[batch, 8] on cpu" in text
    assert "dim batch: 2 <= batch <= 128" in text
    assert "guard: batch >= 2" in text
    assert "def forward(self, arg0, p_lin_weight, p_lin_bias" in text
    assert "state: 5 tensors (4 parameters)" in text


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "kiln"])
def test_exported_program_compiles_with_any_backend(program, backend, tmp_path, monkeypatch):
    monkeypatch.setattr(kiln.config, "cache_dir", str(tmp_path))
    model, prog = program
    fast = prog.compile(backend)
    for b in (3, 6):
        args = _inputs(b)
        _close(fast(*args), model(*args))


def test_inputs_that_violate_the_specs(program):
    _, prog = program
    x, extra = _inputs(4)
    with pytest.raises(InputError, match=r"dim 0 \(batch\) = 200 is outside \[2, 128\]"):
        prog(torch.randn(200, 8), extra)
    with pytest.raises(InputError, match="dim 1 is static 8 in the exported program, got 9"):
        prog(torch.randn(4, 9), extra)
    with pytest.raises(InputError, match="expected dtype float32, got torch.float64"):
        prog(x.double(), extra)
    with pytest.raises(InputError, match="do not have the exported structure"):
        prog(x, {"scale": extra["scale"], "more": 1})


def _breaks_twice(x):
    y = x.sin()
    print("not in a graph")
    n = y.sum().item()
    return y * n


def test_every_graph_break_is_listed_with_its_line():
    with pytest.raises(ExportError) as info:
        kiln.export(_breaks_twice, (torch.randn(3),))
    text = str(info.value)
    assert "2 graph break(s)" in text
    assert "builtin print" in text and 'print("not in a graph")' in text
    assert "Tensor.item()" in text and "n = y.sum().item()" in text
    assert "hint:" in text
    assert [b.user_location.split(": ", 1)[1] for b in info.value.breaks] == [
        'print("not in a graph")',
        "n = y.sum().item()",
    ]


def _pins_batch(x):
    if x.shape[0] == 4:
        return x * 2
    return x


def test_a_dim_the_program_specialises_is_an_error():
    with pytest.raises(ExportError, match="Dim b cannot vary: the program specialises it to 4"):
        kiln.export(_pins_batch, (torch.randn(4, 3),), dynamic_shapes=({0: Dim("b")},))


def test_constant_inputs_must_match():
    prog = kiln.export(lambda x, n: x * n, (torch.randn(3), 3))
    torch.testing.assert_close(prog(torch.ones(3), 3), torch.full((3,), 3.0))
    with pytest.raises(InputError, match="exported with the constant 3, got 4"):
        prog(torch.ones(3), 4)


def test_training_mode_export_leaves_the_module_untouched():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prog = kiln.export(model, (torch.randn(8, 4),))
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k])
    x = torch.randn(8, 4)
    mod = prog.module()
    torch.testing.assert_close(mod(x), model(x))  # both update their own running stats
    torch.testing.assert_close(
        [b for n, b in mod.named_buffers() if n.endswith("running_mean")][0],
        model[1].running_mean,
    )
