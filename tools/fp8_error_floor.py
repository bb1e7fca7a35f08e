#!/usr/bin/env python3
"""FP8 (W8A8 e4m3, per-channel weights, dynamic per-token activations) error floor of the CUDA engine path
against the CPU oracle, for the greedy-flip margin of tests/gpu/engine_equivalence_test.cpp's FP8 case; with
--scheme w4a16 / bf16 the same for the W4A16 and bf16 cases (--scheme w4a16: int4 groups of 128, symmetric,
f32 scales as `xinfer quantize` writes them; --w4-weights bf16 rounds each dequantized weight to bf16, as the
dequantize + bf16 GEMM path does, exact keeps q * s, as the GEMV and the tiled GEMM's scaled sums do).

The model is the test's synthetic Llama (tests/gpu/synthetic_model.h: the same shapes and per-tensor normal
weights, drawn here by numpy from other seeds, so statistically the test's model, not its bits). Both forwards
use the same e4m3 weight codes (scale max|row| / 448, round to nearest even) and quantize every linear's input
row to e4m3 with scale max|x| / 448, as the engine and quant/int_matmul.cpp do; they differ where the CUDA
backend rounds:
  cpu   the oracle (CPU backend): f32 activations, residual and KV cache, f32 norm / embedding / lm_head weights;
  cuda  bf16 at every op output (q / k after RoPE, the KV cache, the residual stream, each linear's output),
        bf16 norm / embedding / lm_head weights; each linear quantizes the bf16 row it is given.
The test's rule (the same as bf16's gap_margin() in tests/gpu/gpu_test_util.h): at a parting, each path's token
must win in the oracle's logits l when its logit is raised by the margin. A path picks argmax(l + e), e = cuda -
cpu, so its token needs at most the "pairwise gain" max over the oracle's top-2..6 b of e[b] - e[a], a = the
oracle's top token. This prints that gain's percentiles over teacher-forced rows of random prompts (and, as a
cross-check, how often the two forwards' top tokens differ and the largest oracle lead they overturned).

Sampled tokens: the test replays the device's draw (top-p 0.9 at temperature 0.8, then an exponential race
with the request's random bits) and accepts a token some logit error of spread <= margin lets the oracle draw
(engine_equivalence_test.cpp's sampled_boost: the token raised alone, or a set of tokens lowered, grown by each
token that still beats it and, below it, by the tail that moves the top-p boundary). --draws races per row replay that rule on the CUDA path's draws and print the
spread each changed draw needs.

Usage: tools/fp8_error_floor.py [--scheme fp8|w4a16|bf16] [--w4-weights exact|bf16] [--seeds 3] [--prompts 12]
       [--len 64] [--draws 0]
Finding (session 17, 3 models x 12 prompts x 64 rows): see docs/PERF.md "Session 17"; the margin in
tests/gpu/gpu_test_util.h (kFp8GapMargin) is the max rounded up (the p99 until session 34: too tight
for a test that checks every token, see there).
"""
import argparse

import numpy as np


def bf16(x):
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def e4m3(x):
    """Round f32 values to the e4m3 grid (round to nearest even, saturate at +-448)."""
    x = np.asarray(x, np.float64)
    a = np.minimum(np.abs(x), 448.0)
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -9)))
    step = 2.0 ** (np.maximum(e, -6.0) - 3.0)  # 3 mantissa bits; subnormals below 2^-6 step 2^-9
    return (np.sign(x) * np.minimum(np.round(a / step) * step, 448.0)).astype(np.float32)


def quant_rows(x):
    """Dynamic per-token e4m3 (scale = max|x_row| / 448), dequantized: what the FP8 GEMM multiplies."""
    s = np.abs(x).max(-1, keepdims=True) / 448.0
    s = np.where(s > 0, s, 1.0).astype(np.float32)
    return e4m3(x / s) * s


