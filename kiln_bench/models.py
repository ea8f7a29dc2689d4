"""The benchmark model suite: builders of small models with fixed seeds and no downloads.

A builder is `builder(device, dtype, batch=None) -> (model, example_inputs, loss_fn)`:
`model(*example_inputs)` returns one tensor and `loss_fn(output)` a scalar loss for a training
step. Every builder seeds torch itself, so two calls give identical weights and inputs. Models carry
no dropout (set to 0), so eager and compiled training steps are comparable bit for bit in intent.

Hugging Face architectures are built from small configs with random weights when `transformers`
is importable; their entries are registered anyway and report "unavailable" when it is not.
"""

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 0


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One entry of the suite."""

    name: str
    builder: object  # (device, dtype, batch=None) -> (model, example_inputs, loss_fn)
    tags: tuple  # "builtin" | "hf", "quick", "conv", "transformer", "pointwise", ...
    about: str  # one line for `kiln bench --list`
    modes: tuple = ("inference", "training")  # the modes it is measured in

    def build(self, device="cpu", dtype=torch.float32, batch=None):
        """Build the model (in train mode) and its inputs on a device in a dtype."""
        torch.manual_seed(SEED)
        model, inputs, loss_fn = self.builder(torch.device(device), dtype, batch)
        return model, inputs, loss_fn


REGISTRY: dict[str, ModelSpec] = {}
# `kiln bench --quick` (and `make demo`): small enough to compile in a few minutes on 2 cores;
# the first one is the model whose graph and guards the demo prints.
QUICK = ("pointwise", "mlp", "nanogpt")


def register(name, tags, about, modes=("inference", "training")):
    """Decorator adding a builder to the registry."""

    def wrap(builder):
        REGISTRY[name] = ModelSpec(name, builder, tuple(tags), about, tuple(modes))
        return builder

    return wrap


def compile_model(compile_fn, model):
    """What a compiler runs: `compile_fn(model)`, or, for a model that compiles only its parts
    (a generation loop compiles its language model, the loop stays Python as users write it),
    the model after `model.compile_parts(compile_fn)`."""
    parts = getattr(model, "compile_parts", None)
    if parts is None:
        return compile_fn(model)
    parts(compile_fn)
    return model


def _ce_loss(num_classes, shape, device):
    """A cross-entropy loss against fixed random targets of a given shape."""
    gen = torch.Generator().manual_seed(SEED + 1)
    target = torch.randint(0, num_classes, shape, generator=gen).to(device)

    def loss_fn(logits):
        return F.cross_entropy(logits.reshape(-1, num_classes).float(), target.reshape(-1))

    return loss_fn


def _place(model, inputs, device, dtype):
    """Move a model and its floating-point inputs to the device and dtype; train mode."""
    model = model.to(device=device, dtype=dtype).train()
    placed = []
    for t in inputs:
        t = t.to(device)
        placed.append(t.to(dtype) if t.is_floating_point() else t)
    return model, placed


# --- built-in models -----------------------------------------------------------------------------


class MLP(nn.Module):
    """Four Linear layers with GELU and LayerNorm."""

    def __init__(self, d_in=256, hidden=512, d_out=10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc3 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x):
        x = F.gelu(self.fc1(x))
        x = self.norm(F.gelu(self.fc2(x)))
        x = x + F.gelu(self.fc3(x))
        return self.head(x)


@register("mlp", ("builtin", "quick", "dense"), "4-layer MLP, GELU + LayerNorm, 256->512->10")
def build_mlp(device, dtype, batch=None):
    batch = batch or 64
    model = MLP()
    x = torch.randn(batch, 256)
    model, inputs = _place(model, [x], device, dtype)
    return model, inputs, _ce_loss(10, (batch,), device)


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convs with BatchNorm, projection shortcut when needed."""

    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.short = None
        if stride != 1 or c_in != c_out:
            self.short = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.short is None else self.short(x)))


