"""`xinfer eval ppl` against a float64 numpy reference.

The reference is written here from the published definitions, independent of xinfer: token ids from the
Hugging Face `tokenizers` package (Tokenizer.encode(text), special tokens added as by default), a float64
Llama forward (transformers' modeling_llama semantics: RMSNorm, rotate-half rope with default or llama3
frequencies, GQA, SwiGLU, tied or separate lm_head; tools/numpy_llama.py, shared with the quantize reference)
on the safetensors weights (bf16 widened exactly), and the
sliding-window loop of transformers' perplexity guide: windows of ctx tokens starting every stride tokens,
the labels of tokens an earlier window scored set to -100, labels shifted by one inside each window, the
loop stopping at the first window that reaches the end; ppl = exp(sum of nll / number of scored labels).

Models: the bundled models/xinfer-tiny-shakespeare, stories260K (../shared, converted by
tools/convert_llama2c.py) and tests/golden/llama_gqa given stories260K's tokenizer (same vocabulary size, 512):
a second model of the same tokenizer for --reference.
"""
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import numpy_llama  # noqa: E402  the float64 reader and Llama forward shared with quantize_numpy_reference
BUNDLED = ROOT / "models" / "xinfer-tiny-shakespeare"
GQA = ROOT / "tests" / "golden" / "llama_gqa"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json"]
REL = 1e-4


# --------------------------------------------------------------------------------------------------
# Reference


read_safetensors = numpy_llama.read_float_safetensors  # F32 / F16 / BF16 only: anything else is refused


class Llama:
    def __init__(self, model_dir: pathlib.Path):
        self.c = json.loads((model_dir / "config.json").read_text())
        self.w = read_safetensors(model_dir / "model.safetensors")

    def forward(self, ids) -> np.ndarray:
        """ids [T] at positions 0..T-1 -> logits [T, V], float64."""
        return numpy_llama.llama_forward(self.c, self.w, ids, kv=getattr(self, "kv", None))


def e4m3(x: np.ndarray) -> np.ndarray:
    """The nearest OCP FP8 E4M3FN value (3 mantissa bits, exponent bias 7, subnormals below 2^-6 in steps of
    2^-9, largest finite 448), ties to even, saturating at +-448: from the OCP 8-bit floating point spec."""
    a = np.abs(x)
    e = np.floor(np.log2(np.maximum(a, 2.0 ** -6)))  # binade; the subnormals share the step of 2^-6's
    step = 2.0 ** (e - 3)
    return np.sign(x) * np.minimum(np.round(a / step) * step, 448.0)  # np.round: half to even


