"""Hugging Face decoders called as users call them (small configs, random weights): `use_cache`
left at its default (a DynamicCache made inside forward), and a generation loop feeding the cache
back. Logits and cache contents equal to eager, 0 graph breaks, no backend failure, and the loop
compiles at most 3 times (prefill, first decode step, then one graph with a dynamic cache length)."""

import pytest
import torch

import kiln

T = pytest.importorskip("transformers")

SMALL = dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, vocab_size=64)


def llama():
    return T.LlamaForCausalLM(T.LlamaConfig(**SMALL, num_key_value_heads=2, intermediate_size=64))


def gpt2():
    return T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=64))


def qwen2():
    return T.Qwen2ForCausalLM(T.Qwen2Config(**SMALL, num_key_value_heads=2, intermediate_size=64))


def mistral():
    cfg = T.MistralConfig(**SMALL, num_key_value_heads=2, intermediate_size=64)
    return T.MistralForCausalLM(cfg)


def gpt_neox():
    return T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**SMALL, intermediate_size=64))


def phi():
    return T.PhiForCausalLM(T.PhiConfig(**SMALL, intermediate_size=64))


def falcon():
    cfg = T.FalconConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, vocab_size=64)
    return T.FalconForCausalLM(cfg)


def opt():
    cfg = T.OPTConfig(**SMALL, ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=64)
    return T.OPTForCausalLM(cfg)


DECODERS = [llama, gpt2, qwen2, mistral, gpt_neox, phi, falcon, opt]


def ids(n):
    return torch.randint(0, 64, (2, n), generator=torch.Generator().manual_seed(n))


def assert_cache_equal(expected, got):
    assert type(got) is type(expected)
    assert len(got.layers) == len(expected.layers)
    for a, b in zip(expected.layers, got.layers):
        torch.testing.assert_close(b.keys, a.keys)
        torch.testing.assert_close(b.values, a.values)


def assert_no_breaks():
    stats = kiln.counters["stats"]
    assert stats["graph_breaks"] == 0, dict(kiln.counters["graph_break"])
    assert stats["backend_failures"] == 0


@pytest.mark.parametrize("make", DECODERS, ids=lambda f: f.__name__)
def test_decoder_default_cache_one_graph(make):
    torch.manual_seed(0)
    model = make().eval()
    x = ids(8)
    with torch.no_grad():
        expected = model(x)
        kiln.reset()
        got = kiln.compile(model, backend="eager")(x)
    torch.testing.assert_close(got.logits, expected.logits)
    assert_cache_equal(expected.past_key_values, got.past_key_values)
    assert_no_breaks()
    assert kiln.counters["stats"]["unique_graphs"] == 1


def generate(model, prompt, steps):
    """Greedy decoding as users write it: prefill, then one token at a time with the cache."""
    cache = T.DynamicCache(config=model.config)
    out = model(prompt, past_key_values=cache, use_cache=True)
    tokens = []
    for _ in range(steps):
        nxt = out.logits[:, -1:].argmax(-1)
        tokens.append(nxt)
        out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
    return torch.cat(tokens, 1), out


@pytest.mark.parametrize(
    "make,backend",
    [
        (llama, "eager"),
        (gpt2, "eager"),
        (qwen2, "aot_eager"),
        (opt, "aot_eager"),  # its decode step makes torch.ones([b, past + 1]): a symbolic factory
        (llama, "kiln"),
        (gpt2, "kiln"),
        (opt, "kiln"),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_generation_loop_compiles_at_most_three_times(make, backend):
    torch.manual_seed(0)
    model = make().eval()
    prompt = ids(6)
    with torch.no_grad():
        expected_tokens, expected = generate(model, prompt, 20)
        kiln.reset()
        tokens, got = generate(kiln.compile(model, backend=backend), prompt, 20)
    assert torch.equal(tokens, expected_tokens)
    torch.testing.assert_close(got.logits, expected.logits)
    assert_cache_equal(expected.past_key_values, got.past_key_values)
    assert got.past_key_values.get_seq_length() == 6 + 20
    assert_no_breaks()
    assert kiln.counters["stats"]["unique_graphs"] <= 3