class ResNet(nn.Module):
    """A small ResNet for 32x32 images: stem, three stages of basic blocks, pool, classifier."""

    def __init__(self, widths=(16, 32, 64), num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(16))
        blocks, c_in = [], widths[0]
        for i, w in enumerate(widths):
            blocks += [BasicBlock(c_in, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
            c_in = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


@register("resnet", ("builtin", "conv"), "ResNet-style conv net with BatchNorm, 6 blocks, 32x32")
def build_resnet(device, dtype, batch=None):
    batch = batch or 8
    model = ResNet()
    x = torch.randn(batch, 3, 32, 32)
    model, inputs = _place(model, [x], device, dtype)
    return model, inputs, _ce_loss(10, (batch,), device)


class CausalSelfAttention(nn.Module):
    """nanoGPT attention written out: masked softmax over q @ k^T (no SDPA)."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        mask = torch.tril(torch.ones(block_size, block_size))
        self.register_buffer("bias", mask.view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class GPTBlock(nn.Module):
    """Pre-norm transformer block: attention and a 4x GELU MLP, both residual."""

    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class NanoGPT(nn.Module):
    """A nanoGPT-style decoder: token + position embeddings, blocks, tied LM head."""

    def __init__(self, vocab=512, block_size=64, n_layer=2, n_head=4, n_embd=128):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(GPTBlock(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():  # GPT-2 init: small weights, zero biases
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


@register("nanogpt", ("builtin", "quick", "transformer"), "nanoGPT decoder, 2 layers, d=128, T=64")
def build_nanogpt(device, dtype, batch=None):
    batch = batch or 4
    model = NanoGPT()
    idx = torch.randint(0, 512, (batch, 64))
    model, inputs = _place(model, [idx], device, dtype)
    return model, inputs, _ce_loss(512, (batch, 64), device)


class AttentionBlock(nn.Module):
    """One transformer encoder block on F.scaled_dot_product_attention."""

    def __init__(self, d=128, n_head=4):
        super().__init__()
        self.n_head = n_head
        self.norm1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 2 * d)
        self.ff2 = nn.Linear(2 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(self.norm1(x)).view(B, T, 3, self.n_head, C // self.n_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out(y.transpose(1, 2).reshape(B, T, C))
        return x + self.ff2(F.silu(self.ff1(self.norm2(x))))


@register("attention", ("builtin", "transformer"), "transformer block on SDPA, d=128, T=128")
def build_attention(device, dtype, batch=None):
    batch = batch or 4
    model = AttentionBlock()
    x = torch.randn(batch, 128, 128)
    model, inputs = _place(model, [x], device, dtype)
    return model, inputs, lambda out: out.float().pow(2).mean()


class PointwiseToy(nn.Module):
    """A long chain of elementwise ops and one row reduction: what fusion is for."""

    def __init__(self, width=1024):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, width))
        self.shift = nn.Parameter(torch.linspace(-0.1, 0.1, width))

    def forward(self, x):
        y = torch.sin(x) * self.scale + self.shift
        y = torch.tanh(y) + torch.cos(y * 0.5)
        y = torch.sigmoid(y * 2.0 - 1.0) * y
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        return torch.exp(-y.abs()) + F.silu(y)


@register("pointwise", ("builtin", "quick", "pointwise"), "chain of 15 elementwise ops + RMS norm")
def build_pointwise(device, dtype, batch=None):
    batch = batch or 256
    model = PointwiseToy()
    x = torch.randn(batch, 1024)
    model, inputs = _place(model, [x], device, dtype)
    return model, inputs, lambda out: out.float().pow(2).mean()


# --- Hugging Face architectures (random weights, small configs) ---------------------------------


def transformers_available():
    """Whether `transformers` imports; the reason when it does not."""
    try:
        import transformers  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        return False, f"transformers not importable: {type(e).__name__}: {e}"
    return True, ""


class HFWrapper(nn.Module):
    """Calls a Hugging Face model with named tensor inputs and returns its first output tensor."""

    def __init__(self, model, input_names):
        super().__init__()
        self.model = model
        self.input_names = tuple(input_names)

    def forward(self, *inputs):
        out = self.model(**dict(zip(self.input_names, inputs)), use_cache=False)
        return out.logits


_VOCAB = 1000
_SMALL = dict(hidden=128, layers=2, heads=4, ffn=256)


def _quiet_transformers():
    """Silence transformers' config warnings (random small configs trip some)."""
    from transformers.utils import logging

    logging.set_verbosity_error()


def _hf_lm(model, names, inputs, device, dtype, vocab=_VOCAB):
    model, placed = _place(HFWrapper(model, names), inputs, device, dtype)
    return model, placed, _ce_loss(vocab, tuple(inputs[0].shape), device)


@register("hf_gpt2", ("hf", "transformer"), "HF GPT-2 LM, 2 layers, d=128, T=64")
def build_hf_gpt2(device, dtype, batch=None):
    _quiet_transformers()
    from transformers import GPT2Config, GPT2LMHeadModel

    batch = batch or 4
    cfg = GPT2Config(
        vocab_size=_VOCAB,
        n_positions=128,
        n_embd=_SMALL["hidden"],
        n_layer=_SMALL["layers"],
        n_head=_SMALL["heads"],
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    ids = torch.randint(0, _VOCAB, (batch, 64))
    return _hf_lm(GPT2LMHeadModel(cfg), ["input_ids"], [ids], device, dtype)


@register("hf_bert", ("hf", "transformer"), "HF BERT masked LM, 2 layers, d=128, T=64")
def build_hf_bert(device, dtype, batch=None):
    _quiet_transformers()
    from transformers import BertConfig, BertForMaskedLM

    batch = batch or 4
    cfg = BertConfig(
        vocab_size=_VOCAB,
        hidden_size=_SMALL["hidden"],
        num_hidden_layers=_SMALL["layers"],
        num_attention_heads=_SMALL["heads"],
        intermediate_size=_SMALL["ffn"],
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    ids = torch.randint(0, _VOCAB, (batch, 64))
    mask = torch.ones(batch, 64, dtype=torch.long)
    return _hf_lm(BertForMaskedLM(cfg), ["input_ids", "attention_mask"], [ids, mask], device, dtype)


def _llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=_VOCAB,
        hidden_size=_SMALL["hidden"],
        intermediate_size=_SMALL["ffn"],
        num_hidden_layers=_SMALL["layers"],
        num_attention_heads=_SMALL["heads"],
        num_key_value_heads=2,
        max_position_embeddings=256,
        attention_dropout=0.0,
    )


@register("hf_llama", ("hf", "transformer"), "HF LLaMA causal LM, 2 layers, d=128, GQA 4/2, T=64")
def build_hf_llama(device, dtype, batch=None):
    _quiet_transformers()
    from transformers import LlamaForCausalLM

    batch = batch or 4
    ids = torch.randint(0, _VOCAB, (batch, 64))
    return _hf_lm(LlamaForCausalLM(_llama_config()), ["input_ids"], [ids], device, dtype)


@register("hf_t5", ("hf", "transformer"), "HF T5 encoder-decoder, 2+2 layers, d=128, T=32")
def build_hf_t5(device, dtype, batch=None):
    _quiet_transformers()
    from transformers import T5Config, T5ForConditionalGeneration

    batch = batch or 4
    cfg = T5Config(
        vocab_size=_VOCAB,
        d_model=_SMALL["hidden"],
        d_kv=_SMALL["hidden"] // _SMALL["heads"],
        d_ff=_SMALL["ffn"],
        num_layers=_SMALL["layers"],
        num_decoder_layers=_SMALL["layers"],
        num_heads=_SMALL["heads"],
        dropout_rate=0.0,
        decoder_start_token_id=0,
    )
    ids = torch.randint(0, _VOCAB, (batch, 32))
    dec = torch.randint(0, _VOCAB, (batch, 32))
    model = T5ForConditionalGeneration(cfg)
    return _hf_lm(model, ["input_ids", "decoder_input_ids"], [ids, dec], device, dtype)


@register("hf_vit", ("hf", "transformer", "vision"), "HF ViT classifier, 2 layers, d=128, 32x32/8")
def build_hf_vit(device, dtype, batch=None):
    _quiet_transformers()
    from transformers import ViTConfig, ViTForImageClassification

    batch = batch or 8
    cfg = ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=_SMALL["hidden"],
        num_hidden_layers=_SMALL["layers"],
        num_attention_heads=_SMALL["heads"],
        intermediate_size=_SMALL["ffn"],
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=10,
    )
    pixels = torch.randn(batch, 3, 32, 32)
    model, placed = _place(
        HFWrapper(ViTForImageClassification(cfg), ["pixel_values"]), [pixels], device, dtype
    )
    return model, placed, _ce_loss(10, (batch,), device)


class HFDefaultCache(nn.Module):
    """A causal LM called as users call it: `model(input_ids)`, `use_cache` left at its default
    (the model makes a DynamicCache inside forward and returns it); the logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids).logits


@register(
    "hf_llama_cache",
    ("hf", "transformer", "decoder"),
    "HF LLaMA causal LM with its default KV cache (made in forward), T=64",
)
def build_hf_llama_cache(device, dtype, batch=None):
    _quiet_transformers()
    from transformers import LlamaForCausalLM

    batch = batch or 4
    ids = torch.randint(0, _VOCAB, (batch, 64))
    model, placed = _place(HFDefaultCache(LlamaForCausalLM(_llama_config())), [ids], device, dtype)
    return model, placed, _ce_loss(_VOCAB, tuple(ids.shape), device)


class HFGenerate(nn.Module):
    """Greedy generation as users write it: a prefill, then `steps` decode steps feeding back
    `out.past_key_values` (a growing DynamicCache). Only the language model is compiled
    (compile_parts); the loop is Python. Returns the logits of every generated position."""

    def __init__(self, model, steps):
        super().__init__()
        self.model = model
        self.steps = steps
        self.__dict__["step"] = model  # the (compiled) model the loop calls; not a submodule

    def compile_parts(self, compile_fn):
        self.__dict__["step"] = compile_fn(self.model)

    def forward(self, prompt):
        from transformers import DynamicCache

        step = self.__dict__["step"]
        out = step(prompt, past_key_values=DynamicCache(config=self.model.config), use_cache=True)
        logits = [out.logits[:, -1:]]
        for _ in range(self.steps):
            nxt = logits[-1].argmax(-1)
            out = step(nxt, past_key_values=out.past_key_values, use_cache=True)
            logits.append(out.logits)
        return torch.cat(logits, 1)


@register(
    "hf_llama_generate",
    ("hf", "transformer", "decoder"),
    "HF LLaMA greedy generation: prefill T=32, then 16 decode steps with a growing cache",
    modes=("inference",),
)
def build_hf_llama_generate(device, dtype, batch=None):
    _quiet_transformers()
    from transformers import LlamaForCausalLM

    batch = batch or 4
    ids = torch.randint(0, _VOCAB, (batch, 32))
    model = HFGenerate(LlamaForCausalLM(_llama_config()), steps=16)
    model, placed = _place(model, [ids], device, dtype)
    return model, placed, _ce_loss(_VOCAB, (batch, 17), device)


def select(names=None, tags=None):
    """Registry entries by comma-separated names (or "all") and/or required tags, in order."""
    if names in (None, "", "all"):
        specs = list(REGISTRY.values())
    else:
        wanted = (
            [n.strip() for n in names.split(",") if n.strip()] if isinstance(names, str) else names
        )
        unknown = [n for n in wanted if n not in REGISTRY]
        if unknown:
            raise ValueError(f"unknown model(s) {unknown}; known: {', '.join(REGISTRY)}")
        specs = [REGISTRY[n] for n in wanted]
    for tag in tags or ():
        specs = [s for s in specs if tag in s.tags]
    return specs