class Fp8KvLlama(Llama):
    """The reference with an FP8 KV cache: attention reads e4m3(k / scale) * scale and e4m3(v / scale) * scale.
    rotated: the cache holds k' = H k 2^-ceil(log2(d)/2) and attention scores q' = H q 2^-floor(log2(d)/2) against
    it; q' . e4m3(k') = q . k_eff with k_eff = 2^-floor(log2(d)/2) H^T e4m3(k') (H symmetric), which is what this
    reference gives attention instead of k."""

    def __init__(self, model_dir: pathlib.Path, scale: float, rotated: bool = False):
        super().__init__(model_dir)
        h, sk, sq = numpy_llama.kv_rotation(self.c.get("head_dim") or self.c["hidden_size"] // self.c["num_attention_heads"])

        def kv(k, v, layer):
            if rotated:
                k = sq * (e4m3((k @ h.T) * sk / scale) * scale) @ h  # rows: k' = H k; back: H^T k'
            else:
                k = e4m3(k / scale) * scale
            return k, e4m3(v / scale) * scale
        self.kv = kv


def log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def guide_ppl(model: Llama, ids: list[int], ctx: int, stride: int, reference: Llama | None = None) -> dict:
    """The perplexity guide's loop; with `reference`: mean KL(p_ref || p) and top-1 agreement on the same
    scored labels."""
    seq_len, prev_end, nll_sum, n_scored, windows, kl_sum, agree, ref_nll = len(ids), 0, 0.0, 0, 0, 0.0, 0, 0.0
    window_nll, window_ref_nll = [], []  # mean NLL of each window's scored tokens
    for begin in range(0, seq_len, stride):
        end = min(begin + ctx, seq_len)
        trg_len = end - prev_end
        window = ids[begin:end]
        labels = np.array(window)
        labels[:-trg_len] = -100
        windows += 1
        lp = log_softmax(model.forward(window))[:-1]  # row i predicts labels[i + 1]
        shifted = labels[1:]
        rows = np.nonzero(shifted != -100)[0]
        nll_sum -= lp[rows, shifted[rows]].sum()
        n_scored += len(rows)
        window_nll.append(-lp[rows, shifted[rows]].mean())
        if reference is not None and len(rows):
            lr = log_softmax(reference.forward(window))[:-1]
            kl_sum += (np.exp(lr[rows]) * (lr[rows] - lp[rows])).sum()
            agree += int((lr[rows].argmax(-1) == lp[rows].argmax(-1)).sum())
            ref_nll -= lr[rows, shifted[rows]].sum()
            window_ref_nll.append(-lr[rows, shifted[rows]].mean())
        prev_end = end
        if end == seq_len:
            break
    out = dict(ppl=math.exp(nll_sum / n_scored), nll_sum=nll_sum, tokens_scored=n_scored, windows=windows,
               window_mean_nll=window_nll)
    if reference is not None:
        out.update(kl=kl_sum / n_scored, top1=agree / n_scored, reference_ppl=math.exp(ref_nll / n_scored),
                   window_ref_mean_nll=window_ref_nll)
    return out


def test_reference_forward_matches_transformers_golden():
    """The numpy forward above against transformers' logits (tests/golden/llama_gqa: llama3 rope, GQA)."""
    from safetensors.numpy import load_file
    g = load_file(str(GQA / "golden.safetensors"))
    ids = g["prompt_2"].tolist() + g["greedy_2"].tolist()[:19]  # the 20 greedy rows follow the prompt's last
    logits = Llama(GQA).forward(ids)
    np.testing.assert_allclose(logits[:33], g["logits_2"], atol=2e-5)
    np.testing.assert_allclose(logits[32:], g["greedy_logits_2"], atol=2e-5)


# --------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def shakespeare(shared_dir) -> str:
    return (shared_dir / "corpora/tinyshakespeare/input.txt").read_text()[:20000]


@pytest.fixture(scope="module")
def gqa_dir(tmp_path_factory, stories260k_dir) -> pathlib.Path:
    """tests/golden/llama_gqa (random weights, vocab 512) with stories260K's tokenizer."""
    out = tmp_path_factory.mktemp("gqa") / "llama_gqa"
    out.mkdir()
    for f in ["config.json", "model.safetensors"]:
        shutil.copy(GQA / f, out / f)
    for f in TOKENIZER_FILES:
        shutil.copy(stories260k_dir / f, out / f)
    return out


def eval_ppl(xinfer_bin, *args, timeout=300):
    r = subprocess.run([str(xinfer_bin), "eval", "ppl", "--threads", "2", "--no-progress", *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    return r


def eval_json(xinfer_bin, tmp_path, text, *args):
    path = tmp_path / "text.txt"
    path.write_text(text)
    r = eval_ppl(xinfer_bin, "--text", path, "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def hf_ids(model_dir: pathlib.Path, text: str) -> list[int]:
    return Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(text).ids


def assert_matches(got: dict, want: dict, ctx: int, stride: int, rel: float = REL):
    assert (got["tokens_scored"], got["windows"], got["ctx"], got["stride"]) == \
        (want["tokens_scored"], want["windows"], ctx, stride)
    assert got["ppl"] == pytest.approx(want["ppl"], rel=rel)
    assert got["nll_sum"] == pytest.approx(want["nll_sum"], rel=rel)


# --------------------------------------------------------------------------------------------------
# Perplexity


@pytest.mark.parametrize("ctx, stride", [(128, 48), (128, 128), (100, 99)])
def test_bundled_model_matches_reference(xinfer_bin, tmp_path, shakespeare, ctx, stride):
    ids = hf_ids(BUNDLED, shakespeare)[:300]
    assert ids[0] == 0  # the bundled tokenizer prepends <|begin_of_text|>
    want = guide_ppl(Llama(BUNDLED), ids, ctx, stride)
    got = eval_json(xinfer_bin, tmp_path, shakespeare, "--model", BUNDLED, "--ctx", ctx, "--stride", stride,
                    "--max-tokens", 300, "--prefill-chunk", 40)  # windows span several prefill chunks
    assert_matches(got, want, ctx, stride)
    assert got["bos_prepended"] and got["tokens"] == 300 and got["text_tokens"] > 300
    if stride < ctx:
        assert got["tokens_scored"] == 299  # every token but the first, once
    else:
        assert got["tokens_scored"] == 300 - got["windows"]


def test_text_shorter_than_ctx_is_one_window(xinfer_bin, tmp_path, shakespeare):
    text = shakespeare[:400]
    ids = hf_ids(BUNDLED, text)
    assert len(ids) < 512
    want = guide_ppl(Llama(BUNDLED), ids, 512, 512)
    got = eval_json(xinfer_bin, tmp_path, text, "--model", BUNDLED)  # ctx: the model's limit 512 (< 1024)
    assert_matches(got, want, 512, 512)
    assert got["windows"] == 1 and got["tokens_scored"] == len(ids) - 1


def test_without_special_tokens_no_bos(xinfer_bin, tmp_path, shakespeare):
    text = shakespeare[:300]
    ids = Tokenizer.from_file(str(BUNDLED / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    want = guide_ppl(Llama(BUNDLED), ids, 64, 32)
    got = eval_json(xinfer_bin, tmp_path, text, "--model", BUNDLED, "--ctx", 64, "--stride", 32,
                    "--no-add-special-tokens")
    assert_matches(got, want, 64, 32)
    assert not got["bos_prepended"] and got["tokens"] == len(ids)


def test_stories260k_and_llama3_rope_model(xinfer_bin, tmp_path, shakespeare, stories260k_dir, gqa_dir):
    text = shakespeare[:1500]
    ids = hf_ids(stories260k_dir, text)[:400]
    for model_dir, ctx, stride in [(stories260k_dir, 256, 100), (gqa_dir, 200, 200)]:
        want = guide_ppl(Llama(model_dir), ids, ctx, stride)
        got = eval_json(xinfer_bin, tmp_path, text, "--model", model_dir, "--ctx", ctx, "--stride", stride,
                        "--max-tokens", 400)
        assert_matches(got, want, ctx, stride)


# --------------------------------------------------------------------------------------------------
# --reference


def test_reference_itself_gives_zero_kl(xinfer_bin, tmp_path, shakespeare):
    got = eval_json(xinfer_bin, tmp_path, shakespeare[:2000], "--model", BUNDLED, "--reference", BUNDLED,
                    "--ctx", 96, "--stride", 64, "--max-tokens", 200)
    assert got["kl"] == pytest.approx(0.0, abs=1e-12) and got["top1"] == 1.0
    assert got["tokens_scored"] == 199


def test_reference_other_model_same_tokenizer(xinfer_bin, tmp_path, shakespeare, stories260k_dir, gqa_dir):
    text = shakespeare[:1200]
    ids = hf_ids(stories260k_dir, text)[:300]
    want = guide_ppl(Llama(gqa_dir), ids, 160, 70, reference=Llama(stories260k_dir))
    got = eval_json(xinfer_bin, tmp_path, text, "--model", gqa_dir, "--reference", stories260k_dir,
                    "--ctx", 160, "--stride", 70, "--max-tokens", 300)
    assert_matches(got, want, 160, 70)
    assert want["kl"] > 0.5  # a random model against a trained one: far apart
    assert got["kl"] == pytest.approx(want["kl"], rel=REL)
    assert got["reference_ppl"] == pytest.approx(want["reference_ppl"], rel=REL)
    n = got["tokens_scored"]
    assert abs(got["top1"] - want["top1"]) <= 1.0 / n + 1e-12  # one near-tie may flip between f32 and f64
    # Per window, and the PPL increase over the reference with its paired standard error over the windows.
    assert got["window_mean_nll"] == pytest.approx(want["window_mean_nll"], rel=REL)
    assert got["window_ref_mean_nll"] == pytest.approx(want["window_ref_mean_nll"], rel=REL)
    d = np.array(want["window_mean_nll"]) - np.array(want["window_ref_mean_nll"])
    assert got["ppl_increase_percent"] == pytest.approx(100 * (want["ppl"] / want["reference_ppl"] - 1), rel=1e-6)
    se = 100 * np.exp(d.mean()) * d.std(ddof=1) / np.sqrt(len(d))
    assert got["ppl_increase_se_percent"] == pytest.approx(se, rel=1e-6)


def test_scoring_threads_do_not_change_the_figures(xinfer_bin, tmp_path, shakespeare, stories260k_dir, gqa_dir):
    """The rows of a chunk are scored in parallel and added in order: one scoring thread or several give the
    same sums to the bit. (The backend keeps 2 threads: OpenBLAS's sgemm may round differently with another
    thread count on some CPUs, seen on an AMD EPYC, which says nothing about the scoring.)"""
    text = shakespeare[:1200]
    runs = []
    for threads in (1, 2):
        path = tmp_path / "text.txt"
        path.write_text(text)
        r = subprocess.run([str(xinfer_bin), "eval", "ppl", "--threads", "2", "--scoring-threads", str(threads),
                            "--no-progress", "--json",
                            "--text", str(path), "--model", str(gqa_dir), "--reference", str(stories260k_dir),
                            "--ctx", "160", "--stride", "70", "--max-tokens", "300"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout))
    for k in ["nll_sum", "kl", "top1", "reference_ppl", "window_mean_nll", "window_ref_mean_nll"]:
        assert runs[0][k] == runs[1][k], k


@pytest.mark.parametrize("scale,rotation", [(1.0, "none"), (0.03, "none"), (1.0, "hadamard"), (0.03, "auto")])
def test_fp8_kv_cache_matches_an_e4m3_emulation(xinfer_bin, tmp_path, shakespeare, scale, rotation):
    """--kv-cache-dtype fp8 (docs/kv_cache.md) against the float64 reference whose attention reads the
    e4m3-rounded rope'd k (Hadamard-rotated before rounding unless --kv-cache-rotation none; auto rotates the
    bundled model's head_dim 32) and v (OCP E4M3FN from its definition, above): ppl, and KL / top-1 against the
    model's own float cache as --reference (the reference's ppl is the float model's)."""
    text = shakespeare[:1500]
    ids = hf_ids(BUNDLED, text)[:300]
    want = guide_ppl(Fp8KvLlama(BUNDLED, scale, rotated=rotation != "none"), ids, 128, 64, reference=Llama(BUNDLED))
    plain = guide_ppl(Llama(BUNDLED), ids, 128, 64)
    got = eval_json(xinfer_bin, tmp_path, text, "--model", BUNDLED, "--reference", BUNDLED, "--ctx", 128,
                    "--stride", 64, "--max-tokens", 300, "--kv-cache-dtype", "fp8", "--kv-cache-scale", scale,
                    "--kv-cache-rotation", rotation)
    # A cached value whose f32 (xinfer) and f64 (reference) forms straddle an e4m3 rounding boundary rounds one
    # step apart (6-12% of the value), which moves this tiny model's PPL by ~1e-4. At 0.03 / auto, 3 of the
    # reference's 1.0M cached values lie within 1e-6 steps of a midpoint, and the PPL measured -1.5e-4 off on an
    # Intel (AVX-512) host, whose OpenBLAS sums differ from the AMD host's where all four cases passed 1e-4 (the
    # other three are within 4.1e-5 here). The KL against the float cache below is the sharp check that the e4m3
    # rounding happens (zero without it).
    assert_matches(got, want, 128, 64, rel=3e-4)
    assert got["reference_ppl"] == pytest.approx(plain["ppl"], rel=REL)
    assert got["kl"] == pytest.approx(want["kl"], rel=1e-2, abs=1e-6)  # a small difference of two models
    assert want["kl"] > 0 and abs(want["ppl"] / plain["ppl"] - 1) < 0.05  # e4m3 moves it, a little
    n = got["tokens_scored"]
    assert abs(got["top1"] - want["top1"]) <= 2.0 / n + 1e-12


def test_human_summary(xinfer_bin, tmp_path, shakespeare):
    path = tmp_path / "t.txt"
    path.write_text(shakespeare[:500])
    r = eval_ppl(xinfer_bin, "--model", BUNDLED, "--text", path, "--reference", BUNDLED, "--ctx", 64)
    assert r.returncode == 0, r.stderr
    assert "ppl " in r.stdout and "BOS prepended" in r.stdout and "top-1 agreement 100.0000%" in r.stdout


# --------------------------------------------------------------------------------------------------
# Bad input


def test_mismatching_tokenizers_are_refused(xinfer_bin, tmp_path, shakespeare, gqa_dir):
    path = tmp_path / "t.txt"
    path.write_text(shakespeare[:500])
    # vocab sizes differ (4096 vs 512)
    r = eval_ppl(xinfer_bin, "--model", BUNDLED, "--text", path, "--reference", gqa_dir)
    assert r.returncode != 0 and "same tokenizer" in r.stderr and "Check failed" not in r.stderr
    # same size, two tokens swapped: ids differ
    other = tmp_path / "swapped"
    shutil.copytree(gqa_dir, other)
    tj = json.loads((other / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    a, b = [t for t, i in vocab.items() if i in (300, 301)]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tj))
    r = eval_ppl(xinfer_bin, "--model", gqa_dir, "--text", path, "--reference", other)
    assert r.returncode != 0 and "same tokenizer" in r.stderr and "token 300" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--text", "{text}"], "--model is required"),
    (["--model", "{model}"], "--text is required"),
    (["--model", "{model}", "--text", "/nonexistent/text.txt"], "cannot open --text"),
    (["--model", "{model}", "--text", "{empty}"], "is empty"),
    (["--model", "/nonexistent/model", "--text", "{text}"], "does not exist"),
    (["--model", "{model}", "--text", "{text}", "--ctx", "1024"], "exceeds the context limit 512"),
    (["--model", "{model}", "--text", "{text}", "--ctx", "64", "--stride", "65"], "--stride must be in [1, ctx = 64]"),
    (["--model", "{model}", "--text", "{text}", "--ctx", "64", "--stride", "0"], "--stride must be in"),
    (["--model", "{model}", "--text", "{text}", "--ctx", "64", "--stride", "-3"], "--stride must be in"),
    (["--model", "{model}", "--text", "{text}", "--ctx", "1"], "--ctx must be at least 2"),
    (["--model", "{model}", "--text", "{text}", "--max-tokens", "1"], "nothing to score"),
    (["--model", "{model}", "--text", "{text}", "--backend", "tpu"], "tpu"),
])
def test_bad_input_gives_clear_error(xinfer_bin, tmp_path, args, message):
    (tmp_path / "text.txt").write_text("To be, or not to be, that is the question.")
    (tmp_path / "empty.txt").write_text("")
    subst = {"{model}": str(BUNDLED), "{text}": str(tmp_path / "text.txt"), "{empty}": str(tmp_path / "empty.txt")}
    r = eval_ppl(xinfer_bin, *[subst.get(a, a) for a in args])
    assert r.returncode != 0
    assert message in r.stderr
    assert "Check failed" not in r.stderr


def test_unknown_task(xinfer_bin):
    r = subprocess.run([str(xinfer_bin), "eval", "mmlu"], capture_output=True, text=True)
    assert r.returncode != 0 and "unknown task 'mmlu'" in r.stderr


# --------------------------------------------------------------------------------------------------
# GGUF (another helper's loader): a smoke run when the SmolLM2 file is there


GGUF = pathlib.Path(os.path.expanduser("~/.cache/xinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.mark.skipif(not GGUF.exists(), reason=f"{GGUF} not downloaded")
def test_gguf_smoke(xinfer_bin, tmp_path, shakespeare):
    got = eval_json(xinfer_bin, tmp_path, shakespeare[:3000], "--model", GGUF, "--ctx", 128, "--max-tokens", 256)
    assert got["tokens"] == 256 and got["windows"] == 2 and got["tokens_scored"] == 254
    assert 1.0 < got["ppl"] < 1000.0
