#!/usr/bin/env python3
"""Makes tiny quantized Hugging Face checkpoints and their references under tests/golden/checkpoints/.

One random float base model (LlamaForCausalLM: 2 layers, hidden 64, intermediate 128, 4 heads / 2 KV heads,
head_dim 16, vocab 128, untied lm_head; dense tensors float16) is quantized into each checkpoint format that
xinfer loads (the list is CHECKPOINTS below). Each OUT/<name>/ holds:
  config.json          the base config plus `quantization_config` as the format's own tools write it
  model.safetensors    the checkpoint tensors (names, dtypes and packing of that format)
  golden.safetensors   `ref.<linear prefix>.weight` F32 [N, K]: the dequantized weights of layer 0's k, v and
                       down projections; `prompt` I32 [8]; and, from the GPU run only,
                       `logits` F32 [8, vocab]: transformers' LlamaForCausalLM (float32, eager, CPU) on the
                       dequantized weights of every linear. For W8A8 checkpoints the linears' inputs are
                       fake-quantized in forward pre-hooks as vLLM's kernels do (int8: dynamic scale
                       max|x_t|/127 per token or the static input_scale, round half to even, clamp +-127;
                       fp8: x / scale cast to torch.float8_e4m3fn), so `logits` is the reference of the
                       W8A8 kernels; `logits_float` is the same model without activation quantization.
  golden.json          what made it (packer, versions) and max |logits| for tolerances

Who packs what (the point: the references are not ours):
  compressed-tensors (ct_*): with torch available (--torch, the GPU machine), the package's own compressors
      (PackedQuantizationCompressor, IntQuantizationCompressor, FloatQuantizationCompressor .compress() on
      each linear's state dict, QuantizationScheme / QuantizationArgs / QuantizationConfig for the config)
      write the tensors, and the package's .decompress() (scales cast to f32, so the products are exact)
      gives the `ref.*` weights. The numpy packer below (from the format definition: pack_to_int32's
      dense little-endian bit packing with the 2^(bits-1) offset, zero points packed along dim 0) runs
      everywhere and must agree bit for bit with the package; the script exits non-zero otherwise.
  GPTQ (gptq_*), AWQ (awq_*): no packer is installable on the GPU machine (no auto-gptq / autoawq /
      gptqmodel; transformers 5.17's GPTQ and AWQ integrations need those packages to dequantize), so numpy
      packers written from the published definitions: GPTQ (AutoGPTQ's pack: qweight int32 [K*bits/32, N]
      packed along K, qzeros int32 [G, N*bits/32] packed along N holding zero - 1 in checkpoint_format
      "gptq" (v1) and the zero itself in "gptq_v2", scales f16 [G, N], g_idx i32 [K]); AWQ GEMM (qweight
      int32 [K, N/8] packed along N with the nibble order [0, 2, 4, 6, 1, 3, 5, 7], qzeros likewise
      [K/G, N/8], scales f16 [K/G, N]). Their `ref.*` weights are scale * (q - zero) in float64 rounded to
      f32 from the integer codes before packing (not from unpacking the files).

Usage:
    python3 tools/make_checkpoint_golden.py --out tests/golden/checkpoints            # numpy only (no logits)
    python3 tools/make_checkpoint_golden.py --out DIR --torch                          # + ct package, logits
The output is deterministic (fixed seeds).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys

import numpy as np

SEED = 14
HIDDEN, INTER, LAYERS, HEADS, KV_HEADS, VOCAB = 64, 128, 2, 4, 2, 128
HEAD_DIM = HIDDEN // HEADS
PROMPT = np.array([1, 17, 93, 5, 64, 120, 33, 7], dtype=np.int32)
# (module path under model.layers.L, N, K)
LINEARS = [("self_attn.q_proj", HEADS * HEAD_DIM, HIDDEN), ("self_attn.k_proj", KV_HEADS * HEAD_DIM, HIDDEN),
           ("self_attn.v_proj", KV_HEADS * HEAD_DIM, HIDDEN), ("self_attn.o_proj", HIDDEN, HEADS * HEAD_DIM),
           ("mlp.gate_proj", INTER, HIDDEN), ("mlp.up_proj", INTER, HIDDEN), ("mlp.down_proj", HIDDEN, INTER)]
REF_LINEARS = ["model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj", "model.layers.0.mlp.down_proj"]
MAX_TOTAL_BYTES = 1_300_000

# ---- the base model -------------------------------------------------------------------------------------


def base_model() -> dict[str, np.ndarray]:
    """Float weights (f32 arrays holding f16-representable values), HF names."""
    rng = np.random.default_rng(SEED)
    w: dict[str, np.ndarray] = {}

    def f16(a):
        return a.astype(np.float16).astype(np.float32)

    w["model.embed_tokens.weight"] = f16(rng.normal(0, 0.5, (VOCAB, HIDDEN)))
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = f16(1 + 0.1 * rng.normal(size=HIDDEN))
        w[p + "post_attention_layernorm.weight"] = f16(1 + 0.1 * rng.normal(size=HIDDEN))
        for name, n, k in LINEARS:
            # a few larger columns and rows so that scales differ visibly between groups and channels
            a = rng.normal(0, 0.15, (n, k)) * (1 + 2 * (rng.random((1, k)) < 0.1)) * (1 + rng.random((n, 1)))
            w[p + name + ".weight"] = f16(a)
    w["model.norm.weight"] = f16(1 + 0.1 * rng.normal(size=HIDDEN))
    w["lm_head.weight"] = f16(rng.normal(0, 0.3, (VOCAB, HIDDEN)))
    return w


def hf_config() -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTER, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "vocab_size": VOCAB,
        "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "torch_dtype": "float16",
        "bos_token_id": 1, "eos_token_id": 2,
    }


def linear_prefixes():
    for layer in range(LAYERS):
        for name, n, k in LINEARS:
            yield f"model.layers.{layer}.{name}", n, k


# ---- integer quantization helpers (min-max, as the packages' default observers) ----------------------------


def minmax_params(w_groups: np.ndarray, bits: int, symmetric: bool, fp16_scales: bool = True):
    """w_groups [..., group]: scale and (asymmetric) zero per group, both as the checkpoint stores them."""
    lo = np.minimum(w_groups.min(-1), 0.0)
    hi = np.maximum(w_groups.max(-1), 0.0)
    if symmetric:
        s = np.maximum(np.abs(lo), np.abs(hi)) / ((2 ** bits - 1) / 2)
        z = None
    else:
        s = (hi - lo) / (2 ** bits - 1)
    s = np.where(s == 0, 1.0, s)
    if fp16_scales:
        s = s.astype(np.float16).astype(np.float32)
    if not symmetric:
        z = np.clip(np.round(-lo / s), 0, 2 ** bits - 1).astype(np.int64)  # unsigned zero in [0, 2^bits)
    return s.astype(np.float32), z


def pack_bits_rows(u: np.ndarray, bits: int) -> np.ndarray:
    """u [rows, cols] unsigned codes -> int32 [rows, ceil(cols * bits / 32)]: element i at bit i * bits of the
    row's little-endian bit stream (compressed-tensors pack_to_int32 for bits dividing 32)."""
    assert 32 % bits == 0
    per = 32 // bits
    rows, cols = u.shape
    words = -(-cols // per)
    padded = np.zeros((rows, words * per), dtype=np.uint64)
    padded[:, :cols] = u
    out = np.zeros((rows, words), dtype=np.uint64)
    for i in range(per):
        out |= padded[:, i::per] << np.uint64(bits * i)
    return out.astype(np.uint32).view(np.int32)


# ---- compressed-tensors ---------------------------------------------------------------------------------

# name -> (format, config_groups, ignore). Group args are compressed-tensors QuantizationArgs dicts.
INT4_GROUP_SYM = dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
INT4_GROUP_ASYM = dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=32)
INT8_CHANNEL = dict(num_bits=8, type="int", symmetric=True, strategy="channel")
INT8_TENSOR = dict(num_bits=8, type="int", symmetric=True, strategy="tensor")
INT8_TOKEN_DYN = dict(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True)
INT8_TENSOR_STATIC = dict(num_bits=8, type="int", symmetric=True, strategy="tensor", dynamic=False)
FP8_TENSOR = dict(num_bits=8, type="float", symmetric=True, strategy="tensor")
FP8_CHANNEL = dict(num_bits=8, type="float", symmetric=True, strategy="channel")
FP8_TOKEN_DYN = dict(num_bits=8, type="float", symmetric=True, strategy="token", dynamic=True)
FP8_TENSOR_STATIC = dict(num_bits=8, type="float", symmetric=True, strategy="tensor", dynamic=False)
ATTN = r"re:.*self_attn\.(q|k|v|o)_proj$"
MLP = r"re:.*mlp\.(gate|up|down)_proj$"

