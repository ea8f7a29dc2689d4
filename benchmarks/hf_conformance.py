"""Hugging Face architectures compiled vs eager: every causal LM `transformers` ships (or masked
LM, seq2seq LM, image classifier), built small.

The models are transformers' code, not ours, and most were never run under kiln: the sweep builds
each architecture of a `transformers` model-mapping from its default config shrunk to a tiny size
(2 layers, hidden 64, random weights: nothing is downloaded), runs a forward pass eagerly and
compiled, then one backward pass each, and compares. A model whose eager run fails (a config the
shrinking broke, an architecture needing inputs other than token ids) is counted as not built,
never as a kiln failure.

    .venv/bin/python benchmarks/hf_conformance.py [--kind causal|masked|seq2seq|vision]
        [--models llama,gpt2] [--backend eager|aot_eager|kiln] [--torch] [--timeout 300]
        [--json PATH] [--jobs 1]

Each model runs in a worker process. Printed per model: whether the logits and the gradients of
every parameter equal eager's, kiln's graph breaks (and torch.compile's with `--torch`, same
backend name), kiln's internal errors and backend failures (both fall back to eager, so results
stay right, but each is a kiln bug), and the first differing reason. A wrong result is a kiln bug.
"""

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

KINDS = {
    "causal": ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM"),
    "masked": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM"),
    "seq2seq": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM"),
    "vision": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "AutoModelForImageClassification"),
}

# Config attributes set, where the default config has them, to make every architecture tiny.
SMALL = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 4,
    "n_inner": 128,
    "n_positions": 256,
    "d_model": 64,
    "d_ff": 128,
    "d_kv": 16,
    "num_layers": 2,
    "num_heads": 4,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "ffn_dim": 128,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "rotary_dim": 8,
}
# List-valued sizes of vision backbones (one entry per stage), made small stage by stage.
SMALL_STAGES = {
    "depths": lambda n: [1] * n,
    "hidden_sizes": lambda n: [16 * 2**i for i in range(n)],
    "num_heads": lambda n: [1] * n,
    "embed_dim": lambda n: [16 * 2**i for i in range(n)],
}
SMALL_VISION = {"embed_dim": 16, "embedding_size": 16, "image_size": 64, "hidden_size": 32}
DROPOUT_WORDS = ("dropout", "drop_rate", "dropout_rate", "drop_path_rate")
BATCH, SEQ = 2, 12
MAX_PARAMETERS = 50_000_000
SMALL_VOCAB = 1024

WORKER = r"""
import copy, json, sys, traceback
import torch
sys.path.insert(0, sys.argv[6])
from hf_conformance import build, compare, counted_breaks

kind, model_type, backend, with_torch, seed = sys.argv[1:6]
out = {"model": model_type}
try:
    eager_model, inputs = build(kind, model_type, int(seed))
except Exception as e:
    out["built"] = False
    out["why"] = f"{type(e).__name__}: {str(e)[:300]}"
    print(json.dumps(out)); sys.exit(0)
out["built"] = True
print("BUILT", flush=True)

def run(model, fn):
    model.zero_grad(set_to_none=True)
    logits = fn(**inputs).logits
    logits.float().pow(2).mean().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads

copies = [copy.deepcopy(eager_model) for _ in range(2)]  # before a run leaves state in it
ref = run(eager_model, eager_model)

def compiled_run(compile_fn):
    model = copies.pop()
    got = run(model, compile_fn(model))
    return compare(ref, got)

import kiln
kiln.config.warn_graph_breaks = False
try:
    out["kiln"] = compiled_run(lambda m: kiln.compile(m, backend=backend))
except Exception as e:
    out["kiln"] = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:500]}",
                   "where": traceback.format_exc().splitlines()[-3][:300]}
out["kiln"].update(counted_breaks())
if with_torch == "1":
    import torch._dynamo
    from torch._dynamo.utils import counters
    counters.clear()
    try:
        out["torch"] = compiled_run(lambda m: torch.compile(m, backend=backend))
    except Exception as e:
        out["torch"] = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    out["torch"]["breaks"] = sum(counters["graph_break"].values())
    out["torch"]["graphs"] = counters["stats"]["unique_graphs"]
print(json.dumps(out))
"""


