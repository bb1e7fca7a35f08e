"""A numpy reader and float64 forward of the compressed-tensors checkpoints `xinfer quantize` writes: the
reference its output is checked against (tests/python/test_quantize.py). Written from the published
definitions, sharing nothing with xinfer:

  - safetensors parsed by hand (F32, BF16, F16, I8, I32, I64, F8_E4M3; tools/numpy_llama.py);
  - compressed-tensors decompression (compressed-tensors' QuantizationArgs / compressors): int-quantized
    `weight` int8 and float-quantized `weight` e4m3 times `weight_scale` ([N, 1] channel, [1] tensor);
    pack-quantized `weight_packed` int32 words holding 32 / b values of b bits, value + 2^(b-1), the first
    column in the lowest bits, `weight_shape` (N, K), `weight_scale` [N, G], optional `weight_zero_point`
    packed the same way along the rows; W = scale * (q - zero_point) per group of `group_size` columns;
  - the Llama forward of transformers' modeling_llama (RMSNorm, rotate-half rope, GQA, SwiGLU) in float64
    (tools/numpy_llama.py),
    where a linear whose config group has `input_activations` {strategy token, dynamic} sees its input
    fake-quantized per token: int8 x ~ s round(x / s) clamped to +-127, s = max|x_t| / 127; fp8 x ~ s e4m3(x / s),
    s = max|x_t| / 448 (e4m3 by round-to-nearest-even on the 3-bit mantissa, subnormals below 2^-6);
  - RTN of float weights in the same conventions (rtn()), to check the quantizer itself, and the FP8 scale
    search's candidates (fp8_scale_candidates()).

    python3 tools/quantize_numpy_reference.py --model OUT --ids 1,2,3 [--logits xinfer_logits.safetensors]
"""
import argparse
import json
import pathlib

import numpy as np

import numpy_llama  # the shared reader and float64 Llama forward (same directory)



def e4m3_to_float(bits: np.ndarray) -> np.ndarray:
    b = bits.astype(np.int32)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 0xF
    m = b & 0x7
    val = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    val = np.where((b & 0x7F) == 0x7F, np.nan, val)
    return sign * val


def round_e4m3(x: np.ndarray) -> np.ndarray:
    """Nearest e4m3 value (ties to even), saturating at +-448."""
    a = np.abs(x)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.clip(e, -6, 8)
    step = 2.0 ** (e - 3)
    q = np.round(a / step) * step
    return np.sign(x) * np.minimum(q, 448.0)


def read_safetensors(path: pathlib.Path, raw: bool = False) -> dict:
    out = numpy_llama.read_safetensors_raw(path)
    return out if raw else {k: v[0] for k, v in out.items()}


def unpack(words: np.ndarray, bits: int, count: int, axis: int) -> np.ndarray:
    """int32 words -> signed values along `axis` (1: columns, 0: rows), `count` of them."""
    per = 32 // bits
    u = words.view(np.uint32)
    parts = [((u >> (bits * i)) & ((1 << bits) - 1)).astype(np.int64) for i in range(per)]
    # value index = word index * per + i along the packed axis
    full = np.stack(parts, axis=axis + 1)  # [R, C, per] (axis 1) or [R, per, C] (axis 0)
    full = full.reshape(u.shape[0], -1) if axis == 1 else full.reshape(-1, u.shape[1])
    full = full[:, :count] if axis == 1 else full[:count]
    return full - (1 << (bits - 1))


def expand_scale(scale: np.ndarray, n: int, k: int, group: int | None, g_idx: np.ndarray | None = None) -> np.ndarray:
    """[n, G] (or [1]) per-block values -> [n, k]; column c reads group g_idx[c] if given, else c // group."""
    s = scale.astype(np.float64).reshape(scale.shape[0], -1) if scale.size > 1 else np.full((n, 1), float(scale.reshape(-1)[0]))
    if s.shape[1] == 1:
        return np.broadcast_to(s, (n, k))
    if g_idx is not None:
        return s[:, g_idx.astype(np.int64)]
    return np.repeat(s, group, axis=1)[:, :k]


