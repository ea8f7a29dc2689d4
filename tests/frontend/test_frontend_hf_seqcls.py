"""Hugging Face sequence-classification heads with `labels=`: the first call sets
`config.problem_type` through the strict dataclass's validating __setattr__ (Note [Side effects:
stores through a user __setattr__]): traced, zero breaks, the store replayed, the loss and every
gradient equal to eager; the second call (problem_type now set) recompiles once, no break."""

import pytest
import torch
from test_frontend_hf import ids

import kiln

T = pytest.importorskip("transformers")

SMALL = dict(vocab_size=128, max_position_embeddings=32, num_labels=3)


def bert():
    cfg = T.BertConfig(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64, **SMALL
    )
    return T.BertForSequenceClassification(cfg)


def gpt2():
    cfg = T.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=32, num_labels=3,
        pad_token_id=0, use_cache=False,
    )  # fmt: skip
    return T.GPT2ForSequenceClassification(cfg)


def llama():
    cfg = T.LlamaConfig(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, pad_token_id=0, use_cache=False, **SMALL,
    )  # fmt: skip
    return T.LlamaForSequenceClassification(cfg)


def step(model, labels):
    """One training step: the loss, the gradients, the problem_type it left in the config."""
    model.config.problem_type = None
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    out = model(input_ids=ids(), labels=labels)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.loss.detach(), out.logits.detach(), grads, model.config.problem_type


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("make", [bert, gpt2, llama], ids=lambda f: f.__name__)
def test_hf_sequence_classification_training_no_breaks(make, backend):
    torch.manual_seed(0)
    model = make()
    model.train()
    labels = torch.tensor([0, 2])
    eager = step(model, labels)
    assert eager[3] == "single_label_classification"
    kiln.reset()
    compiled = kiln.compile(model, backend=backend)
    got = step(compiled, labels)
    assert kiln.counters["stats"]["graph_breaks"] == 0, dict(kiln.counters["graph_break"])
    assert kiln.counters["stats"]["unique_graphs"] == 1
    torch.testing.assert_close(got[0], eager[0])
    torch.testing.assert_close(got[1], eager[1])
    assert got[2].keys() == eager[2].keys()
    for n in eager[2]:
        torch.testing.assert_close(got[2][n], eager[2][n], msg=n)
    assert got[3] == "single_label_classification"  # the store was replayed
    # problem_type is set now (step() resets it, so set it here): guards see it, one recompile
    compiled.config.problem_type = "single_label_classification"
    torch.manual_seed(1)
    again = compiled(input_ids=ids(), labels=labels).loss
    torch.testing.assert_close(again, eager[0])
    assert kiln.counters["stats"]["graph_breaks"] == 0
    assert kiln.counters["stats"]["unique_graphs"] == 2
