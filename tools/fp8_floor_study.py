"""Exploration (docs/PERF.md "Session 32 ... FP8's activations alone"): what W8A8-FP8 (e4m3 weights per output
channel, dynamic per-token e4m3 activations) costs on a llama GGUF when only the activations are quantized, with
and without SmoothQuant smoothing searched per linear - i.e. the part of FP8's error that no weight method
(RTN, GPTQ, scale search) can remove.

Smoothing divides a linear's input channel j by s_j = max|X_j|^alpha / max|W_j|^(1 - alpha) and multiplies the
weights' column j by s_j (exact in float; the engine folds s into the preceding norm). The search picks alpha
from 0, 0.1, ..., 1 per linear, minimising the linear's output error on calibration rows (the float model's
inputs to that linear on the calibration windows), as `xinfer quantize`'s per-layer alpha search does per
smoothing group (a per-linear choice is at least as good; s = 1, no smoothing, is not among the candidates:
compare with the unsmoothed row). "rel3" rounds to 3 mantissa bits with an unbounded
exponent: e4m3 without its range limits and without the per-token scale that makes each row's largest value exact.

The float32 forward is tools/gguf_numpy_reference.py's (weights from the gguf package's dequantizers), the e4m3
rounding tools/quantize_numpy_reference.py's. Scored against the float model on windows of 512 tokens: KL(float
|| quantized) per token, PPL with the paired standard error over windows, top-1 agreement. lm_head stays float
(the engine keeps it in bf16).

    xinfer tokenize --tokenizer M.gguf --no-special < test_text > ids.json
    xinfer tokenize --tokenizer M.gguf --no-special < calibration_text > calib.json
    python3 tools/fp8_floor_study.py M.gguf ids.json calib.json [--windows 16] [--rows a,b,...]
"""
import argparse
import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from fp8_rotation_study import e4m3_rows, log_softmax  # noqa: E402
from gguf_numpy_reference import GgufLlama  # noqa: E402

WINDOW = 512


def round_rel3(x):
    """x rounded to 3 mantissa bits (ties to even) with an unbounded exponent: e4m3 without its range limits."""
    m, e = np.frexp(x)  # x = m 2^e, 0.5 <= |m| < 1
    return np.ldexp(np.round(m * 16.0) / 16.0, e)


def quant_rows(x, mode):
    """Each row of x (weights: an output channel; activations: a token): e4m3 with the scale max|row| / 448,
    or rel3 (scale-free: a power-of-two scale changes nothing)."""
    return round_rel3(x).astype(np.float32) if mode == "rel3" else e4m3_rows(x)


class Quantized(GgufLlama):
    """The float model `m` (its weights shared, not copied) with its decoder linears quantized: weights per
    `wmode`, activations per `amode` (None: float), each linear's input channels smoothed by `smooth[name]`
    (x / s, w * s) when given. GgufLlama.forward runs it; lm_head stays float."""

    def __init__(self, m, wmode, amode, smooth=None):  # shares m's loaded state instead of reading the file again
        self.__dict__.update(m.__dict__)
        self.wmode, self.amode, self.smooth = wmode, amode, smooth or {}
        self.wq = {}

    def linear(self, x, name, act_blocks=False):
        if name is None:
            return x @ self.lm_head.T
        s = self.smooth.get(name)
        if name not in self.wq:
            w = self.w[name] if s is None else self.w[name] * s[None, :]
            self.wq[name] = w if self.wmode is None else quant_rows(w, self.wmode)
        if s is not None:
            x = x / s[None, :]
        if self.amode is not None:
            x = quant_rows(x, self.amode)
        return x @ self.wq[name].T

    def log_probs(self, ids):
        return log_softmax(self.forward(ids))


class Calibration(Quantized):
    """The float model, recording each linear's input: per-channel max |x| and up to `rows` sample rows."""

    def __init__(self, m, rows, rng):
        super().__init__(m, None, None)
        self.rows, self.rng, self.amax, self.sample = rows, rng, {}, {}

    def linear(self, x, name, act_blocks=False):
        if name is not None:
            self.amax[name] = np.maximum(self.amax.get(name, 0), np.abs(x).max(0))
            pick = x[self.rng.choice(len(x), min(self.rows, len(x)), replace=False)]
            self.sample[name] = pick if name not in self.sample else np.concatenate([self.sample[name], pick])
        return super().linear(x, name)