CT_CHECKPOINTS = {
    # W4A16 symmetric groups of 32 on every Linear, lm_head ignored by name
    "ct_w4a16_g32": ("pack-quantized", {"group_0": dict(targets=["Linear"], weights=INT4_GROUP_SYM)},
                     ["lm_head"]),
    # asymmetric int4 groups on attention (packed zero points), W8A16 channel on the MLP, and one linear
    # ignored by a regex (stays float16)
    "ct_mixed_w4asym_w8": ("pack-quantized",
                           {"group_0": dict(targets=[ATTN], weights=INT4_GROUP_ASYM),
                            "group_1": dict(targets=[MLP], weights=INT8_CHANNEL)},
                           ["lm_head", r"re:.*layers\.1\.mlp\.down_proj$"]),
    # W8A8 int8: attention with per-channel weights and static per-tensor activations, MLP with per-tensor
    # weights (gate and up differ: expanded to channels) and dynamic per-token activations
    "ct_w8a8_int8": ("int-quantized",
                     {"group_0": dict(targets=[ATTN], weights=INT8_CHANNEL, input_activations=INT8_TENSOR_STATIC),
                      "group_1": dict(targets=[MLP], weights=INT8_TENSOR, input_activations=INT8_TOKEN_DYN)},
                     ["lm_head"]),
    # FP8: attention with per-tensor weight scales (q, k, v differ) and static activations, MLP per-channel
    # with dynamic per-token activations
    "ct_fp8": ("float-quantized",
               {"group_0": dict(targets=[ATTN], weights=FP8_TENSOR, input_activations=FP8_TENSOR_STATIC),
                "group_1": dict(targets=[MLP], weights=FP8_CHANNEL, input_activations=FP8_TOKEN_DYN)},
               ["lm_head"]),
}

