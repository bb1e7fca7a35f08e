"""Shared float64 numpy pieces of the Python references (tools/quantize_numpy_reference.py,
tests/python/test_eval_ppl.py), written from the published definitions and sharing nothing with xinfer:

  - a safetensors reader parsed by hand (header: u64 length + JSON; tensors little-endian, BF16 widened
    exactly), optionally refusing dtypes outside a given set with an error naming the tensor;
  - rope inverse frequencies of transformers' modeling_rope_utils (default and llama3);
  - the Llama forward of transformers' modeling_llama (RMSNorm, rotate-half rope, GQA, SwiGLU, tied or separate
    lm_head) in float64, with a hook for the linears (x -> y) so a caller can fake-quantize their inputs.
"""
import json
import math
import pathlib

import numpy as np

DTYPES = {"F32": "<f4", "F16": "<f2", "I8": "i1", "I32": "<i4", "I64": "<i8", "U8": "u1", "F8_E4M3": "u1"}
FLOAT_DTYPES = ("F32", "F16", "BF16")


def read_safetensors_raw(path: pathlib.Path, allowed=None) -> dict:
    """name -> (array in its stored dtype, BF16 as float32; dtype name). allowed: dtype names accepted (others
    raise ValueError naming the tensor), or None for every dtype this reader knows."""
    data = pathlib.Path(path).read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt = t["dtype"]
        if (allowed is not None and dt not in allowed) or (dt != "BF16" and dt not in DTYPES):
            raise ValueError(f"{name}: dtype {dt}")
        a, b = t["data_offsets"]
        buf = data[8 + n + a:8 + n + b]
        if dt == "BF16":
            x = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            x = np.frombuffer(buf, dtype=DTYPES[dt])
        out[name] = (x.reshape(t["shape"]), dt)
    return out


def read_float_safetensors(path: pathlib.Path) -> dict:
    """name -> float64 array; only F32 / F16 / BF16 tensors (anything else: ValueError naming it)."""
    return {k: v[0].astype(np.float64) for k, v in read_safetensors_raw(path, FLOAT_DTYPES).items()}


def inv_frequencies(config: dict, hd: int) -> np.ndarray:
    rope = config.get("rope_parameters") or dict(config.get("rope_scaling") or {}, rope_theta=config.get("rope_theta"))
    theta = rope.get("rope_theta") or 10000.0
    inv = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return inv
    assert kind == "llama3", kind
    factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    medium = (wavelen >= old / hi) & (wavelen <= old / lo)
    return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


def kv_rotation(d: int):
    """docs/kv_cache.md's key rotation of an FP8 KV cache as matrices: (H, s_k, s_q) with H Sylvester's Hadamard
    matrix H[a, b] = (-1)^popcount(a & b) on the flat index of each head value (value i < d/2 at 16 (i // 8) +
    i % 8, value i >= d/2 at 16 ((i - d/2) // 8) + 8 + i % 8), written as a [d, d] matrix on the values
    themselves; the cache holds k' = s_k H k and scores q' = s_q H q against it (s_k s_q d = 1, powers of two)."""
    half = d // 2
    flat = np.array([16 * (i // 8) + i % 8 if i < half else 16 * ((i - half) // 8) + 8 + i % 8 for i in range(d)])
    parity = np.vectorize(lambda b: bin(int(b)).count("1") % 2)(np.bitwise_and.outer(flat, flat))
    lg = int(math.log2(d))
    return np.where(parity, -1.0, 1.0), 2.0 ** -((lg + 1) // 2), 2.0 ** -(lg // 2)


def llama_forward(c: dict, w: dict, ids, lin=None, kv=None) -> np.ndarray:
    """ids [T] at positions 0..T-1 -> logits [T, V], float64. w: name -> float64 weights (HF names).
    lin(x, module) -> y replaces the linears (module e.g. "model.layers.0.self_attn.q_proj"); the default is
    x W^T (+ bias where the checkpoint has one). kv(k, v, layer) -> (k, v), when given, replaces what attention
    reads of the rotated k and of v ([T, kv_heads, head_dim] each; e.g. a fake-quantized KV cache)."""
    nh, nkv, eps = c["num_attention_heads"], c["num_key_value_heads"], c["rms_norm_eps"]
    hd = c.get("head_dim") or c["hidden_size"] // nh
    T = len(ids)
    inv = inv_frequencies(c, hd)
    if lin is None:
        def lin(x, module):
            y = x @ w[module + ".weight"].T
            return y + w[module + ".bias"] if module + ".bias" in w else y

    def rms(x, g):
        return g * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))

    def rot(x):
        return np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)

    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1))[:, None], np.sin(np.concatenate([ang, ang], -1))[:, None]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    x = w["model.embed_tokens.weight"][np.asarray(ids)]
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").reshape(T, nh, hd)
        k = lin(h, p + "self_attn.k_proj").reshape(T, nkv, hd)
        v = lin(h, p + "self_attn.v_proj").reshape(T, nkv, hd)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        if kv is not None:
            k, v = kv(k, v, layer)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + lin(np.einsum("hqk,khd->qhd", s, v).reshape(T, nh * hd), p + "self_attn.o_proj")
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = lin(h, p + "mlp.gate_proj")
        x = x + lin(g / (1 + np.exp(-g)) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T