def small_config(kind, model_type):
    """The default config of `model_type` with every size in SMALL it has, and no dropout (in its
    sub-configs too: a multimodal model's text_config, vision_config ...)."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **_shrunk(AutoConfig.for_model(model_type).to_dict()))


def _shrunk(have):
    """The overrides that make the config dict `have` tiny."""
    overrides = {k: v for k, v in SMALL.items() if k in have and not isinstance(have[k], list)}
    for key, small in SMALL_STAGES.items():
        if isinstance(have.get(key), list) and have[key]:
            overrides[key] = small(len(have[key]))
    if "num_channels" in have or "image_size" in have:  # (a vision config)
        overrides.update({k: v for k, v in SMALL_VISION.items() if type(have.get(k)) is int})
    for key, value in have.items():
        if any(w in key for w in DROPOUT_WORDS) and isinstance(value, float):
            overrides[key] = 0.0
        elif key.endswith("_config") and isinstance(value, dict):
            overrides[key] = {**value, **_shrunk(value)}
    if "kv_lora_rank" in have and "num_attention_heads" in overrides:  # (multi-head latent
        overrides["num_key_value_heads"] = overrides["num_attention_heads"]  # attention: no GQA)
    layers = overrides.get("num_hidden_layers", overrides.get("num_layers"))
    for key in ("layer_types", "block_types", "layers_block_type"):
        if layers and isinstance(have.get(key), list) and len(have[key]) > layers:
            overrides[key] = have[key][:layers]
    ids = [
        v for k, v in have.items() if ("token_id" in k or "token_index" in k) and isinstance(v, int)
    ]
    if all(i < SMALL_VOCAB for i in ids):  # (token ids past it would index out of the embedding)
        for key in ("vocab_size", "vocab_size_per_layer_input"):
            if isinstance(have.get(key), int) and have[key] > SMALL_VOCAB:
                overrides[key] = SMALL_VOCAB
    per_layer = have.get("per_layer_config")
    if layers and isinstance(per_layer, dict):  # {layer index: overrides}
        overrides["per_layer_config"] = {k: v for k, v in per_layer.items() if int(k) < layers}
    return overrides


def build(kind, model_type, seed):
    """The tiny model of `model_type` (eval mode, float32) and its inputs."""
    import torch
    import transformers
    from transformers.utils import logging

    logging.set_verbosity_error()
    config = small_config(kind, model_type)
    torch.manual_seed(seed)
    with torch.device("meta"):  # sized before any memory is taken: a config left big is refused
        size = sum(
            p.numel()
            for p in getattr(transformers, KINDS[kind][1]).from_config(config).parameters()
        )
    if size > MAX_PARAMETERS:
        raise ValueError(f"{size / 1e6:.0f}M parameters after shrinking the config")
    model = getattr(transformers, KINDS[kind][1]).from_config(config).float().eval()
    if kind == "vision":
        inputs = {"pixel_values": _pixels(config)}
        with torch.no_grad():
            if not hasattr(model(**inputs), "logits"):  # (raises for one it cannot build)
                raise ValueError("the model gives no logits")
        return model, inputs
    vocab = getattr(config, "vocab_size", None) or 100
    ids = torch.randint(3, max(4, min(vocab, 200)), (BATCH, SEQ))
    inputs = {"input_ids": ids, "use_cache": False}
    if "attention_mask" in inspect.signature(model.forward).parameters:
        inputs["attention_mask"] = torch.ones_like(ids)  # (as a tokenizer gives it)
    if kind == "seq2seq":
        inputs["decoder_input_ids"] = ids[:, : SEQ // 2]
    with torch.no_grad():
        model(**inputs)  # raises for an architecture this sweep cannot build
    return model, inputs


def _pixels(config):
    """Random images of the size and channels a vision config takes."""
    import torch

    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", 64)
    h, w = (size, size) if isinstance(size, int) else tuple(size)[-2:]
    return torch.randn(BATCH, getattr(vision, "num_channels", 3), h, w)


def compare(ref, got):
    """Logits and gradients of `got` against eager's `ref`: the largest differences."""
    import torch

    (ref_logits, ref_grads), (logits, grads) = ref, got
    result = {"ok": True, "logits_diff": _diff(ref_logits, logits)}
    if set(ref_grads) != set(grads):
        result.update(ok=False, error=f"gradients of {sorted(set(ref_grads) ^ set(grads))[:3]}")
        return result
    worst = max(((_diff(ref_grads[n], grads[n]), n) for n in ref_grads), default=(0.0, None))
    result["grad_diff"], result["worst_grad"] = worst
    tol = 1e-3
    if result["logits_diff"] > tol or worst[0] > tol or not torch.isfinite(logits).all():
        result.update(ok=False, error="values differ from eager")
    return result


