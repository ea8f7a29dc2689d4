"""Models benchmarks/hf_conformance.py found kiln short on (small configs, random weights): each
equal to eager, logits and gradients, with the graph breaks torch.compile does not have gone."""

import pytest
import torch

import kiln

T = pytest.importorskip("transformers")


def _ids(vocab, n=12):
    return torch.randint(3, vocab, (2, n), generator=torch.Generator().manual_seed(0))


def _check(model, inputs, max_breaks=0, min_graphs=1):
    """Logits and every gradient equal eager's; the breaks and graphs counted."""
    model = model.float().eval()
    mine = type(model)(model.config).float().eval()
    mine.load_state_dict(model.state_dict())
    kiln.reset()
    results = []
    for m, fn in ((model, model), (mine, kiln.compile(mine, backend="eager"))):
        logits = fn(**inputs).logits
        logits.pow(2).mean().backward()
        results.append((logits.detach(), {n: p.grad for n, p in m.named_parameters()}))
    (ref, ref_grads), (got, grads) = results
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    for name, g in ref_grads.items():
        if g is None:
            assert grads[name] is None, name
        else:
            torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-5, msg=name)
    assert kiln.counters["stats"]["graph_breaks"] <= max_breaks, dict(kiln.counters["graph_break"])
    assert kiln.counters["stats"]["unique_graphs"] >= min_graphs


def test_mamba_associative_scan_has_no_break():
    cfg = T.MambaConfig(vocab_size=128, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2)
    torch.manual_seed(0)
    _check(T.MambaForCausalLM(cfg), {"input_ids": _ids(128), "use_cache": False})


def test_yoso_function_with_a_config_dict_has_no_break():
    cfg = T.YosoConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    _check(T.YosoForMaskedLM(cfg), {"input_ids": _ids(128)})


def test_switch_transformers_code_under_the_decorators_is_compiled():
    cfg = T.SwitchTransformersConfig(
        vocab_size=128,
        d_model=32,
        d_kv=8,
        d_ff=64,
        expert_capacity=8,
        num_layers=2,
        num_sparse_encoder_layers=1,
        num_decoder_layers=2,
        num_sparse_decoder_layers=1,
        num_heads=4,
        num_experts=4,
        dropout_rate=0.0,
    )
    torch.manual_seed(0)
    ids = _ids(128)
    inputs = {"input_ids": ids, "decoder_input_ids": ids[:, :6], "use_cache": False}
    # the experts' dispatch reads `nonzero` (a break, as in torch.compile); everything else is
    # compiled: its graphs used to be none at all (the callee under the decorators ran in Python)
    _check(T.SwitchTransformersForConditionalGeneration(cfg), inputs, max_breaks=100, min_graphs=10)
