"""opt.step() compiled by kiln after torch.compile has run in the process (Dynamo's TorchPatcher
has wrapped every optimizer's `_init_group` in torch._dynamo.disable): no break, equal to eager.
Runs in a subprocess: the patch is process-wide."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = """
import copy, torch, kiln
kiln.config.strict = True
torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))  # Dynamo patches torch.optim
assert torch.optim.{opt}._init_group.__code__.co_filename.endswith("eval_frame.py")
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
ref = copy.deepcopy(m)
opt = torch.optim.{opt}(m.parameters(), lr=0.1)
ref_opt = torch.optim.{opt}(ref.parameters(), lr=0.1)
step = kiln.compile(lambda: opt.step())
for i in range(3):
    for p, q in zip(m.parameters(), ref.parameters()):
        p.grad = torch.full_like(p, 0.1 * (i + 1))
        q.grad = p.grad.clone()
    step()
    ref_opt.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
print("breaks", kiln.counters["stats"]["graph_breaks"])
"""


@pytest.mark.parametrize("opt", ["Adam", "SGD"])
def test_step_after_torch_compile_has_no_break(opt):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KILN_WARN_GRAPH_BREAKS": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(opt=opt)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["breaks", "0"]