def synthetic(seed, H=256, D=128, Hq=16, Hkv=4, I=512, V=512, L=4, o_std=0.02):
    """synthetic_model.h's tensors (the equivalence test's spec: 16 / 4 heads of 128, 4 layers, o_proj 0.02)."""
    r = np.random.default_rng(seed)
    n = lambda shape, std, mean=0.0: (r.standard_normal(shape) * std + mean).astype(np.float32)
    w = {'embed': n((V, H), 1.0), 'norm': n(H, 0.1, 1.0), 'lm_head': n((V, H), 0.1), 'layers': []}
    for _ in range(L):
        w['layers'].append({'in_norm': n(H, 0.1, 1.0), 'post_norm': n(H, 0.1, 1.0), 'q': n((Hq * D, H), 0.08),
                            'k': n((Hkv * D, H), 0.08), 'v': n((Hkv * D, H), 0.08), 'o': n((H, Hq * D), o_std),
                            'gate': n((I, H), 0.06), 'up': n((I, H), 0.06), 'down': n((H, I), 0.04)})
    w['dims'] = (H, D, Hq, Hkv)
    return w


def fp8_weights(w):
    """Per-channel e4m3 codes times their scales (shared by both forwards)."""
    for lw in w['layers']:
        for k in ('q', 'k', 'v', 'o', 'gate', 'up', 'down'):
            s = np.abs(lw[k]).max(1, keepdims=True) / 448.0
            lw[k] = e4m3(lw[k] / s) * s
    return w