# Static activation scales: max |x| of each linear's input over the prompt in the float model, / qmax;
# q, k and v share their input, hence their scale. Computed by numpy_forward below.


def ct_scheme_for(prefix: str, groups: dict, ignore: list[str]):
    import re
    for pat in ignore:
        if (pat.startswith("re:") and re.match(pat[3:], prefix)) or prefix.endswith(pat) or prefix == pat:
            return None
    for g in groups.values():
        for t in g["targets"]:
            if t == "Linear" or (t.startswith("re:") and re.match(t[3:], prefix)):
                return g
    return None


def fp8_e4m3_round(x: np.ndarray) -> np.ndarray:
    """Nearest-even E4M3FN value of x (|x| <= 448), as float32 (OCP FP8 spec: 3 mantissa bits, bias 7)."""
    x = x.astype(np.float64)
    a = np.abs(x)
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -9)))
    e = np.maximum(e, -6)  # subnormals below 2^-6 have step 2^-9
    step = 2.0 ** (e - 3)
    r = np.round(a / step) * step  # numpy rounds half to even
    return (np.sign(x) * np.minimum(r, 448.0)).astype(np.float32)


def fp8_e4m3_bits(v: np.ndarray) -> np.ndarray:
    """Exact E4M3FN values -> their bytes."""
    out = np.zeros(v.shape, dtype=np.uint8)
    a = np.abs(v.astype(np.float64))
    sign = np.signbit(v).astype(np.uint8) << 7  # -0.0 is 0x80, as torch's float8_e4m3fn cast gives it
    sub = a < 2.0 ** -6
    m_sub = np.round(a / 2.0 ** -9).astype(np.int64)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0))).astype(np.int64)
    m = np.round((a / 2.0 ** e - 1) * 8).astype(np.int64)
    normal = ((e + 7) << 3) | m
    out = np.where(sub, m_sub, normal).astype(np.uint8) | sign
    return out


