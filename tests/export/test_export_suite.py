"""The suite's models exported with a dynamic batch, saved, and loaded in a fresh process."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import kiln
from kiln.export import Dim, ExportError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILTIN = ["mlp", "resnet", "nanogpt", "attention", "pointwise"]
HF = ["hf_gpt2", "hf_bert", "hf_llama", "hf_t5", "hf_vit"]


def _export_all(names, folder):
    from kiln_bench import models

    cases = {}
    for name in names:
        spec = models.REGISTRY[name]
        model, inputs, _ = spec.build()
        model.eval()
        _, other, _ = spec.build(batch=3)
        batch = Dim("batch", max=1024)
        with torch.no_grad():
            prog = kiln.export(
                model, tuple(inputs), dynamic_shapes=tuple({0: batch} for _ in inputs)
            )
            expected = [model(*xs) for xs in (inputs, other)]
        kiln.save(prog, folder / f"{name}.kiln")
        cases[name] = {"inputs": [list(inputs), list(other)], "expected": expected}
    torch.save(cases, folder / "cases.pt")
    return cases


def _load_in_fresh_process(folder):
    script = textwrap.dedent(
        f"""
        import sys, torch, kiln
        cases = torch.load({str(folder / "cases.pt")!r})
        for name, case in cases.items():
            prog = kiln.load({str(folder)!r} + "/" + name + ".kiln")
            with torch.no_grad():
                for xs, want in zip(case["inputs"], case["expected"]):
                    torch.testing.assert_close(prog(*xs), want, rtol=1e-4, atol=1e-5)
            print("ok", name)
        assert not any(m.startswith(("kiln_bench", "transformers")) for m in sys.modules)
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)


def test_builtin_models_round_trip_with_dynamic_batch(tmp_path):
    cases = _export_all(BUILTIN, tmp_path)
    res = _load_in_fresh_process(tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == [w for name in cases for w in ("ok", name)]


@pytest.mark.parametrize("name", HF)
def test_hf_models_round_trip_or_name_every_break(name, tmp_path):
    pytest.importorskip("transformers")
    try:
        _export_all([name], tmp_path)
    except ExportError as e:
        text = str(e)
        assert "graph break(s)" in text and "modeling_" in text  # reasons with HF source lines
        pytest.xfail(f"{name} does not capture as one graph yet: {text.splitlines()[1]}")
    res = _load_in_fresh_process(tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
