"""Hugging Face models (small configs, random weights) under kiln.compile(backend=counting):
outputs equal to eager, one graph, zero graph breaks, no recompile on the second call."""

import pytest
import torch
from frontend_helpers import CountingBackend, assert_same

import kiln

T = pytest.importorskip("transformers")


def ids(n=8, vocab=128):
    return torch.randint(0, vocab, (2, n), generator=torch.Generator().manual_seed(0))


def mask(n=8):
    return torch.ones(2, n, dtype=torch.long)


def gpt2():
    cfg = T.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=128,
        n_positions=32,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    return T.GPT2LMHeadModel(cfg), {"input_ids": ids(), "attention_mask": mask()}


def bert():
    cfg = T.BertConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=128,
        max_position_embeddings=32,
    )
    return T.BertModel(cfg), {"input_ids": ids()}


def llama():
    cfg = T.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        vocab_size=128,
        max_position_embeddings=32,
        use_cache=False,
    )
    return T.LlamaForCausalLM(cfg), {"input_ids": ids(), "attention_mask": mask()}


def t5():
    cfg = T.T5Config(
        num_layers=1,
        num_decoder_layers=1,
        d_model=32,
        d_ff=64,
        num_heads=2,
        d_kv=16,
        vocab_size=128,
        use_cache=False,
    )
    return T.T5ForConditionalGeneration(cfg), {"input_ids": ids(), "decoder_input_ids": ids(6)}


def vit():
    cfg = T.ViTConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=16,
        patch_size=4,
    )
    return T.ViTModel(cfg), {"pixel_values": torch.randn(2, 3, 16, 16)}


MODELS = [gpt2, bert, llama, t5, vit]


@pytest.mark.parametrize("make", MODELS, ids=lambda f: f.__name__)
def test_hf_inference_one_graph_no_breaks(make):
    torch.manual_seed(0)
    model, inputs = make()
    model.eval()
    with torch.no_grad():
        expected = model(**inputs)
    kiln.reset()
    backend = CountingBackend()
    compiled = kiln.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(2):
            got = compiled(**inputs)
            assert type(got) is type(expected)
            assert_same(expected, got)
    assert kiln.counters["stats"]["graph_breaks"] == 0, dict(kiln.counters["graph_break"])
    assert kiln.counters["stats"]["unique_graphs"] == 1
    assert backend.calls == 1
    assert kiln.counters["stats"]["recompiles"] == 0


@pytest.mark.parametrize("make", [gpt2], ids=lambda f: f.__name__)
def test_hf_training_forward_backward_no_breaks(make):
    """Training mode (dropout off by config here: GPT-2 has dropout, compared under one seed)."""
    torch.manual_seed(0)
    model, inputs = make()
    model.train()
    torch.manual_seed(1)
    expected = model(**inputs).logits
    expected.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    kiln.reset()
    compiled = kiln.compile(model, backend=CountingBackend())
    torch.manual_seed(1)
    got = compiled(**inputs).logits
    got.sum().backward()
    assert_same(expected, got)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], msg=n)
    assert kiln.counters["stats"]["graph_breaks"] == 0, dict(kiln.counters["graph_break"])
    assert kiln.counters["stats"]["unique_graphs"] == 1
