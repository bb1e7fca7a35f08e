"""Exploration (docs/PERF.md "Session 14 ... rotations"): FP8 e4m3 (per-channel weights, per-token activations)
on a llama GGUF with random orthogonal rotations folded into the weights - QuaRot's residual rotation (RMSNorm
weights folded into the next linears, the embedding, lm_head and every residual writer rotated), a per-head V / O
rotation, and an online rotation of the down projection's input (simulated) - scored by KL, PPL and top-1
agreement against the float model on windows of 512 tokens. The float32 forward follows
tools/gguf_numpy_reference.py (weights from the gguf package's dequantizers), the e4m3 rounding is
tools/quantize_numpy_reference.py's; the rotated model, unquantized, is checked to give the float model's
log-probabilities (to f32 rounding). lm_head stays in float, as the engine keeps it in bf16.

    xinfer tokenize --tokenizer M.gguf --no-special < text > ids.json
    python3 tools/fp8_rotation_study.py M.gguf ids.json [windows=4]
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


def rand_orth(n, rng):
    """A random n x n orthogonal matrix (QR of a Gaussian, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


def e4m3_rows(x):
    """Each row of x rounded to e4m3 with the scale max |row| / 448 (weights per channel, x per token)."""
    s = np.abs(x).max(1, keepdims=True) / 448.0
    s = np.where(s > 0, s, 1)
    return (round_e4m3(x / s) * s).astype(np.float32)


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


class RotatedModel:
    """The GGUF model's weights with the norms folded and the chosen rotations applied (exactly equivalent)."""

    def __init__(self, m, rng, resid, vo, down):
        self.m = m
        w = {k: v.copy() for k, v in m.w.items()}
        H, D = m.H, m.D
        lm = m.lm_head * w["output_norm.weight"][None, :]
        w["output_norm.weight"] = np.ones(H, np.float32)
        R = rand_orth(H, rng) if resid else np.eye(H, dtype=np.float32)
        w["token_embd.weight"] = w["token_embd.weight"] @ R
        self.lm_head = (lm @ R).astype(np.float32)
        self.down_rot = {}
        for layer in range(m.L):
            p = f"blk.{layer}."
            for norm, names in (("attn_norm", ("attn_q", "attn_k", "attn_v")), ("ffn_norm", ("ffn_gate", "ffn_up"))):
                g = w[p + norm + ".weight"]
                for n in names:
                    w[p + n + ".weight"] = (w[p + n + ".weight"] * g[None, :]) @ R
                w[p + norm + ".weight"] = np.ones(H, np.float32)
            for n in ("attn_output", "ffn_down"):
                w[p + n + ".weight"] = R.T @ w[p + n + ".weight"]
            if vo:  # v rows of each KV head by Rv^T, the o columns of every query head by Rv
                Rv = rand_orth(D, rng)
                wv = w[p + "attn_v.weight"].reshape(m.nkv, D, H)
                w[p + "attn_v.weight"] = np.einsum("ed,kdh->keh", Rv.T, wv).reshape(m.nkv * D, H)
                wo = w[p + "attn_output.weight"].reshape(H, m.nh, D)
                w[p + "attn_output.weight"] = (wo @ Rv).reshape(H, m.nh * D)
            if down:  # online: the SwiGLU output times Rd at run time, Rd folded into down
                Rd = rand_orth(w[p + "ffn_down.weight"].shape[1], rng)
                w[p + "ffn_down.weight"] = w[p + "ffn_down.weight"] @ Rd
                self.down_rot[layer] = Rd
        self.w = w
        self.quantized = {}

    def linear(self, x, name, fp8):
        w = self.w[name]
        if fp8:
            if name not in self.quantized:
                self.quantized[name] = e4m3_rows(w)
            return e4m3_rows(x) @ self.quantized[name].T
        return x @ w.T

    def log_probs(self, ids, fp8):
        m, w = self.m, self.w
        T, D, nh, nkv = len(ids), m.D, m.nh, m.nkv
        pos = np.arange(T)
        mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
        x = w["token_embd.weight"][np.array(ids)]
        for layer in range(m.L):
            p = f"blk.{layer}."
            h = m.rms(x, w[p + "attn_norm.weight"])
            q = m.rope(self.linear(h, p + "attn_q.weight", fp8).reshape(T, nh, D), pos)
            k = m.rope(self.linear(h, p + "attn_k.weight", fp8).reshape(T, nkv, D), pos)
            v = self.linear(h, p + "attn_v.weight", fp8).reshape(T, nkv, D)
            k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(D) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = np.einsum("hts,shd->thd", s, v).reshape(T, nh * D)
            x = x + self.linear(a, p + "attn_output.weight", fp8)
            h = m.rms(x, w[p + "ffn_norm.weight"])
            gate = self.linear(h, p + "ffn_gate.weight", fp8)
            u = gate / (1 + np.exp(-gate)) * self.linear(h, p + "ffn_up.weight", fp8)
            if layer in self.down_rot:
                u = u @ self.down_rot[layer]
            x = x + self.linear(u, p + "ffn_down.weight", fp8)
        return log_softmax(m.rms(x, w["output_norm.weight"]) @ self.lm_head.T)


def main():
    m = GgufLlama(sys.argv[1])
    ids = json.load(open(sys.argv[2]))
    n_windows = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    windows = [ids[i * WINDOW:(i + 1) * WINDOW] for i in range(n_windows)]
    rng = np.random.default_rng(0)
    plain = RotatedModel(m, rng, False, False, False)
    ref = [plain.log_probs(win, False) for win in windows]
    rotated = RotatedModel(m, rng, True, True, True)
    drift = np.abs(rotated.log_probs(windows[0], False) - ref[0]).max()
    print(f"rotated, unquantized: max |d log p| {drift:.2e}", flush=True)
    for tag, resid, vo, down in (("FP8 naive", False, False, False),
                                 ("FP8 + residual rotation", True, False, False),
                                 ("FP8 + residual + V/O rotation", True, True, False),
                                 ("FP8 + residual + V/O + online down", True, True, True)):
        t0 = time.time()
        model = RotatedModel(m, rng, resid, vo, down)
        kl = nll = nll_ref = 0.0
        top = n = 0
        for win, lr in zip(windows, ref):
            lq = model.log_probs(win, True)
            tgt = np.array(win[1:])
            rows = np.arange(len(tgt))
            kl += (np.exp(lr) * (lr - lq)).sum(-1)[:-1].sum()
            nll += -lq[rows, tgt].sum()
            nll_ref += -lr[rows, tgt].sum()
            top += int((lq.argmax(-1)[:-1] == lr.argmax(-1)[:-1]).sum())
            n += len(tgt)
        print(f"{tag:38s} KL {kl / n:.4f}  PPL {np.exp(nll / n):.3f} vs {np.exp(nll_ref / n):.3f} "
              f"({100 * (np.exp((nll - nll_ref) / n) - 1):+.2f}%)  top-1 {100 * top / n:.1f}%  "
              f"({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
