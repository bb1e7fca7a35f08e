#!/usr/bin/env python3
"""Writes a Llama-architecture Hugging Face directory with random weights (config.json + model.safetensors)
for benchmarks: the speed of a model does not depend on its weights, only on its shapes.

    python3 tools/make_random_model.py --out build/models/llama-100m --preset llama-100m

Presets give the shapes; every field can be overridden (--hidden-size, --layers, ...). Weights are drawn
from N(0, 0.02) with a fixed seed, norms are 1, and the dtype is bf16 (what real checkpoints ship) unless
--dtype says otherwise. Needs numpy and safetensors only.
"""
from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np
from safetensors.numpy import save_file

PRESETS = {
    # ~101M parameters, tied embeddings: a GPT-2-small-sized Llama.
    "llama-100m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                       num_key_value_heads=4, vocab_size=32000, tie_word_embeddings=True, max_position_embeddings=2048),
}


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (round to nearest even), as uint16."""
    u = x.astype(np.float32).view(np.uint32)
    rounded = u + 0x7FFF + ((u >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="llama-100m")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    for key in PRESETS["llama-100m"]:
        if key != "tie_word_embeddings":
            ap.add_argument("--" + key.replace("_", "-"), type=int)
    args = ap.parse_args()

    cfg = dict(PRESETS[args.preset])
    for key in cfg:
        value = getattr(args, key, None)
        if value is not None:
            cfg[key] = value
    H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    nh, nkv, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    D = H // nh
    rng = np.random.default_rng(args.seed)

    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    for i in range(L):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (nh * D, H), p + "self_attn.k_proj.weight": (nkv * D, H),
            p + "self_attn.v_proj.weight": (nkv * D, H), p + "self_attn.o_proj.weight": (H, nh * D),
            p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H), p + "mlp.down_proj.weight": (H, I),
        })
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, H)

    tensors, params = {}, 0
    for name, shape in shapes.items():
        w = np.ones(shape, np.float32) if name.endswith("norm.weight") else \
            rng.standard_normal(shape, dtype=np.float32) * 0.02
        params += w.size
        tensors[name] = bf16_bits(w) if args.dtype == "bf16" else w
    args.out.mkdir(parents=True, exist_ok=True)
    if args.dtype == "bf16":
        # safetensors.numpy has no bfloat16: write uint16 bit patterns, then relabel the dtype in the header.
        path = args.out / "model.safetensors"
        save_file(tensors, str(path))
        data = path.read_bytes()
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        for name, info in header.items():
            if name != "__metadata__":
                info["dtype"] = "BF16"
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        data = len(text).to_bytes(8, "little") + text + data[8 + n:]
        path.write_bytes(data)
    else:
        save_file(tensors, str(args.out / "model.safetensors"))

    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2,
              "torch_dtype": "bfloat16" if args.dtype == "bf16" else "float32", **cfg}
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {args.out}: {params / 1e6:.1f}M parameters, {args.dtype}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
