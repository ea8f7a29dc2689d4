"""The suite's decoder entries: a LLaMA called with its default KV cache, and a generation loop
that compiles only the language model (the loop stays Python). Through the runner with kiln's
frontend and with the full kiln backend: accuracy against eager, one graph for the cached call,
at most 3 for the loop, no break."""

import pytest
import torch

from kiln_bench import models
from kiln_bench.runner import Runner, Settings

HAVE_TRANSFORMERS, WHY = models.transformers_available()
pytestmark = pytest.mark.skipif(not HAVE_TRANSFORMERS, reason=WHY)


def test_generation_entry_is_inference_only_and_compiles_its_model():
    spec = models.REGISTRY["hf_llama_generate"]
    assert spec.modes == ("inference",)
    model, (prompt,), _ = spec.build(batch=2)
    compiled = []
    same = models.compile_model(lambda m: compiled.append(m) or m, model)
    assert same is model and compiled == [model.model]  # the loop itself is not compiled
    with torch.no_grad():
        out = model.eval()(prompt)
    assert out.shape == (2, 17, models._VOCAB)


@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_decoders_through_the_runner(backend):
    s = Settings(
        models="hf_llama_cache,hf_llama_generate",
        modes=("inference", "training"),
        compare=f"kiln:{backend}",
        iters=1,
        warmup=0,
        batch=2,
        progress=False,
    )
    rows = {(r.model, r.mode): r for r in Runner(s).run().rows if r.compiler != "eager"}
    assert set(rows) == {
        ("hf_llama_cache", "inference"),
        ("hf_llama_cache", "training"),
        ("hf_llama_generate", "inference"),
    }
    for key, r in rows.items():
        assert r.status == "ok" and r.accuracy == "pass", (key, r)
        assert r.breaks == 0, (key, r.break_reason)
    assert rows[("hf_llama_cache", "inference")].graphs == 1
    assert rows[("hf_llama_generate", "inference")].graphs <= 3
