"""Exploration (docs/PERF.md "FP8 KV cache ... where its error comes from"): an FP8 (e4m3) KV cache on a llama GGUF,
each variant scored by KL, PPL and top-1 agreement against the float cache on windows of 512 tokens.

Variants: K and V rounded to e4m3 with a scale of 1 (xinfer's default), with calibrated per-head scales (max |x| /
448 over the calibration windows), K alone / V alone, and with a calibrated per-(layer, KV head, channel) offset
removed before rounding. The "FP8 MMA" variants (docs/PERF.md session 22) also round what an attention kernel on
e4m3 tensor cores would: q per (token, head) to e4m3 with scale max |q| / 448, in the keys' Hadamard basis, and the
unnormalized probabilities exp(s - row max) in [0, 1] to e4m3, unscaled or times 448 (the row sums unrounded).
An offset is exact in real arithmetic: softmax(q . (k_i - b)) = softmax(q . k_i) because
q . b is the same for every key of a query, and sum_i p_i (v_i - c) + c = sum_i p_i v_i because the p_i sum to 1; so
the cache may hold k - b and v - c, and attention adds c to its output. The float32 forward is
tools/gguf_numpy_reference.py's, the e4m3 rounding tools/quantize_numpy_reference.py's.

    xinfer tokenize --tokenizer M.gguf --no-special < text > ids.json      (test text, then calibration text)
    python3 tools/fp8_kv_study.py M.gguf test_ids.json calib_ids.json [windows=8] [calib_windows=4]
"""
import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gguf_numpy_reference import GgufLlama  # noqa: E402
from quantize_numpy_reference import round_e4m3  # noqa: E402

WINDOW = 512


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def e4m3(x, scale):
    """x rounded to e4m3 codes times scale (scale broadcasts against x: a scalar or [nkv, 1])."""
    return (round_e4m3(x / scale) * scale).astype(np.float32)


def calibrate(m, windows, rotation):
    """Per layer: max |k|, max |k R^T| (kmax_rot), max |v| per KV head [nkv]; mean k, mean v per (KV head,
    channel) [nkv, D]."""
    stats = [dict(kmax=0, kmax_rot=0, vmax=0, ksum=0, vsum=0, n=0) for _ in range(m.L)]

    def hook(layer, k, v):
        s = stats[layer]
        s["kmax"] = np.maximum(s["kmax"], np.abs(k).max((0, 2)))
        s["kmax_rot"] = np.maximum(s["kmax_rot"], np.abs(np.einsum("thd,ed->the", k, rotation)).max((0, 2)))
        s["vmax"] = np.maximum(s["vmax"], np.abs(v).max((0, 2)))
        s["ksum"] = s["ksum"] + k.sum(0, dtype=np.float64)
        s["vsum"] = s["vsum"] + v.sum(0, dtype=np.float64)
        s["n"] += k.shape[0]
        return k, v, None

    for w in windows:
        m.forward(w, kv=hook)
    for s in stats:
        s["kmean"] = (s["ksum"] / s["n"]).astype(np.float32)
        s["vmean"] = (s["vsum"] / s["n"]).astype(np.float32)
    return stats


def hadamard(n):
    """The n x n Walsh-Hadamard matrix over sqrt(n) (orthogonal; n a power of two)."""
    h = np.ones((1, 1), np.float32)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return (h / np.sqrt(n)).astype(np.float32)


def make_hook(stats, quant_k=True, quant_v=True, per_head=False, center_k=False, center_v=False, rotate_k=None,
              rotate_v=None):
    """rotate_k / rotate_v: an orthogonal [D, D] R; the cache holds x R^T (q rotated alike keeps every score;
    V's rotation folds into v_proj / o_proj), here rounded and rotated back."""
    def hook(layer, k, v):
        s = stats[layer]
        c = None
        if rotate_k is not None:
            k = np.einsum("thd,ed->the", k, rotate_k)
        if rotate_v is not None:
            v = np.einsum("thd,ed->the", v, rotate_v)
        if center_k:
            k = k - s["kmean"][None]
        if center_v:
            c = s["vmean"]
            v = v - c[None]
        if quant_k:
            kmax = s["kmax"] if rotate_k is None else s["kmax_rot"]
            sk = (np.maximum(kmax, 1e-6) / 448.0)[:, None] if per_head else 1.0
            k = e4m3(k, sk)
        if quant_v:
            sv = (np.maximum(s["vmax"], 1e-6) / 448.0)[:, None] if per_head else 1.0
            v = e4m3(v, sv)
        if rotate_k is not None:
            k = np.einsum("the,ed->thd", k, rotate_k)
        if rotate_v is not None:
            v = np.einsum("the,ed->thd", v, rotate_v)
        return k, v, c
    return hook


