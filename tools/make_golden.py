#!/usr/bin/env python3
"""Makes the transformers goldens under tests/golden/ (format: tests/golden/README.md).

For each tiny random-weight model below (float32, fixed seeds): saves the model with save_pretrained
(config.json, generation_config.json, model.safetensors) into OUT/<name>/, and records, for 3 random
prompts (lengths 1, 7, 33), the float32 logits of every prompt position and 20 greedy tokens (plus the
logits that chose each of them) from transformers' eager attention on the CPU, in OUT/<name>/golden.*.

With --stories-dir DIR (the output of tools/convert_llama2c.py on stories260K), also greedy-decodes 200
tokens from BOS with transformers and writes OUT/stories260K/golden.{json,safetensors} (no weights:
the C++ test converts ../shared/models/stories260K itself). With --stories-checkpoint it first checks
transformers against the numpy llama2.c reference (tools/llama2c_reference.py) on the original file.

The script checks itself and exits non-zero instead of writing doubtful goldens: rope frequencies
against an independent formula (llama3 scaling included), the saved model reloaded gives the same
logits, greedy tokens equal model.generate(), top-2 logit gaps at greedy steps > --min-gap, tensor
names/shapes in the saved file, file sizes.

Usage (needs torch + transformers; CPU is enough and is what it uses):
    python3 tools/make_golden.py --out tests/golden [--stories-dir DIR [--stories-checkpoint BIN]]
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import platform
import shutil
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file, save_file

TOOLS = pathlib.Path(__file__).resolve().parent
NUM_GREEDY = 20
PROMPT_LENGTHS = (1, 7, 33)
MAX_MODEL_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 6 * 1024 * 1024

# name -> (architecture, config class name, config kwargs, rope, init). rope: theta + optional scaling
# dict (transformers 4.x rope_scaling form). init: std of linear weights, std of the embedding.
COMMON = dict(max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
              pad_token_id=None, hidden_act="silu", attention_dropout=0.0, use_cache=True)
MODELS = {
    "llama_gqa": ("LlamaForCausalLM", "LlamaConfig",
                  dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=512, tie_word_embeddings=False),
                  dict(theta=500000.0, scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "mistral": ("MistralForCausalLM", "MistralConfig",
                dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=1, vocab_size=384, tie_word_embeddings=False, sliding_window=None,
                     head_dim=16),
                dict(theta=1000000.0, scaling=None)),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config",
              dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=448, tie_word_embeddings=False, use_sliding_window=False,
                   sliding_window=None, rms_norm_eps=1e-6),
              dict(theta=1000000.0, scaling=None)),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config",
              dict(hidden_size=64, intermediate_size=144, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, vocab_size=320, tie_word_embeddings=False,
                   use_sliding_window=False, sliding_window=None, rms_norm_eps=1e-6, attention_bias=False),
              dict(theta=1000000.0, scaling=None)),
    "llama_tied": ("LlamaForCausalLM", "LlamaConfig",
                   dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                        num_key_value_heads=4, vocab_size=256, tie_word_embeddings=True),
                   dict(theta=10000.0, scaling=None)),
}
LINEAR_STD, EMBED_STD, NORM_STD, BIAS_STD = 0.1, 0.1, 0.1, 0.2
# Tied models: a larger linear std so the layers, not the embedding row of the input token, pick the next
# token (otherwise greedy just repeats the last token).
LINEAR_STD_OVERRIDE = {"llama_tied": 0.25}


class GoldenError(RuntimeError):
    pass


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise GoldenError(msg)


# ----------------------------------------------------------------------------------------------------
# transformers 4.4x / 5.x compatibility


def _dtype_kwargs() -> dict:
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": torch.float32} if (major, minor) >= (4, 56) else {"torch_dtype": torch.float32}


def make_config(cls_name: str, kwargs: dict, rope: dict):
    cls = getattr(transformers, cls_name)
    kwargs = {**COMMON, **kwargs}
    if "rope_parameters" in cls().to_dict():  # transformers >= 5: theta and scaling live in rope_parameters
        params = {"rope_type": "default", "rope_theta": rope["theta"]}
        if rope["scaling"]:
            params.update(rope["scaling"])
        kwargs["rope_parameters"] = params
    else:
        kwargs["rope_theta"] = rope["theta"]
        kwargs["rope_scaling"] = dict(rope["scaling"]) if rope["scaling"] else None
    return cls(**kwargs)


def load_model(path: pathlib.Path):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager",
                                                              **_dtype_kwargs())
    return model.eval()


def from_config(config):
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager", **_dtype_kwargs())
    return model.eval()


# ----------------------------------------------------------------------------------------------------
# Independent rope reference (Meta's llama3 scaling; default rope)


def expected_inv_freq(head_dim: int, rope: dict) -> np.ndarray:
    inv = 1.0 / rope["theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    s = rope["scaling"]
    if not s:
        return inv
    check(s["rope_type"] == "llama3", f"no reference for rope_type {s['rope_type']}")
    factor, low, high, orig = (s["factor"], s["low_freq_factor"], s["high_freq_factor"],
                               s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    out = np.where(wavelen > orig / low, inv / factor, inv)
    smooth = (orig / wavelen - low) / (high - low)
    medium = (wavelen <= orig / low) & (wavelen >= orig / high)
    out = np.where(medium, (1 - smooth) * inv / factor + smooth * inv, out)
    # all three regimes must occur, or the golden does not test the scaling
    check(bool((wavelen > orig / low).any() and medium.any() and (wavelen < orig / high).any()),
          f"llama3 scaling: not all frequency regimes exercised (wavelengths {wavelen})")
    return out


def head_dim_of(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def check_rope(model, rope: dict, name: str) -> None:
    head_dim = head_dim_of(model.config)
    emb = model.model.rotary_emb
    got = emb.inv_freq.detach().double().cpu().numpy()
    want = expected_inv_freq(head_dim, rope)
    check(got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=0),
          f"{name}: transformers inv_freq {got} != expected {want}: rope config not taken into account")
    scaling = float(getattr(emb, "attention_scaling", 1.0))
    check(abs(scaling - 1.0) < 1e-12, f"{name}: unexpected rope attention_scaling {scaling}")


# ----------------------------------------------------------------------------------------------------
# Weights


def randomize(model, seed: int, linear_std: float) -> None:
    """Deterministic non-trivial weights: norms ~ 1 + 0.1 N(0,1), biases 0.2 N, embeddings 0.1 N,
    every other matrix linear_std N (so logits are far from flat)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + NORM_STD * noise)
            elif name.endswith(".bias"):
                p.copy_(BIAS_STD * noise)
            elif "embed_tokens" in name:
                p.copy_(EMBED_STD * noise)
            else:
                p.copy_(linear_std * noise)