def smoothing_search(m, cal, wmode, amode):
    """Per linear, the alpha of 0, 0.1, ..., 1 whose smoothing gives the smallest output error on the calibration
    rows; returns ({name: s}, {name: alpha})."""
    smooth, alphas = {}, {}
    for name, a in cal.amax.items():
        w, x = m.w[name], cal.sample[name]
        exact = x @ w.T
        wmax = np.maximum(np.abs(w).max(0), 1e-5)
        best = None
        for alpha in np.linspace(0, 1, 11):
            s = (np.maximum(a, 1e-5) ** alpha / wmax ** (1 - alpha)).astype(np.float32)
            wq = w * s[None, :] if wmode is None else quant_rows(w * s[None, :], wmode)
            xq = x / s[None, :] if amode is None else quant_rows(x / s[None, :], amode)
            err = float(((xq @ wq.T - exact) ** 2).sum())
            if best is None or err < best[0]:
                best = (err, alpha, s)
        _, alphas[name], smooth[name] = best
    return smooth, alphas


ROWS = {
    # name: (weights, activations, smoothing searched)
    "a-e4m3": (None, "e4m3", False),
    "a-e4m3+search": (None, "e4m3", True),
    "a-rel3": (None, "rel3", False),
    "w-e4m3": ("e4m3", None, False),
    "w-e4m3+a-e4m3": ("e4m3", "e4m3", False),
    "w-e4m3+a-e4m3+search": ("e4m3", "e4m3", True),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("ids", help="token ids (JSON) of the evaluation text")
    ap.add_argument("calib", help="token ids (JSON) of the calibration text")
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--calib-windows", type=int, default=4)
    ap.add_argument("--calib-rows", type=int, default=128, help="sample rows per window and linear")
    ap.add_argument("--rows", default=",".join(ROWS))
    a = ap.parse_args()
    m = GgufLlama(a.gguf)
    ids, calib_ids = json.load(open(a.ids)), json.load(open(a.calib))
    windows = [ids[i * WINDOW:(i + 1) * WINDOW] for i in range(a.windows)]
    assert len(windows[-1]) == WINDOW, f"{a.ids} holds fewer than {a.windows} windows of {WINDOW}"
    assert len(calib_ids) >= a.calib_windows * WINDOW, f"{a.calib} holds fewer than {a.calib_windows} windows"
    cal = Calibration(m, a.calib_rows, np.random.default_rng(0))
    for i in range(a.calib_windows):
        cal.log_probs(calib_ids[i * WINDOW:(i + 1) * WINDOW])
    ref = Quantized(m, None, None)
    ref_lp = [ref.log_probs(w) for w in windows]
    print(f"{len(windows)} windows of {WINDOW}, {sum(len(w) - 1 for w in windows)} tokens scored", flush=True)
    for row in a.rows.split(","):
        wmode, amode, search = ROWS[row]
        t0 = time.time()
        smooth, alphas = smoothing_search(m, cal, wmode, amode) if search else (None, {})
        model = Quantized(m, wmode, amode, smooth)
        kl = top = n = 0.0
        deltas = []
        nll_ref = 0.0
        for win, lr in zip(windows, ref_lp):
            lq = model.log_probs(win)
            tgt = np.array(win[1:])
            rows = np.arange(len(tgt))
            kl += (np.exp(lr) * (lr - lq)).sum(-1)[:-1].sum()
            dq, dr = -lq[rows, tgt].sum(), -lr[rows, tgt].sum()
            deltas.append((dq - dr) / len(tgt))
            nll_ref += dr
            top += int((lq.argmax(-1)[:-1] == lr.argmax(-1)[:-1]).sum())
            n += len(tgt)
        d = np.array(deltas)
        se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
        hist = {f"{k:.1f}": v for k, v in zip(*np.unique(list(alphas.values()), return_counts=True))} if alphas else {}
        print(json.dumps({"row": row, "kl": round(kl / n, 5), "ppl_ref": round(float(np.exp(nll_ref / n)), 3),
                          "ppl_increase_pct": round(100 * (np.exp(d.mean()) - 1), 3),
                          "se_pct": round(100 * se, 3), "top1_pct": round(100 * top / n, 2),
                          "alphas": {k: int(v) for k, v in hist.items()}, "seconds": round(time.time() - t0)}),
              flush=True)


if __name__ == "__main__":
    main()
