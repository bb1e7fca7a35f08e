#!/usr/bin/env python3
"""GPTQ reference in numpy, written from the paper (Frantar et al., 2022, "GPTQ: Accurate Post-Training
Quantization for Generative Pre-trained Transformers", Algorithm 1 and Section 3), and the golden cases that
tests/unit/compress/gptq_reference_test.cpp checks `compress::quantize_gptq` against.

Algorithm 1 (lazy batch updates, Cholesky form), W [n, k], H = 2 X^T X / m [k, k], block size B:
    dead inputs: H_jj == 0 -> H_jj = 1, W[:, j] = 0
    H += damp * mean(diag H) * I                      (Section 3, "Step 3: Cholesky reformulation")
    U = Cholesky(H^-1)^T (upper, H^-1 = U^T U)
    for i = 0, B, 2B, ...:
        for j = i .. i + B - 1:
            Q[:, j] = quant(W[:, j])
            E[:, j - i] = (W[:, j] - Q[:, j]) / U_jj
            W[:, j:i+B] -= E[:, j - i] U_j,j:i+B
        W[:, i+B:] -= E U_i:i+B,i+B:
Grouping (the paper's "fine-grained grouping"): a group's scale/zero from the current (error-updated) W
when its first column is reached. Act-order ("desc_act", GPTQ's repository): columns in decreasing H_jj,
with either static groups (parameters taken from the original W, original column order: GPTQ's
--static-groups, llm-compressor's actorder "weight") or groups of consecutive columns in the permuted
order (AutoGPTQ's desc_act, actorder "group"), recorded as g_idx[col] = position in the order // gs. The factor 2/m and the
positive scale of H do not change the result (damp is relative, U enters only as ratios).

Quantizer (compress/weight_quantizer.h): symmetric scale = max|W_block| / qmax, q = clamp(round(w / s),
-qmax, qmax); asymmetric lo = min(W_block, 0), hi = max(W_block, 0), s = (hi - lo) / (2^b - 1),
z = clamp(qmin - round(lo / s)), q = clamp(round(w / s) + z, qmin, qmax). Rounding half to even.
MSE clipping (GPTQ's Quantizer.find_params with mse=True: grid 100, maxshrink 0.8): per block row, the range
is shrunk to p lo, p hi for p = 1 - i / 100, i = 0 .. 79, the quantizer above built from the shrunk range,
and the p with the smallest error kept (strictly smaller: the first, largest p wins ties). GPTQ's error is
sum |w - deq|^2.4; ours, as compress/weight_quantizer.h defines it, sum_c H_cc (w_c - deq_c)^2 with the
Hessian's undamped diagonal (after the dead-input fix).

The weight updates run in float32 (as GPTQ's torch code does), the Cholesky factors in float64 then cast.
Usage: python3 tools/gptq_numpy_reference.py tests/golden/gptq/cases.json
"""
import json
import sys

import numpy as np


def block_params(w_block, bits, symmetric, col_weights=None):
    lo = np.minimum(w_block.min(axis=1), 0).astype(np.float32)
    hi = np.maximum(w_block.max(axis=1), 0).astype(np.float32)
    if col_weights is None:
        return range_params(lo, hi, bits, symmetric)
    best_err = np.full(lo.shape, np.inf)
    best_s, best_z = range_params(lo, hi, bits, symmetric)
    for i in range(80):
        p = np.float32(1) - np.float32(i) / np.float32(100)
        s, z = range_params((p * lo).astype(np.float32), (p * hi).astype(np.float32), bits, symmetric)
        _, deq = quant(w_block, s[:, None], z[:, None], bits, symmetric)
        d = w_block.astype(np.float64) - deq.astype(np.float64)
        err = (d * d * col_weights[None, :]).sum(axis=1)
        better = err < best_err
        best_err = np.where(better, err, best_err)
        best_s = np.where(better, s, best_s)
        best_z = np.where(better, z, best_z)
    return best_s, best_z


def range_params(lo, hi, bits, symmetric):
    qmax = 2 ** (bits - 1) - 1
    qmin = -(2 ** (bits - 1))
    lo = np.minimum(lo, 0).astype(np.float32)
    hi = np.maximum(hi, 0).astype(np.float32)
    if symmetric:
        amax = np.maximum(-lo, hi)
        scale = np.where(amax > 0, amax / np.float32(qmax), np.float32(1)).astype(np.float32)
        zero = np.zeros_like(scale, dtype=np.int64)
    else:
        rng = hi - lo
        scale = np.where(rng > 0, rng / np.float32(2 ** bits - 1), np.float32(1)).astype(np.float32)
        zero = np.clip(qmin - np.round(lo / scale).astype(np.int64), qmin, qmax)
    return scale, zero


def quant(col, scale, zero, bits, symmetric):
    qmax = 2 ** (bits - 1) - 1
    lo = -qmax if symmetric else -(2 ** (bits - 1))
    q = np.clip(np.round(col / scale).astype(np.int64) + zero, lo, qmax)
    return q, (scale * (q - zero).astype(np.float32)).astype(np.float32)


