"""Every builder of the suite builds and runs eager forward, backward and an optimizer step."""

import pytest
import torch

from kiln_bench import models

HAVE_TRANSFORMERS, WHY = models.transformers_available()


@pytest.mark.parametrize("name", list(models.REGISTRY))
def test_builder_runs_forward_backward(name):
    spec = models.REGISTRY[name]
    if "hf" in spec.tags and not HAVE_TRANSFORMERS:
        pytest.skip(WHY)
    model, inputs, loss_fn = spec.build("cpu", torch.float32, batch=2)
    assert model.training
    out = model(*inputs)
    assert isinstance(out, torch.Tensor) and out.shape[0] == 2
    loss = loss_fn(out)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    assert params and all(p.grad is not None for p in params)
    assert all(torch.isfinite(p.grad).all() for p in params)


@pytest.mark.parametrize("name", ["mlp", "nanogpt"])
def test_builders_are_deterministic(name):
    spec = models.REGISTRY[name]
    m1, in1, _ = spec.build(batch=2)
    m2, in2, _ = spec.build(batch=2)
    for a, b in zip(in1, in2):
        assert torch.equal(a, b)
    for (n1, p1), (n2, p2) in zip(m1.named_parameters(), m2.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2)


def test_registry_has_the_suite():
    builtin = {"mlp", "resnet", "nanogpt", "attention", "pointwise"}
    hf = {"hf_gpt2", "hf_bert", "hf_llama", "hf_t5", "hf_vit"}
    assert builtin | hf <= set(models.REGISTRY)
    quick = {s.name for s in models.select(tags=["quick"])}
    assert quick == set(models.QUICK) and quick <= set(models.REGISTRY)
    assert [s.name for s in models.select("pointwise,mlp")] == ["pointwise", "mlp"]
    with pytest.raises(ValueError, match="unknown model"):
        models.select("nope")