def int4_weights(w, group=128):
    """Symmetric int4 codes per group of 128 (scale = max|group| / 7, codes -7..7), times their f32 scales."""
    for lw in w['layers']:
        for k in ('q', 'k', 'v', 'o', 'gate', 'up', 'down'):
            n, kk = lw[k].shape
            g = lw[k].reshape(n, kk // group, group)
            s = np.abs(g).max(-1, keepdims=True) / 7.0
            s = np.where(s > 0, s, 1.0).astype(np.float32)
            lw[k] = (np.clip(np.round(g / s), -7, 7) * s).reshape(n, kk).astype(np.float32)
    return w


def forward(w, ids, cuda, scheme='fp8', round_weights=False):
    R = bf16 if cuda else (lambda x: np.asarray(x, np.float32))
    H, D, Hq, Hkv = w['dims']
    T = len(ids)
    if scheme == 'fp8':
        lin = lambda x, m: R(quant_rows(R(x)) @ m.T)
    else:  # bf16 / w4a16: the linear multiplies the bf16 row by the weights (bf16-rounded where asked)
        W = bf16 if cuda and round_weights else (lambda m: m)
        lin = lambda x, m: R(R(x) @ W(m).T)

    def norm(x, g):
        return R(x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5) * R(g))

    inv = 1.0 / 10000.0 ** (np.arange(0, D, 2, dtype=np.float32) / D)
    ang = np.arange(T)[:, None] * inv[None]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]

    def rope(v):
        a, b = v[..., :D // 2], v[..., D // 2:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)

    x = R(R(w['embed'])[ids])
    for lw in w['layers']:
        h = norm(x, lw['in_norm'])
        q = R(rope(lin(h, lw['q']).reshape(T, Hq, D)))
        k = R(rope(lin(h, lw['k']).reshape(T, Hkv, D)))
        v = lin(h, lw['v']).reshape(T, Hkv, D)
        g = Hq // Hkv
        k, v = np.repeat(k, g, 1), np.repeat(v, g, 1)
        s = np.einsum('thd,shd->hts', q, k) / np.sqrt(D) + np.triu(np.full((T, T), -np.inf), 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        a = R(np.einsum('hts,shd->thd', p, v).reshape(T, Hq * D))
        x = R(x + lin(a, lw['o']))
        h = norm(x, lw['post_norm'])
        gt, up = lin(h, lw['gate']), lin(h, lw['up'])
        x = R(x + lin(R(gt / (1 + np.exp(-gt)) * up), lw['down']))
    return norm(x, w['norm']) @ R(w['lm_head']).T


def draw(l, race, temp=0.8, top_p=0.9):
    """The device sampler's token: the top-p nucleus at the temperature (tokens whose more probable ones hold
    less than top_p of the mass), then the exponential race (largest p / E) with the race's E."""
    z = np.exp((l - l.max()) / temp)
    p = z / z.sum()
    order = np.argsort(-p, kind='stable')
    above = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
    kept = order[above < top_p]
    return int(kept[np.argmax(p[kept] / race[kept])])


def sampled_spread(l, t, race, cap, steps=64):
    """The smallest spread b (grid of steps + 1 points over [0, cap]) of an error that lets the oracle's logits l
    draw t with this race (engine_equivalence_test.cpp's sampled_boost): t raised alone; or a lowered set grown
    by each winner that is not t, three ways: started with the tokens above t, the winners added alone; started
    empty or with the tokens above t, a winner less probable than t added with every token less probable than
    it (which moves the top-p boundary above it); inf past cap."""
    for j in range(steps + 1):
        b = cap * j / steps
        r = l.copy()
        r[t] += b
        if draw(r, race) == t:
            return b
        for start, tails in ((l > l[t], False), (np.zeros_like(l, bool), True), (l > l[t], True)):
            low = start.copy()
            while True:
                winner = draw(np.where(low, l - b, l), race)
                if winner == t:
                    return b
                if low[winner]:
                    break
                low[winner] = True
                if tails and l[winner] < l[t]:
                    low |= l <= l[winner]
    return np.inf


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--scheme', choices=['fp8', 'w4a16', 'bf16'], default='fp8',
                    help='fp8: W8A8 e4m3; w4a16: int4 g128 weight-only; bf16: the unquantized model')
    ap.add_argument('--w4-weights', choices=['exact', 'bf16'], default='exact',
                    help='w4a16: the CUDA path multiplies q * s exactly or rounded to bf16 (the dequantize path)')
    ap.add_argument('--seeds', type=int, default=3, help='random models of the test spec')
    ap.add_argument('--prompts', type=int, default=12, help='random prompts per model')
    ap.add_argument('--len', type=int, default=64, help='tokens per prompt (every position is a row)')
    ap.add_argument('--draws', type=int, default=0, help='sampled races per row (0: greedy only)')
    ap.add_argument('--cap', type=float, default=1.0, help='largest spread the sampled rule searches')
    args = ap.parse_args()
    prepare = {'fp8': fp8_weights, 'w4a16': int4_weights, 'bf16': lambda w: w}[args.scheme]
    round_weights = args.scheme == 'bf16' or args.w4_weights == 'bf16'
    gains, flips, overturned, rows, spreads, draws = [], 0, 0.0, 0, [], 0
    for seed in range(args.seeds):
        w = prepare(synthetic(100 + seed))
        rng = np.random.default_rng(7 + seed)
        for _ in range(args.prompts):
            ids = rng.integers(3, 512, args.len)
            cpu = forward(w, ids, False, args.scheme)
            cuda = forward(w, ids, True, args.scheme, round_weights)
            e = cuda - cpu
            for r in range(args.len):
                order = np.argsort(-cpu[r])
                a, top = order[0], order[1:6]
                gains.append(float((e[r, top] - e[r, a]).max()))
                b = int(np.argmax(cuda[r]))
                if b != a:
                    flips += 1
                    overturned = max(overturned, float(cpu[r, a] - cpu[r, b]))
                rows += 1
                for _ in range(args.draws):
                    race = rng.exponential(size=cpu.shape[1])
                    t = draw(cuda[r].astype(np.float64), race)
                    draws += 1
                    if t != draw(cpu[r].astype(np.float64), race):
                        spreads.append(sampled_spread(cpu[r].astype(np.float64), t, race, args.cap))
        print(f'model seed {100 + seed}: {rows} rows so far, pairwise gain p99 {np.percentile(gains, 99):.4f}',
              flush=True)
    g = np.array(gains)
    what = {'fp8': 'FP8 W8A8', 'w4a16': f'W4A16 g128 ({args.w4_weights} weights)', 'bf16': 'bf16'}[args.scheme]
    print(f'{what} cuda-vs-cpu pairwise gain over the oracle top-2..6, {rows} rows: median {np.median(g):.4f} '
          f'p90 {np.percentile(g, 90):.4f} p99 {np.percentile(g, 99):.4f} max {g.max():.4f}; '
          f'top-1 differs in {flips} rows ({100.0 * flips / rows:.1f}%), largest oracle lead overturned '
          f'{overturned:.4f}')
    if draws:
        sp = np.sort(np.array(spreads))
        tail = ' '.join(f'{v:.4f}' for v in sp[-5:])
        print(f'{what} sampled: {len(sp)} of {draws} draws changed; the spread each needs: p99 '
              f'{np.percentile(sp, 99) if len(sp) else 0:.4f}, largest five {tail}')


if __name__ == '__main__':
    main()