def ct_numpy_linear(w: np.ndarray, args: dict, input_scale: float | None):
    """The compressed-tensors tensors of one linear (numpy, from the format definition) and its dequantized
    float weights. Returns (tensors by local name, ref f32 [N, K], scale/zero in the form the package's
    compress() takes)."""
    n, k = w.shape
    bits, sym, strategy = args["num_bits"], args["symmetric"], args["strategy"]
    t: dict[str, np.ndarray] = {}
    qparams = {}
    if args["type"] == "float":
        amax = np.abs(w).max(axis=1, keepdims=True) if strategy == "channel" else np.abs(w).max().reshape(1)
        s = (amax / 448.0).astype(np.float16).astype(np.float32)
        q = fp8_e4m3_round(w.astype(np.float32) / (s if strategy == "channel" else s[0]).astype(np.float32))
        t["weight"] = fp8_e4m3_bits(q)
        t["weight_scale"] = s.astype(np.float16)
        ref = (q.astype(np.float64) * s.astype(np.float64)).astype(np.float32)
        qparams["scale"] = s
    else:
        if strategy == "group":
            gs = args["group_size"]
            s, z = minmax_params(w.reshape(n, k // gs, gs), bits, sym)  # s [N, G]
            s_full = np.repeat(s, gs, axis=1)
            z_full = np.repeat(z, gs, axis=1) if z is not None else None
        elif strategy == "channel":
            s, z = minmax_params(w, bits, sym)
            s, z = s.reshape(n, 1), (z.reshape(n, 1) if z is not None else None)
            s_full, z_full = s, z
        else:  # tensor: scale [1]
            s, z = minmax_params(w.reshape(1, -1), bits, sym)
            s_full, z_full = s.reshape(1, 1), (z.reshape(1, 1) if z is not None else None)
            s, z = s.reshape(1), (z.reshape(1) if z is not None else None)
        off = 2 ** (bits - 1)
        qmin, qmax = -off, off - 1
        zs = np.zeros((1, 1), np.int64) if z_full is None else (z_full - off)  # signed, as compressed-tensors
        scaled = (w.astype(np.float32) / s_full.astype(np.float32)) + zs.astype(np.float32)  # f32 as torch
        q = np.clip(np.round(scaled), qmin, qmax).astype(np.int64)  # signed codes
        ref = (s_full.astype(np.float64) * (q - zs)).astype(np.float32)
        t["weight_scale"] = s.astype(np.float16)
        qparams["scale"] = s
        qparams["zero"] = None if z is None else (z - off).astype(np.int8)
        if bits == 8 and args.get("_format") == "int-quantized":
            t["weight"] = q.astype(np.int8)
        else:
            t["weight_packed"] = pack_bits_rows((q + off).astype(np.uint64), bits)
            t["weight_shape"] = np.array([n, k], dtype=np.int64)
            if z is not None:
                t["weight_zero_point"] = pack_bits_rows(z.T.astype(np.uint64), bits).T.copy()
    if input_scale is not None:
        t["input_scale"] = np.array([input_scale], dtype=np.float16)
    return t, ref, qparams


def ct_with_package(w: np.ndarray, args: dict, fmt: str, qparams: dict, input_scale: float | None):
    """The same linear through the compressed-tensors package: compress() and decompress()."""
    import torch
    from compressed_tensors.compressors.naive_quantized.base import (FloatQuantizationCompressor,
                                                                     IntQuantizationCompressor)
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    qa = QuantizationArgs(**{k: v for k, v in args.items() if not k.startswith("_")})
    scheme = QuantizationScheme(targets=["Linear"], weights=qa)
    comp = {"pack-quantized": PackedQuantizationCompressor, "int-quantized": IntQuantizationCompressor,
            "float-quantized": FloatQuantizationCompressor}[fmt]
    sd = {"weight": torch.from_numpy(w.copy()),
          "weight_scale": torch.from_numpy(qparams["scale"].astype(np.float16))}
    if qparams.get("zero") is not None:
        sd["weight_zero_point"] = torch.from_numpy(qparams["zero"])
    if input_scale is not None:
        sd["input_scale"] = torch.tensor([input_scale], dtype=torch.float16)
    out = comp.compress(sd, scheme)
    tensors = {}
    for name, v in out.items():
        v = v.contiguous()
        tensors[name] = (v.view(torch.uint8).numpy() if v.dtype == torch.float8_e4m3fn
                         else v.to(torch.float16).numpy() if v.dtype == torch.bfloat16 else v.numpy())
    dec_in = dict(out)
    dec_in["weight_scale"] = out["weight_scale"].float()  # exact products in f32
    ref = comp.decompress(dec_in, scheme)["weight"].float().numpy()
    return tensors, ref


def ct_quantization_config(fmt: str, groups: dict, ignore: list[str], use_package: bool) -> dict:
    if use_package:
        import compressed_tensors
        from compressed_tensors.quantization import QuantizationConfig, QuantizationScheme
        qc = QuantizationConfig(
            config_groups={g: QuantizationScheme(targets=v["targets"], weights=v["weights"],
                                                 input_activations=v.get("input_activations"))
                           for g, v in groups.items()},
            ignore=ignore, format=fmt, quantization_status="compressed")
        data = qc.model_dump(exclude=["quant_method"])
        # as ModelCompressor.update_config writes it
        return {"version": compressed_tensors.__version__, "quant_method": "compressed-tensors",
                "sparsity_config": {}, "transform_config": {}, **data}
    cfg_groups = {}
    for g, v in groups.items():
        cfg_groups[g] = {"targets": v["targets"], "weights": {**v["weights"], "observer": "minmax"},
                         "input_activations": v.get("input_activations"), "output_activations": None,
                         "format": fmt}
    return {"quant_method": "compressed-tensors", "format": fmt, "config_groups": cfg_groups, "ignore": ignore,
            "quantization_status": "compressed", "kv_cache_scheme": None, "sparsity_config": {},
            "version": "numpy-made (tools/make_checkpoint_golden.py)"}


# ---- GPTQ and AWQ (numpy packers from the published definitions) ------------------------------------------

GPTQ_CHECKPOINTS = {
    # bits, group_size, desc_act, sym, checkpoint_format
    "gptq_w4_g32_actorder": (4, 32, True, True, "gptq"),
    "gptq_w8_channel_asym": (8, -1, False, False, "gptq"),
    "gptq_w4_g32_asym_v2": (4, 32, False, False, "gptq_v2"),
}
AWQ_CHECKPOINTS = {"awq_w4_g32": (4, 32)}
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def gptq_linear(w: np.ndarray, bits, group_size, desc_act, sym, fmt, perm):
    n, k = w.shape
    gs = k if group_size == -1 else group_size
    g = k // gs
    if desc_act:  # act-order: columns quantized in a permuted order; g_idx[perm[i]] = i // gs
        g_idx = np.empty(k, dtype=np.int32)
        g_idx[perm] = np.arange(k) // gs
    else:
        g_idx = (np.arange(k) // gs).astype(np.int32)
    s = np.zeros((g, n), dtype=np.float32)
    z = np.zeros((g, n), dtype=np.int64)
    for gi in range(g):
        cols = np.nonzero(g_idx == gi)[0]
        sg, zg = minmax_params(w[:, cols], bits, sym)
        s[gi] = sg
        z[gi] = (2 ** (bits - 1)) if sym else zg
    if fmt == "gptq":  # v1 stores zero - 1, so a zero of 0 is not representable (AutoGPTQ clamps to >= 1)
        z = np.maximum(z, 1)
    sk = s[g_idx].T  # [N, K]
    zk = z[g_idx].T
    q = np.clip(np.round(w / sk) + zk, 0, 2 ** bits - 1).astype(np.int64)  # [N, K] unsigned
    ref = (sk.astype(np.float64) * (q - zk)).astype(np.float32)
    stored_z = (z - 1) if fmt == "gptq" else z
    t = {
        "qweight": pack_bits_rows(q.astype(np.uint64), bits).T.copy(),  # [K*bits/32, N]: packed along K
        "qzeros": pack_bits_rows(stored_z.astype(np.uint64), bits),  # [G, N*bits/32]: packed along N
        "scales": s.astype(np.float16),
        "g_idx": g_idx,
    }
    return t, ref


def awq_linear(w: np.ndarray, bits, group_size):
    n, k = w.shape
    g = k // group_size
    s, z = minmax_params(w.reshape(n, g, group_size), bits, False)  # [N, G]
    s_full, z_full = np.repeat(s, group_size, 1), np.repeat(z, group_size, 1)
    q = np.clip(np.round(w / s_full) + z_full, 0, 2 ** bits - 1).astype(np.int64)
    ref = (s_full.astype(np.float64) * (q - z_full)).astype(np.float32)

    def pack_awq(codes_kn):  # [R, N] -> int32 [R, N/8], word bits 4i hold column 8c + AWQ_ORDER[i]
        r, cols = codes_kn.shape
        out = np.zeros((r, cols // 8), dtype=np.uint64)
        for i, src in enumerate(AWQ_ORDER):
            out |= codes_kn[:, src::8].astype(np.uint64) << np.uint64(4 * i)
        return out.astype(np.uint32).view(np.int32)

    t = {"qweight": pack_awq(q.T), "qzeros": pack_awq(z.T), "scales": s.T.astype(np.float16)}
    return t, ref


# ---- numpy forward (for static activation scales only) ----------------------------------------------------


def numpy_forward_inputs(w: dict[str, np.ndarray]) -> dict[str, float]:
    """max |input| of every linear over PROMPT in the float base model (float64, transformers' Llama)."""
    x = w["model.embed_tokens.weight"][PROMPT].astype(np.float64)
    t = len(PROMPT)
    amax: dict[str, float] = {}

    def rms(v, g):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-5) * g

    inv = 1.0 / (10000.0 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM))
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))

    def rope(v):  # [t, heads, D]
        h = HEAD_DIM // 2
        rot = np.concatenate([-v[..., h:], v[..., :h]], -1)
        return v * cos[:, None, :] + rot * sin[:, None, :]

    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        h = rms(x, w[p + "input_layernorm.weight"])
        for nm in ("q_proj", "k_proj", "v_proj"):
            amax[p + "self_attn." + nm] = float(np.abs(h).max())
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(t, HEADS, HEAD_DIM)
        kk = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(t, KV_HEADS, HEAD_DIM)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, KV_HEADS, HEAD_DIM)
        q, kk = rope(q), rope(kk)
        rep = HEADS // KV_HEADS
        kk, v = np.repeat(kk, rep, 1), np.repeat(v, rep, 1)
        sc = np.einsum("thd,shd->hts", q, kk) / np.sqrt(HEAD_DIM)
        sc = sc + np.triu(np.full((t, t), -np.inf), 1)[None]
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        a = np.einsum("hts,shd->thd", pr, v).reshape(t, HEADS * HEAD_DIM)
        amax[p + "self_attn.o_proj"] = float(np.abs(a).max())
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        amax[p + "mlp.gate_proj"] = amax[p + "mlp.up_proj"] = float(np.abs(h).max())
        gt, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        m = gt / (1 + np.exp(-gt)) * up
        amax[p + "mlp.down_proj"] = float(np.abs(m).max())
        x = x + m @ w[p + "mlp.down_proj.weight"].T
    return amax


