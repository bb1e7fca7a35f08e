"""The C++ Sampler (through tests/unit/engine/sampler_probe) against a numpy reference written here from
vLLM v1's documented semantics: logit_bias, repetition/frequency/presence penalties, temperature, min_p, top_k,
top_p; empirical frequencies of 100k draws vs the reference distribution (chi-squared), logprobs vs a float64
log_softmax of the raw logits."""
import json
import subprocess

import numpy as np
import pytest

DRAWS = 100_000


@pytest.fixture(scope="module")
def probe(build_dir):
    path = build_dir / "tests" / "unit" / "engine" / "sampler_probe"
    if not path.exists():
        pytest.fail(f"{path} not built: cmake --build <build dir> --target sampler_probe")
    return path


def run_probe(probe, job):
    out = subprocess.run([str(probe)], input=json.dumps(job), capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def reference(logits, params, prompt=(), output=()):
    x = np.asarray(logits, dtype=np.float64).copy()
    v = x.size
    for tok, bias in params.get("logit_bias", {}).items():
        x[int(tok)] += bias
    r = params.get("repetition_penalty", 1.0)
    seen = np.zeros(v, dtype=bool)
    seen[list(prompt) + list(output)] = True
    x = np.where(seen, np.where(x > 0, x / r, x * r), x)
    counts = np.bincount(np.asarray(output, dtype=np.int64), minlength=v)
    x -= params.get("frequency_penalty", 0.0) * counts + params.get("presence_penalty", 0.0) * (counts > 0)
    t = params.get("temperature", 1.0)
    if t < 1e-5:
        q = np.zeros(v)
        q[np.argmax(x)] = 1.0
        return q
    p = np.exp(x / t - np.max(x / t))
    p /= p.sum()
    keep = np.ones(v, dtype=bool)
    if params.get("min_p", 0.0) > 0:
        keep &= p >= params["min_p"] * p.max()
    k = params.get("top_k", 0)
    if 0 < k < v:
        keep &= x >= np.sort(x)[::-1][k - 1]
    q = np.where(keep, p, 0.0)
    q /= q.sum()
    top_p = params.get("top_p", 1.0)
    if top_p < 1.0:
        order = np.lexsort((np.arange(v), -q))  # most likely first, ties -> lower id
        before = np.cumsum(q[order]) - q[order]
        q[order[before >= top_p]] = 0.0
        q /= q.sum()
    return q


def chi_squared_ok(counts, q, draws):
    counts = np.asarray(counts, dtype=np.float64)
    assert counts[q == 0].sum() == 0, f"drew tokens with probability 0: {np.nonzero((q == 0) & (counts > 0))}"
    e = q * draws
    big = e >= 5
    stat = np.sum((counts[big] - e[big]) ** 2 / e[big])
    buckets = int(big.sum())
    small_e, small_o = e[~big & (q > 0)].sum(), counts[~big & (q > 0)].sum()
    if small_e > 0:
        stat += (small_o - small_e) ** 2 / small_e
        buckets += 1
    df = max(1, buckets - 1)
    return stat < df + 6 * np.sqrt(2 * df) + 10, stat, df


RNG = np.random.default_rng(2024)
LOGITS = (RNG.standard_normal(64) * 2.0).astype(np.float32).tolist()
PROMPT = [1, 2, 3, 5, 8]
OUTPUT = [8, 8, 13, 21, 3, 40]

CASES = [
    {"temperature": 1.0},
    {"temperature": 0.6, "top_k": 10},
    {"temperature": 1.2, "top_p": 0.7},
    {"temperature": 1.0, "min_p": 0.1},
    {"temperature": 0.9, "top_k": 20, "top_p": 0.85, "min_p": 0.02},
    {"temperature": 1.0, "repetition_penalty": 1.8, "presence_penalty": 0.7, "frequency_penalty": 0.4},
    {"temperature": 0.8, "top_p": 0.9, "logit_bias": {"7": 3.5, "11": -100.0}, "repetition_penalty": 0.7},
    {"temperature": 1.5, "frequency_penalty": -1.0, "top_k": 30},
]


@pytest.mark.parametrize("params", CASES, ids=[json.dumps(c, sort_keys=True) for c in CASES])
def test_frequencies_match_numpy_reference(probe, params):
    got = run_probe(probe, {"logits": LOGITS, "prompt": PROMPT, "output": OUTPUT, "draws": DRAWS, "seed": 7,
                            "params": params})
    q = reference(LOGITS, params, PROMPT, OUTPUT)
    ok, stat, df = chi_squared_ok(got["counts"], q, DRAWS)
    assert ok, f"chi2 {stat:.1f} with df {df}"
    # Power check: the same counts reject the plain softmax of the raw logits (every token possible there).
    if params != {"temperature": 1.0}:
        assert not chi_squared_ok(got["counts"], reference(LOGITS, {"temperature": 1.0}), DRAWS)[0]


def test_greedy_with_penalties_is_numpy_argmax(probe):
    for seed in range(20):
        logits = (np.random.default_rng(seed).standard_normal(1000) * 3).astype(np.float32).tolist()
        params = {"temperature": 0.0, "repetition_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.3}
        prompt = [int(i) for i in np.argsort(logits)[-3:]]  # penalize the current favourites
        output = [int(np.argmax(logits))] * 3
        got = run_probe(probe, {"logits": logits, "prompt": prompt, "output": output, "params": params})
        assert got["token"] == int(np.argmax(reference(logits, params, prompt, output)))


def test_logprobs_are_float64_log_softmax_of_raw_logits(probe):
    logits = (np.random.default_rng(5).standard_normal(32000) * 4).astype(np.float32)
    params = {"temperature": 0.7, "top_p": 0.9, "logprobs": 8, "repetition_penalty": 1.5,
              "logit_bias": {str(int(np.argmax(logits))): -20.0}}
    got = run_probe(probe, {"logits": logits.tolist(), "prompt": [1, 2], "params": params, "seed": 3})
    x = logits.astype(np.float64)
    lsm = x - (x.max() + np.log(np.exp(x - x.max()).sum()))
    assert got["logprob"] == pytest.approx(lsm[got["token"]], abs=1e-5)
    ids = [i for i, _ in got["top_logprobs"]]
    assert ids == list(np.argsort(-x, kind="stable")[:8])
    assert [lp for _, lp in got["top_logprobs"]] == pytest.approx(list(lsm[ids]), abs=1e-5)


def test_invalid_params_are_rejected_with_message(probe):
    got = run_probe(probe, {"logits": LOGITS, "params": {"top_p": 1.5}})
    assert got["error"] == "top_p must be in (0, 1], got 1.5"
    got = run_probe(probe, {"logits": LOGITS, "params": {"logit_bias": {"64": 1.0}}})
    assert got["error"] == "logit_bias token id 64 is out of vocabulary [0, 64)"