def logits_of(model, ids: list[int]) -> np.ndarray:
    """ids: [T] -> float32 logits [T, vocab] (one forward, no cache)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float().cpu().numpy()


def top2_gap(row: np.ndarray) -> float:
    top = np.sort(row)[-2:]
    return float(top[1] - top[0])


def greedy(model, prompt: list[int], n: int) -> tuple[list[int], np.ndarray, float]:
    """Greedy decoding by full recompute. Returns (new ids [n], logits that chose them [n, vocab],
    the smallest top-2 gap among those steps)."""
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(np.argmax(logits_of(model, ids)[-1])))
    new = ids[len(prompt):]
    step_logits = logits_of(model, ids[:-1])[len(prompt) - 1:]  # row k chose new[k]
    check(step_logits.shape[0] == n and [int(np.argmax(r)) for r in step_logits] == new,
          "greedy: batched recompute disagrees with step-by-step recompute")
    return new, step_logits, min(top2_gap(r) for r in step_logits)


def hf_generate(model, prompt: list[int], n: int) -> list[int]:
    """model.generate() greedy with the KV cache, never stopping at EOS. EOS is removed from the model's
    own generation config for the call (generate() merges it into any config passed in, and
    min_new_tokens would instead mask EOS out of the argmax)."""
    saved = model.generation_config
    model.generation_config = transformers.GenerationConfig(
        do_sample=False, num_beams=1, max_new_tokens=n, eos_token_id=None, pad_token_id=0, bos_token_id=1)
    try:
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt], dtype=torch.long),
                                 attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    finally:
        model.generation_config = saved
    return out[0, len(prompt):].tolist()


# ----------------------------------------------------------------------------------------------------
# Random-weight models


def expected_tensors(cfg: dict, arch: str) -> dict[str, tuple[int, ...]]:
    d, hd = cfg["hidden_size"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    q, kv, ff, v = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["intermediate_size"], \
        cfg["vocab_size"]
    t = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,)}
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = (v, d)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                  p + "self_attn.q_proj.weight": (q, d), p + "self_attn.k_proj.weight": (kv, d),
                  p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, q),
                  p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d),
                  p + "mlp.down_proj.weight": (d, ff)})
        if arch == "Qwen2ForCausalLM":
            t.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                      p + "self_attn.v_proj.bias": (kv,)})
        if arch == "Qwen3ForCausalLM":
            t.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
    return t


def make_random_model(name: str, out: pathlib.Path, index: int, min_gap: float, max_tries: int) -> dict:
    arch, cls_name, cfg_kwargs, rope = MODELS[name]
    rng = np.random.default_rng(1000 + index)
    vocab = cfg_kwargs["vocab_size"]
    linear_std = LINEAR_STD_OVERRIDE.get(name, LINEAR_STD)
    prompts = [rng.integers(3, vocab, size=n).astype(np.int64).tolist() for n in PROMPT_LENGTHS]

    for attempt in range(max_tries):
        seed = 100 * index + attempt
        torch.manual_seed(seed)
        config = make_config(cls_name, cfg_kwargs, rope)
        model = from_config(config)
        check(type(model).__name__ == arch, f"{name}: built {type(model).__name__}, wanted {arch}")
        check(model.config._attn_implementation == "eager", f"{name}: attention is not eager")
        randomize(model, seed, linear_std)
        check_rope(model, rope, name)
        results = [greedy(model, p, NUM_GREEDY) for p in prompts]
        gap = min(r[2] for r in results)
        if gap > min_gap:
            break
        print(f"  {name}: seed {seed} has top-2 gap {gap:.2e} <= {min_gap:g}, trying the next seed")
    else:
        raise GoldenError(f"{name}: no seed in {max_tries} tries gives a top-2 gap > {min_gap}")

    mdir = out / name
    if mdir.exists():
        shutil.rmtree(mdir)
    model.save_pretrained(str(mdir), safe_serialization=True)

    # What is committed must be what made the goldens: reload and recompute from the saved files.
    saved = load_file(str(mdir / "model.safetensors"))
    saved_cfg = json.loads((mdir / "config.json").read_text())
    shapes = {k: tuple(v.shape) for k, v in saved.items()}
    want = expected_tensors({**COMMON, **cfg_kwargs}, arch)
    check(shapes == want, f"{name}: saved tensors differ from expected:\n  extra "
          f"{sorted(set(shapes.items()) - set(want.items()))}\n  missing {sorted(set(want.items()) - set(shapes.items()))}")
    check(all(v.dtype == np.float32 for v in saved.values()), f"{name}: saved tensors are not all float32")
    for k, v in saved.items():
        if k.endswith("norm.weight") or k.endswith(".bias"):
            check(float(np.abs(v - (1.0 if k.endswith("norm.weight") else 0.0)).max()) > 0.05,
                  f"{name}: {k} was not randomized")
    check(saved_cfg.get("architectures") == [arch], f"{name}: config.json architectures {saved_cfg.get('architectures')}")
    check((mdir / "model.safetensors").stat().st_size < MAX_MODEL_BYTES, f"{name}: model.safetensors over 2 MB")

    reloaded = load_model(mdir)
    check_rope(reloaded, rope, name + " (reloaded)")
    tensors, entries = {}, []
    for i, (prompt, (new, step_logits, gap_i)) in enumerate(zip(prompts, results)):
        logits = logits_of(reloaded, prompt)
        new2, step_logits2, _ = greedy(reloaded, prompt, NUM_GREEDY)
        check(new2 == new, f"{name}: prompt {i}: greedy tokens changed after save/reload")
        check(np.array_equal(logits, logits_of(model, prompt)) or
              np.abs(logits - logits_of(model, prompt)).max() < 1e-6, f"{name}: logits changed after save/reload")
        gen = hf_generate(reloaded, prompt, NUM_GREEDY)
        check(gen == new, f"{name}: prompt {i}: model.generate() {gen} != greedy recompute {new}")
        check(float(logits.std()) > 0.1, f"{name}: logits nearly flat (std {logits.std():.3g})")
        tensors[f"prompt_{i}"] = np.asarray(prompt, dtype=np.int32)
        tensors[f"logits_{i}"] = logits.astype(np.float32)
        tensors[f"greedy_{i}"] = np.asarray(new, dtype=np.int32)
        tensors[f"greedy_logits_{i}"] = step_logits2.astype(np.float32)
        entries.append({"prompt": prompt, "greedy": new, "min_top2_gap": gap_i,
                        "logits_abs_max": float(np.abs(logits).max())})
    save_file(tensors, str(mdir / "golden.safetensors"), metadata={"made_by": "tools/make_golden.py"})
    meta = {
        "name": name,
        "architecture": arch,
        "seed": seed,
        "init": {"linear_std": linear_std, "embed_std": EMBED_STD, "norm": f"1 + {NORM_STD} N(0,1)",
                 "bias_std": BIAS_STD},
        "rope": rope,
        "dtype": "float32",
        "attn_implementation": "eager",
        "device": "cpu",
        "num_greedy": NUM_GREEDY,
        "min_top2_gap": min(e["min_top2_gap"] for e in entries),
        "prompts": entries,
        "versions": versions(),
    }
    (mdir / "golden.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


# ----------------------------------------------------------------------------------------------------
# stories260K (a real trained model, converted by tools/convert_llama2c.py)


def make_stories_golden(stories_dir: pathlib.Path, checkpoint: pathlib.Path | None, out: pathlib.Path,
                        num_tokens: int) -> dict:
    from tokenizers import Tokenizer

    model = load_model(stories_dir)
    check(type(model).__name__ == "LlamaForCausalLM", f"stories260K: loaded {type(model).__name__}")
    tokenizer = Tokenizer.from_file(str(stories_dir / "tokenizer.json"))
    new, step_logits, gap = greedy(model, [1], num_tokens)
    gen = hf_generate(model, [1], num_tokens)
    check(gen == new, f"stories260K: model.generate() {gen} differs from greedy recompute {new}")
    first = logits_of(model, [1] + new[:7])  # [8, vocab]
    if checkpoint is not None:
        sys.path.insert(0, str(TOOLS))
        from llama2c_reference import Llama2cModel
        ref = Llama2cModel.load(checkpoint)
        err = float(np.abs(ref.forward([1] + new[:31]) - logits_of(model, [1] + new[:31])).max())
        check(err <= 1e-4, f"stories260K: transformers vs numpy llama2.c reference max abs error {err}")
        check(ref.greedy([1], num_tokens) == new, "stories260K: greedy tokens differ from the llama2.c reference")
        print(f"  stories260K: transformers == llama2.c reference (max abs logit error {err:.2e}, "
              f"{num_tokens} greedy tokens identical)")
    text = tokenizer.decode([1] + new, skip_special_tokens=True)
    check(text.startswith("Once upon a time"), f"stories260K: greedy text does not read as a story: {text[:80]!r}")
    sdir = out / "stories260K"
    sdir.mkdir(parents=True, exist_ok=True)
    save_file({"prompt": np.asarray([1], dtype=np.int32), "greedy": np.asarray(new, dtype=np.int32),
               "logits_first8": first.astype(np.float32)},
              str(sdir / "golden.safetensors"), metadata={"made_by": "tools/make_golden.py"})
    meta = {"name": "stories260K", "prompt": [1], "num_greedy": num_tokens, "greedy": new, "text": text,
            "min_top2_gap": gap, "logits_first8_positions": [1] + new[:7],
            "source": "../shared/models/stories260K/stories260K.bin + tok512.bin via tools/convert_llama2c.py",
            "dtype": "float32", "attn_implementation": "eager", "device": "cpu", "versions": versions()}
    (sdir / "golden.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    return meta


def versions() -> dict:
    import safetensors
    import tokenizers
    return {"transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "safetensors": safetensors.__version__, "tokenizers": tokenizers.__version__,
            "python": platform.python_version()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="make the transformers goldens under tests/golden")
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--stories-dir", type=pathlib.Path, help="converted stories260K HF directory")
    ap.add_argument("--stories-checkpoint", type=pathlib.Path, help="original stories260K.bin to cross-check")
    ap.add_argument("--stories-tokens", type=int, default=200)
    ap.add_argument("--min-gap", type=float, default=1e-3, help="smallest allowed top-2 logit gap at greedy steps")
    ap.add_argument("--max-tries", type=int, default=20, help="seeds to try per model")
    args = ap.parse_args(argv)

    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    print(f"make_golden: transformers {transformers.__version__}, torch {torch.__version__}, device cpu, float32")
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.models.split(",") if n]
    for n in names:
        check(n in MODELS, f"unknown model {n}")
    for n in names:
        meta = make_random_model(n, args.out, list(MODELS).index(n), args.min_gap, args.max_tries)
        size = sum(f.stat().st_size for f in (args.out / n).iterdir())
        print(f"  {n:11s} {meta['architecture']:18s} seed {meta['seed']:4d}  min top-2 gap "
              f"{meta['min_top2_gap']:.2e}  greedy[2] {meta['prompts'][2]['greedy'][:8]}...  {size / 1024:.0f} KiB")
    if args.stories_dir:
        meta = make_stories_golden(args.stories_dir, args.stories_checkpoint, args.out, args.stories_tokens)
        print(f"  stories260K: {len(meta['greedy'])} greedy tokens, min top-2 gap {meta['min_top2_gap']:.2e}\n"
              f"    {meta['text'][:200]!r}...")
        if meta["min_top2_gap"] <= args.min_gap:
            print(f"  WARNING: stories260K has a near-tie (top-2 gap {meta['min_top2_gap']:.2e}) on its greedy path")
    total = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    check(total < MAX_TOTAL_BYTES, f"{args.out} holds {total} bytes, over the {MAX_TOTAL_BYTES} budget")
    print(f"make_golden: wrote {args.out} ({total / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GoldenError as e:
        print(f"make_golden: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