# ---- transformers logits (--torch) -----------------------------------------------------------------------


def transformers_logits(dense: dict[str, np.ndarray], act_quant: dict[str, tuple] | None):
    """act_quant: linear prefix -> ("int8" | "fp8", static scale or None)."""
    import torch
    import transformers
    cfg = hf_config()
    cfg.pop("torch_dtype")
    config = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).float().eval()
    sd = {k: torch.from_numpy(v.astype(np.float32)) for k, v in dense.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if "rotary" not in m]
    assert not missing and not unexpected, (missing, unexpected)
    hooks = []
    if act_quant:
        def make_hook(kind, static):
            def hook(_mod, inputs):
                x = inputs[0]
                qmax = 127.0 if kind == "int8" else 448.0
                if static is not None:
                    s = torch.tensor(static, dtype=torch.float32)
                else:
                    s = x.abs().amax(-1, keepdim=True) / qmax
                safe = torch.where(s == 0, torch.ones_like(s), s)
                if kind == "int8":
                    xq = torch.clamp(torch.round(x / safe), -127, 127) * safe
                else:
                    xq = torch.clamp(x / safe, -448, 448).to(torch.float8_e4m3fn).float() * safe
                return (torch.where(s == 0, torch.zeros_like(x), xq),)
            return hook
        for name, mod in model.named_modules():
            if name in act_quant:
                hooks.append(mod.register_forward_pre_hook(make_hook(*act_quant[name])))
    with torch.no_grad():
        out = model(torch.from_numpy(PROMPT.astype(np.int64))[None]).logits[0].float().numpy()
    for h in hooks:
        h.remove()
    return out