def _diff(a, b):
    """The largest absolute difference, relative to the reference's scale (inf on a shape change)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return float("inf")
    scale = max(1.0, a.abs().max().item())
    return (a.double() - b.double()).abs().max().item() / scale


def counted_breaks():
    """kiln's graph breaks, internal errors and backend failures counted so far in this process."""
    from kiln.logs import counters

    reasons = counters["graph_break"]
    return {
        "breaks": sum(reasons.values()),
        "graphs": counters["stats"]["unique_graphs"],
        "reasons": sorted(reasons, key=reasons.get, reverse=True)[:3],
        "internal_errors": counters["frames"]["internal_errors"],
        "backend_failures": counters["stats"]["backend_failures"],
    }


def run_model(kind, model_type, args):
    """One model in a worker process; its result dict."""
    cmd = [sys.executable, "-c", WORKER, kind, model_type, args.backend, "1" if args.torch else "0"]
    cmd += ["0", HERE]
    env = dict(os.environ, PYTHONPATH=ROOT)
    start = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"model": model_type, "built": True, "kiln": {"ok": False, "error": "timeout"}}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        why = tail or f"the worker died (exit code {proc.returncode})"
        if "BUILT" not in proc.stdout:  # it died building the eager model
            return {"model": model_type, "built": False, "why": why}
        return {"model": model_type, "built": True, "kiln": {"ok": False, "error": why}}
    result = json.loads(lines[-1])
    result["seconds"] = round(time.time() - start, 1)
    return result


def models_of(kind):
    """The model types of one of transformers' auto-model mappings."""
    from transformers.models.auto import modeling_auto

    return list(getattr(modeling_auto, KINDS[kind][0]))


def report(results):
    """Print one line per model and the totals."""
    built = [r for r in results if r.get("built")]
    good = [r for r in built if r["kiln"].get("ok")]
    for r in results:
        if not r.get("built"):
            print(f"{r['model']:<28} not built: {r.get('why', '')[:90]}")
            continue
        k = r["kiln"]
        status = "ok  " if k.get("ok") else "FAIL"
        line = f"{r['model']:<28} {status} breaks {k.get('breaks', '?'):>3} graphs {k.get('graphs', '?'):>3}"
        if "torch" in r:
            t = r["torch"]
            line += f" (torch {t.get('breaks', '?'):>3} {t.get('graphs', '?'):>3}"
            line += f"{'' if t.get('ok') else ' FAIL'})"
        if k.get("internal_errors") or k.get("backend_failures"):
            line += f" internal {k.get('internal_errors')} backend {k.get('backend_failures')}"
        line += f" {r.get('seconds', '')}s"
        if not k.get("ok"):
            line += f"  {k.get('error', '')[:120]}"
        elif k.get("reasons"):
            line += f"  first break: {k['reasons'][0][:100]}"
        print(line)
    clean = [r for r in good if not r["kiln"].get("internal_errors")]
    print(
        f"\n{len(results)} architectures, {len(built)} built; kiln equals eager on {len(good)} "
        f"({len(clean)} with no internal error); no break on "
        f"{sum(1 for r in good if not r['kiln'].get('breaks'))}"
    )
    if any("torch" in r for r in built):
        both = [r for r in built if r.get("torch", {}).get("ok")]
        print(
            f"torch.compile equals eager on {len(both)}; no break on "
            f"{sum(1 for r in both if not r['torch'].get('breaks'))}"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kind", default="causal", choices=sorted(KINDS))
    ap.add_argument("--models", default="", help="comma-separated model types (default: all)")
    ap.add_argument("--backend", default="eager")
    ap.add_argument("--torch", action="store_true", help="also torch.compile, same backend")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    names = [m for m in args.models.split(",") if m] or models_of(args.kind)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = []
        for r in pool.map(lambda m: run_model(args.kind, m, args), names):
            results.append(r)
            print(
                f"  {r['model']}: {'built' if r.get('built') else 'not built'}"
                f" {r.get('kiln', {}).get('ok', '')}",
                flush=True,
            )
    report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