def gptq(w, h, bits, group, symmetric, block, damp, act_order, static_groups=True, mse=False):
    n, k = w.shape
    w = w.astype(np.float32).copy()
    h = h.astype(np.float64).copy()
    dead = np.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    diag = np.diag(h).copy()
    cw = (lambda cols: diag[cols]) if mse else (lambda cols: None)
    gs = group if group > 0 else k
    ngroups = (k + gs - 1) // gs
    scales = np.zeros((n, ngroups), np.float32)
    zeros = np.zeros((n, ngroups), np.int64)
    static = group <= 0 or (act_order and static_groups)
    if static:  # parameters up front from W (dead columns zeroed)
        for g in range(ngroups):
            scales[:, g], zeros[:, g] = block_params(w[:, g * gs:(g + 1) * gs], bits, symmetric,
                                                     cw(np.arange(g * gs, min(k, (g + 1) * gs))))
    perm = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(k)
    hp = h[np.ix_(perm, perm)]
    hp[np.diag_indices(k)] += damp * np.mean(np.diag(hp))
    hinv = np.linalg.inv(hp)
    u = np.linalg.cholesky(hinv).T.astype(np.float32)  # upper, hinv = u^T u
    # act-order without static groups (desc_act / actorder "group"): groups of consecutive permuted
    # columns, g_idx[col] = position of col in the permutation // gs
    g_idx = np.arange(k) // gs
    if act_order and not static:
        g_idx = np.empty(k, np.int64)
        g_idx[perm] = np.arange(k) // gs
    wp = w[:, perm].copy()
    q = np.zeros((n, k), np.int64)
    for i1 in range(0, k, block):
        i2 = min(k, i1 + block)
        err = np.zeros((n, i2 - i1), np.float32)
        for j in range(i1, i2):
            orig = perm[j]
            g = g_idx[orig]
            if not static and j % gs == 0:
                scales[:, g], zeros[:, g] = block_params(wp[:, j:j + gs], bits, symmetric, cw(perm[j:j + gs]))
            q[:, orig], deq = quant(wp[:, j], scales[:, g], zeros[:, g], bits, symmetric)
            e = (wp[:, j] - deq) / u[j, j]
            err[:, j - i1] = e
            wp[:, j:i2] -= np.outer(e, u[j, j:i2]).astype(np.float32)
        wp[:, i2:] -= (err @ u[i1:i2, i2:]).astype(np.float32)
    return q, scales, zeros, g_idx


def main():
    rng = np.random.default_rng(2022)
    n, k, m = 8, 64, 256
    basis = rng.standard_normal((6, k))
    x = (rng.standard_normal((m, 6)) * 0.5) @ basis + 0.3 * rng.standard_normal((m, k))
    x[:, ::11] *= 5.0  # outlier channels
    x[:, 7] = 0.0      # a dead input
    h = 2.0 * x.T @ x / m
    w = (0.05 * rng.standard_normal((n, k))).astype(np.float32)
    cases = []
    for bits, group, symmetric, block, act_order, damp, static_groups, mse in [
            (4, 0, True, 32, False, 0.01, True, False),    # per channel, 2 lazy blocks
            (4, 16, True, 48, False, 0.01, True, False),   # groups inside and across blocks
            (4, 16, False, 8, False, 0.1, True, False),    # zero points, larger damp
            (4, 16, True, 32, True, 0.01, True, False),    # act-order, static groups
            (4, 16, True, 24, True, 0.01, False, False),   # act-order, groups in act order (g_idx)
            (8, 0, True, 64, False, 0.01, True, False),    # int8 channel, one block covering all columns
            (4, 16, True, 48, False, 0.01, True, True),    # MSE clip: groups from the updated W
            (4, 16, True, 32, True, 0.01, True, True),     # MSE clip, act-order, static groups
            (4, 16, False, 24, True, 0.01, False, True),   # MSE clip, zero points, g_idx groups
            (4, 0, True, 32, False, 0.01, True, True)]:    # MSE clip per channel
        q, s, z, g_idx = gptq(w, h, bits, group, symmetric, block, damp, act_order, static_groups, mse)
        deq = np.zeros_like(w)
        for c in range(k):
            deq[:, c] = s[:, g_idx[c]] * (q[:, c] - z[:, g_idx[c]])
        d = (w - deq).astype(np.float64)
        out_err = float(np.einsum("ri,ij,rj->", d, h, d))  # sum_r d_r H d_r^T
        cases.append({"bits": bits, "group_size": group, "symmetric": symmetric, "block_size": block,
                      "act_order": act_order, "static_groups": static_groups, "mse_clip": mse,
                      "g_idx": g_idx.tolist() if act_order and not static_groups else [],
                      "damp": damp, "q": q.flatten().tolist(),
                      "scales": s.flatten().tolist(), "zeros": z.flatten().tolist(), "output_error": out_err})
    out = {"n": n, "k": k, "m": m, "w": w.flatten().tolist(), "hessian": h.flatten().tolist(),
           "cases": cases,
           "made_by": "tools/gptq_numpy_reference.py (numpy " + np.__version__ + ")"}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