def write_safetensors(path: pathlib.Path, tensors: dict[str, np.ndarray], fp8_names: set[str]) -> None:
    """safetensors with tensors in name order (numpy has no float8 dtype: uint8 arrays named in fp8_names are
    tagged F8_E4M3). Layout per the format spec: u64 header length, JSON header, data."""
    tags = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
            np.dtype(np.int64): "I64", np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8"}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors, key=lambda nm: (-np.asarray(tensors[nm]).dtype.itemsize, nm)):  # aligned
        a = np.ascontiguousarray(tensors[name])
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": "F8_E4M3" if name in fp8_names else tags[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


# ---- main -----------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--torch", action="store_true", help="use the compressed-tensors package and transformers")
    args = ap.parse_args()
    base = base_model()
    amax = numpy_forward_inputs(base)
    versions = {"numpy": np.__version__, "python": platform.python_version()}
    if args.torch:
        import compressed_tensors
        import torch
        import transformers
        versions.update(torch=torch.__version__, transformers=transformers.__version__,
                        compressed_tensors=compressed_tensors.__version__)
    rng = np.random.default_rng(SEED + 1)
    problems: list[str] = []
    made = {}  # name -> (..., fp8_names: uint8 arrays written with the safetensors dtype F8_E4M3)

    for name, (fmt, groups, ignore) in CT_CHECKPOINTS.items():
        tensors, dense_eq, refs, act_quant = {}, {}, {}, {}
        fp8_names = set()
        for prefix, n, k in linear_prefixes():
            w = base[prefix + ".weight"]
            g = ct_scheme_for(prefix, groups, ignore)
            if g is None:
                tensors[prefix + ".weight"] = w.astype(np.float16)
                dense_eq[prefix + ".weight"] = w
                continue
            wargs = {**g["weights"], "_format": fmt}
            ia = g.get("input_activations")
            in_scale = None
            if ia is not None:
                kind = "int8" if ia["type"] == "int" else "fp8"
                if not ia.get("dynamic", False):
                    qmax = 127.0 if kind == "int8" else 448.0
                    in_scale = float(np.float16(amax[prefix] / qmax))
                act_quant[prefix] = (kind, in_scale)
            t, ref, qp = ct_numpy_linear(w, wargs, in_scale)
            if args.torch:
                try:
                    tp, refp = ct_with_package(w, wargs, fmt, qp, in_scale)
                except Exception as e:  # keep going: the other checkpoints and the logits still come out
                    import traceback
                    traceback.print_exc()
                    problems.append(f"{name} {prefix}: compressed-tensors failed: {e!r}")
                    tp, refp = t, ref
                if set(tp) != set(t):
                    problems.append(f"{name} {prefix}: package tensors {sorted(tp)} vs numpy {sorted(t)}")
                for tn in t:
                    if tn in tp and (tp[tn].shape != t[tn].shape or tp[tn].tobytes() != t[tn].tobytes()):
                        problems.append(f"{name} {prefix}.{tn}: package and numpy packers differ "
                                        f"({tp[tn].dtype}{list(tp[tn].shape)} vs {t[tn].dtype}{list(t[tn].shape)})")
                if not np.array_equal(refp, ref):
                    d = float(np.abs(refp - ref).max())
                    problems.append(f"{name} {prefix}: package decompress != numpy dequantization (max {d:g})")
                t, ref = tp, refp  # the package's output is the golden
            for tn, v in t.items():
                tensors[prefix + "." + tn] = v
                if fmt == "float-quantized" and tn == "weight":
                    fp8_names.add(prefix + "." + tn)
            dense_eq[prefix + ".weight"] = ref
            if prefix in REF_LINEARS:
                refs["ref." + prefix + ".weight"] = ref
        qc = ct_quantization_config(fmt, groups, ignore, args.torch)
        made[name] = (tensors, dense_eq, refs, act_quant, qc, "compressed-tensors package" if args.torch
                      else "numpy packer (format definition)", fp8_names)

    for name, (bits, gs, desc_act, sym, cfmt) in GPTQ_CHECKPOINTS.items():
        tensors, dense_eq, refs = {}, {}, {}
        perms = {}  # act order follows the input's Hessian: q/k/v share one order, gate/up another
        for prefix, n, k in linear_prefixes():
            key = prefix.rsplit(".", 1)[0] + (".qkv" if prefix.endswith(("q_proj", "k_proj", "v_proj")) else
                                               ".gate_up" if prefix.endswith(("gate_proj", "up_proj")) else prefix)
            if key not in perms:
                perms[key] = rng.permutation(k)
            t, ref = gptq_linear(base[prefix + ".weight"], bits, gs, desc_act, sym, cfmt, perms[key])
            for tn, v in t.items():
                tensors[prefix + "." + tn] = v
            dense_eq[prefix + ".weight"] = ref
            if prefix in REF_LINEARS:
                refs["ref." + prefix + ".weight"] = ref
        qc = {"quant_method": "gptq", "bits": bits, "group_size": gs, "desc_act": desc_act, "sym": sym,
              "checkpoint_format": cfmt, "damp_percent": 0.01, "static_groups": False, "true_sequential": True,
              "lm_head": False}
        made[name] = (tensors, dense_eq, refs, {}, qc, "numpy packer (AutoGPTQ pack definition)", set())

    for name, (bits, gs) in AWQ_CHECKPOINTS.items():
        tensors, dense_eq, refs = {}, {}, {}
        for prefix, n, k in linear_prefixes():
            t, ref = awq_linear(base[prefix + ".weight"], bits, gs)
            for tn, v in t.items():
                tensors[prefix + "." + tn] = v
            dense_eq[prefix + ".weight"] = ref
            if prefix in REF_LINEARS:
                refs["ref." + prefix + ".weight"] = ref
        qc = {"quant_method": "awq", "bits": bits, "group_size": gs, "zero_point": True, "version": "gemm",
              "modules_to_not_convert": None}
        made[name] = (tensors, dense_eq, refs, {}, qc, "numpy packer (AutoAWQ GEMM pack definition)", set())

    total = 0
    for name, (tensors, dense_eq, refs, act_quant, qc, packer, fp8_names) in made.items():
        d = args.out / name
        d.mkdir(parents=True, exist_ok=True)
        for other in base:
            if "_proj." not in other:
                tensors[other] = base[other].astype(np.float16)
                dense_eq[other] = base[other]
        cfg = hf_config()
        cfg["quantization_config"] = qc
        (d / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        write_safetensors(d / "model.safetensors", tensors, fp8_names)
        golden = dict(refs)
        golden["prompt"] = PROMPT
        meta = {"name": name, "packer": packer, "seed": SEED, "versions": versions, "ref_linears": REF_LINEARS,
                "act_quant": {k: list(v) for k, v in act_quant.items()}}
        if args.torch:
            golden["logits_float"] = transformers_logits(dense_eq, None)
            golden["logits"] = (transformers_logits(dense_eq, act_quant) if act_quant else golden["logits_float"])
            meta["logits_abs_max"] = float(np.abs(golden["logits"]).max())
            meta["logits_act_quant_effect"] = float(np.abs(golden["logits"] - golden["logits_float"]).max())
            srt = np.sort(golden["logits"], -1)
            meta["min_top2_gap"] = float((srt[:, -1] - srt[:, -2]).min())
            meta["greedy_argmax"] = golden["logits"].argmax(-1).tolist()
        write_safetensors(d / "golden.safetensors", golden, set())
        (d / "golden.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        total += sum(f.stat().st_size for f in d.iterdir())
    print(f"wrote {len(made)} checkpoints, {total} bytes, under {args.out}")
    if total > MAX_TOTAL_BYTES:
        problems.append(f"total {total} bytes > {MAX_TOTAL_BYTES}")
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