def make_attn_round(rotate=None, round_q=False, round_p=None):
    """attn_round for GgufLlama.forward: q to e4m3 per (token, head) (in the basis `rotate`, as a kernel would
    see it next to rotated keys), p to e4m3 (round_p: None, "unscaled", or "448": times 448 then back)."""
    def f(kind, x):
        if kind == "q" and round_q:
            y = np.einsum("thd,ed->the", x, rotate) if rotate is not None else x
            sc = np.maximum(np.abs(y).max(-1, keepdims=True), 1e-30) / 448.0
            y = e4m3(y, sc)
            return np.einsum("the,ed->thd", y, rotate) if rotate is not None else y
        if kind == "p" and round_p is not None:
            return e4m3(x, 1.0 / 448.0) if round_p == "448" else e4m3(x, 1.0)
        return x
    return f


def main():
    path, test_ids, calib_ids = sys.argv[1:4]
    windows = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    calib_windows = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    m = GgufLlama(path)
    ids = json.loads(pathlib.Path(test_ids).read_text())
    cids = json.loads(pathlib.Path(calib_ids).read_text())
    ids = ids["ids"] if isinstance(ids, dict) else ids
    cids = cids["ids"] if isinstance(cids, dict) else cids
    wins = [ids[i * WINDOW:(i + 1) * WINDOW] for i in range(windows)]
    cwins = [cids[i * WINDOW:(i + 1) * WINDOW] for i in range(calib_windows)]
    t0 = time.time()
    hd = hadamard(m.D)
    stats = calibrate(m, cwins, hd)
    for layer in (0, 1, m.L // 2, m.L - 1):
        s = stats[layer]
        print(f"layer {layer}: max|k| per head {np.round(s['kmax'], 1).tolist()}, max|v| {np.round(s['vmax'], 2).tolist()}, "
              f"|mean k| max {np.abs(s['kmean']).max():.2f}, |mean v| max {np.abs(s['vmean']).max():.3f}", flush=True)
    variants = {
        "e4m3 K+V, scale 1": make_hook(stats),
        "e4m3 K only, scale 1": make_hook(stats, quant_v=False),
        "e4m3 V only, scale 1": make_hook(stats, quant_k=False),
        "e4m3 K+V, per-head scales": make_hook(stats, per_head=True),
        "e4m3 K+V, K centred": make_hook(stats, center_k=True),
        "e4m3 K+V, K and V centred": make_hook(stats, center_k=True, center_v=True),
        "e4m3 K+V, K and V centred, per-head scales": make_hook(stats, center_k=True, center_v=True, per_head=True),
        "e4m3 K+V, K Hadamard": make_hook(stats, rotate_k=hd),
        "e4m3 K+V, K and V Hadamard": make_hook(stats, rotate_k=hd, rotate_v=hd),
        "e4m3 K+V, K and V Hadamard, per-head scales": make_hook(stats, rotate_k=hd, rotate_v=hd, per_head=True),
        "e4m3 K+V, K Hadamard, per-head scales": make_hook(stats, rotate_k=hd, per_head=True),
    }
    base = "e4m3 K+V, K Hadamard, per-head scales"
    attn_variants = {
        "FP8 MMA: + q e4m3": make_attn_round(hd, round_q=True),
        "FP8 MMA: + p e4m3 unscaled": make_attn_round(hd, round_p="unscaled"),
        "FP8 MMA: + p e4m3 x448": make_attn_round(hd, round_p="448"),
        "FP8 MMA: + q and p (x448) e4m3": make_attn_round(hd, round_q=True, round_p="448"),
    }
    for name in attn_variants:
        variants[name] = variants[base]
    if len(sys.argv) > 6:
        variants = {k: v for k, v in variants.items() if k in sys.argv[6].split(";")}
    ref = []
    nll_ref = 0.0
    n = 0
    for w in wins:
        lp = log_softmax(m.forward(w).astype(np.float64))[:-1]
        tgt = np.array(w[1:])
        ref.append(lp)
        nll_ref += -lp[np.arange(len(tgt)), tgt].sum()
        n += len(tgt)
    print(f"float cache: PPL {np.exp(nll_ref / n):.4f} over {n} tokens ({time.time() - t0:.0f} s)", flush=True)
    for name, hook in variants.items():
        nll = kl = agree = 0.0
        per_win = []
        for w, lr in zip(wins, ref):
            logits = m.forward(w, kv=hook, attn_round=attn_variants.get(name))
            lp = log_softmax(logits.astype(np.float64))[:-1]
            tgt = np.array(w[1:])
            d = -lp[np.arange(len(tgt)), tgt].sum()
            nll += d
            per_win.append(d + lr[np.arange(len(tgt)), tgt].sum())
            kl += (np.exp(lr) * (lr - lp)).sum()
            agree += (lp.argmax(-1) == lr.argmax(-1)).sum()
        se = np.std(per_win, ddof=1) * np.sqrt(len(per_win)) / n * 100
        print(f"{name:45s} KL {kl / n:.5f}  PPL {np.exp(nll / n):.4f} ({(np.exp((nll - nll_ref) / n) - 1) * 100:+.3f}% "
              f"+- {se:.3f})  top-1 {agree / n * 100:.1f}%  ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