class Checkpoint:
    """config.json + model.safetensors of a compressed-tensors (or dense) directory, decompressed to float64."""

    def __init__(self, model_dir: pathlib.Path):
        model_dir = pathlib.Path(model_dir)
        self.c = json.loads((model_dir / "config.json").read_text())
        self.raw = read_safetensors(model_dir / "model.safetensors", raw=True)
        q = self.c.get("quantization_config")
        self.q = q
        self.group = q["config_groups"].get("group_0") if q else None  # none: --scheme none (KV scales only)
        self.ignore = set(q["ignore"]) if q else set()
        self.w = {}
        self.quantized = set()
        for name, (arr, dt) in self.raw.items():
            if name.endswith((".weight_scale", ".weight_zero_point", ".weight_shape", ".weight_packed", ".weight_g_idx")):
                continue
            if name.endswith(".weight") and dt in ("I8", "F8_E4M3"):
                continue
            self.w[name] = arr.astype(np.float64)
        for name in self.raw:
            if name.endswith(".weight_scale"):
                module = name[: -len(".weight_scale")]
                self.w[module + ".weight"] = self.decompress(module)
                self.quantized.add(module)

    def decompress(self, module: str) -> np.ndarray:
        wa = self.group["weights"]
        fmt = self.q["format"]
        scale = self.raw[module + ".weight_scale"][0]
        gs = wa.get("group_size")
        if fmt in ("int-quantized", "float-quantized"):
            w, dt = self.raw[module + ".weight"]
            vals = e4m3_to_float(w) if dt == "F8_E4M3" else w.astype(np.float64)
            n, k = w.shape
            zp = 0
        else:
            assert fmt == "pack-quantized", fmt
            n, k = (int(v) for v in self.raw[module + ".weight_shape"][0])
            bits = wa["num_bits"]
            vals = unpack(self.raw[module + ".weight_packed"][0], bits, k, axis=1).astype(np.float64)
            zp = 0
            g_idx = self.raw[module + ".weight_g_idx"][0] if module + ".weight_g_idx" in self.raw else None
            if module + ".weight_zero_point" in self.raw:
                z = unpack(self.raw[module + ".weight_zero_point"][0], bits, n, axis=0)
                zp = expand_scale(z.astype(np.float64), n, k, gs, g_idx)
            return expand_scale(scale, n, k, gs, g_idx) * (vals - zp)
        return expand_scale(scale, n, k, gs) * (vals - zp)

    def act_mode(self, module: str) -> str | None:
        if module not in self.quantized or not self.group or not self.group.get("input_activations"):
            return None
        a = self.group["input_activations"]
        assert a["strategy"] == "token" and a["dynamic"], a
        return a["type"]

    def forward(self, ids) -> np.ndarray:
        w = self.w

        def lin(x, module):
            mode = self.act_mode(module)
            if mode is not None:
                x = fake_quant_tokens(x, mode)
            y = x @ w[module + ".weight"].T
            return y + w[module + ".bias"] if module + ".bias" in w else y

        return numpy_llama.llama_forward(self.c, w, ids, lin)


def fake_quant_tokens(x: np.ndarray, kind: str) -> np.ndarray:
    amax = np.abs(x).max(-1, keepdims=True)
    if kind == "int":
        s = np.where(amax > 0, amax / 127.0, 1.0)
        return np.clip(np.round(x / s), -127, 127) * s
    s = np.where(amax > 0, amax / 448.0, 1.0)
    return round_e4m3(x / s) * s


def rtn(w: np.ndarray, bits: int, kind: str, strategy: str, group: int | None, symmetric: bool):
    """Round-to-nearest of w [N, K] (float32 arithmetic, as the quantizer): returns the dequantized weights.
    Symmetric: scale = max|block| / (2^(b-1) - 1), q in +-(2^(b-1) - 1); asymmetric: scale = (max(hi, 0) -
    min(lo, 0)) / (2^b - 1), zero = clamp(-2^(b-1) - round(lo / scale)), q clamped to [-2^(b-1), 2^(b-1) - 1];
    fp8: scale = max|block| / 448, q = e4m3(w / scale)."""
    w = w.astype(np.float32)
    n, k = w.shape
    width = k if strategy == "channel" else group if strategy == "group" else None
    blocks = w.reshape(1, n * k) if strategy == "tensor" else w.reshape(n, k // width, width).reshape(-1, width)
    lo = np.minimum(blocks.min(-1, keepdims=True), 0)
    hi = np.maximum(blocks.max(-1, keepdims=True), 0)
    qmax = 2 ** (bits - 1) - 1
    if kind == "float":
        amax = np.maximum(-lo, hi)
        s = np.where(amax > 0, amax / np.float32(448), np.float32(1)).astype(np.float32)
        deq = s * round_e4m3((blocks / s).astype(np.float32)).astype(np.float32)
    elif symmetric:
        amax = np.maximum(-lo, hi)
        s = np.where(amax > 0, amax / np.float32(qmax), np.float32(1)).astype(np.float32)
        deq = s * np.clip(np.round(blocks / s), -qmax, qmax)
    else:
        s = np.where(hi - lo > 0, (hi - lo) / np.float32(2 ** bits - 1), np.float32(1)).astype(np.float32)
        z = np.clip(-(qmax + 1) - np.round(lo / s), -(qmax + 1), qmax)
        deq = s * (np.clip(np.round(blocks / s) + z, -(qmax + 1), qmax) - z)
    return deq.reshape(n, k).astype(np.float64)


def fp8_scale_candidates(w: np.ndarray, steps: int = 16) -> np.ndarray:
    """The FP8 scale search's candidates (`--weight-clip mse` with w8a8-fp8) for each row of w [N, K]: [N, steps],
    s_i = (max|w_row| / 448) * f32(2^(i / steps)), i = 0 .. steps-1 (f32 arithmetic; the row's max lands on
    448 / 2^(i / steps), never clipped). The quantizer keeps the candidate with the smallest column-weighted
    squared error sum_c h_c (w_c - s e4m3(w_c / s))^2, first one on ties."""
    w = w.astype(np.float32)
    amax = np.abs(w).max(-1)
    s0 = np.where(amax > 0, amax / np.float32(448), np.float32(1)).astype(np.float32)
    mult = np.array([np.float32(2.0 ** (i / steps)) for i in range(steps)], dtype=np.float32)
    return (s0[:, None] * mult[None, :]).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--logits", help="xinfer logits output (logits_0) to compare with")
    a = ap.parse_args()
    ck = Checkpoint(pathlib.Path(a.model))
    ids = [int(t) for t in a.ids.split(",")]
    ref = ck.forward(ids)
    out = {"positions": len(ids), "max_abs_logit": float(np.abs(ref).max())}
    if a.logits:
        got = read_safetensors(pathlib.Path(a.logits))["logits_0"].astype(np.float64)
        out["max_abs_diff"] = float(np.abs(got - ref[-got.shape[0]:]).max())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
