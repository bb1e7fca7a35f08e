"""GGUF models end to end on the CPU, against references written by others:

- SmolLM2-135M-Instruct (scripts/fetch_smollm2.sh): tokenizer ids identical to llama.cpp's (the goldens of
  tests/golden/smollm2, made with llama-cpp-python) on the 10,803 corpus items; prompt logits of the
  weights dequantized at load equal a float32 numpy forward over the `gguf` package's dequantized weights
  (tools/gguf_numpy_reference.py), and so do its 32 greedy tokens; the quantized kernels' logits stay close
  to that float reference and to llama.cpp's.
- tiny random GGUF models written by the `gguf` package's GGUFWriter (tools/make_gguf_fixtures.py) in every
  block type gguf.quants.quantize writes: same checks against numpy; and bad input (truncated files, an
  unknown tensor type, another architecture, a tensor of the wrong shape) fails with a clear error naming
  the file, the tensor and the field.
"""
import concurrent.futures
import gzip
import hashlib
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import load_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests" / "python"))
import make_gguf_fixtures  # noqa: E402
import tokenizer_corpus  # noqa: E402
from gguf_numpy_reference import GgufLlama  # noqa: E402

GOLDEN = ROOT / "tests" / "golden" / "smollm2"


@pytest.fixture(scope="module")
def smollm2():
    r = subprocess.run(["bash", str(ROOT / "scripts/fetch_smollm2.sh")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return pathlib.Path(r.stdout.strip())


@pytest.fixture(scope="module")
def smollm2_ref(smollm2):
    return GgufLlama(str(smollm2))


@pytest.fixture(scope="module")
def smollm2_ref_logits(smollm2_ref):
    """The numpy reference's prompt logits [T, V] of each golden case, computed once for the module: two tests
    compare against the same cases, and a float32 forward of the 135M model is this file's costliest numpy work."""
    cases = json.load(open(GOLDEN / "logits.json"))["cases"]
    return [smollm2_ref.forward(c["ids"]) for c in cases]


def run_logits(xinfer_bin, model, out, reqs, tmp_path, *extra):
    (tmp_path / "req.json").write_text(json.dumps([{"prompt_ids": ids} for ids in reqs]))
    r = subprocess.run([str(xinfer_bin), "logits", "--backend", "cpu", "--threads", "2", "--no-progress", "--model",
                        str(model), "--input", str(tmp_path / "req.json"), "--greedy-steps", "32", "--output",
                        str(out), *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return load_file(str(out)), r.stderr


@pytest.fixture(scope="module")
def smollm2_logits(xinfer_bin, smollm2, tmp_path_factory, request):
    """`xinfer logits` on the golden cases (logits.json's prompts, which transformers_logits.json uses too), with
    the weights dequantized at load ("deq") and packed ("q"): (outputs, stderr) each, run once for the tests that
    check them, in the background while the numpy reference loads and scores the same prompts."""
    cases = json.load(open(GOLDEN / "logits.json"))["cases"]
    assert [c["ids"] for c in cases] == [c["ids"] for c in json.load(open(GOLDEN / "transformers_logits.json"))["cases"]]
    ids = [c["ids"] for c in cases]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = {}
        for kind, extra in (("deq", ["--dequantize"]), ("q", [])):
            tmp = tmp_path_factory.mktemp(f"smollm2_{kind}")
            runs[kind] = pool.submit(run_logits, xinfer_bin, smollm2, tmp / "out.safetensors", ids, tmp, *extra)
        request.getfixturevalue("smollm2_ref_logits")
        return {kind: r.result() for kind, r in runs.items()}


def check_greedy_against(ref, prompt, greedy):
    """Greedy tokens equal the reference's: one reference forward over prompt + greedy (teacher forcing) must
    pick each next token; equivalent to running the reference's own greedy loop."""
    seq = list(prompt) + [int(t) for t in greedy]
    logits = ref.forward(seq[:-1])
    got = logits[len(prompt) - 1:].argmax(-1).tolist()
    assert got == [int(t) for t in greedy]


def test_smollm2_tokenizer_ids_equal_llama_cpp(xinfer_bin, smollm2, shared_dir):
    g = json.load(gzip.open(GOLDEN / "tokenizer_ids.json.gz"))
    items = tokenizer_corpus.build_corpus(shared_dir, g["specials"])
    assert len(items) == len(g["items"]) >= 10000
    lines = [json.dumps(tokenizer_corpus.as_text(b)) for b in items]
    r = subprocess.run([str(xinfer_bin), "tokenize", "--tokenizer", str(smollm2), "--jsonl", "--no-special"],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.split("\n")[:-1]]
    assert len(out) == len(items)
    bad = [i for i, (o, w) in enumerate(zip(out, g["items"]))
           if hashlib.sha256(json.dumps(o).encode()).hexdigest()[:16] != w["hash"]]
    assert not bad, f"{len(bad)} differ, first {bad[:5]}: {[lines[i][:80] for i in bad[:5]]}"


def test_smollm2_dequantized_logits_and_greedy_equal_numpy(smollm2_logits, smollm2_ref, smollm2_ref_logits):
    cases = json.load(open(GOLDEN / "logits.json"))["cases"]
    x, log = smollm2_logits["deq"]
    assert "Q4_1 weights dequantized to f32 at load" in log
    for i, c in enumerate(cases):
        ref = smollm2_ref_logits[i]
        # Both float32 over the same dequantized weights; only summation order differs (OpenBLAS vs numpy):
        # measured 3e-5..7e-5 on logits of magnitude ~36. 1e-3 is 15x that, 1/500 of the quantization effect.
        np.testing.assert_allclose(x[f"logits_{i}"], ref, atol=1e-3, rtol=0)
        check_greedy_against(smollm2_ref, c["ids"], x[f"greedy_{i}"])


def test_smollm2_dequantized_logits_and_greedy_equal_transformers(smollm2_logits):
    """transformers' own GGUF loader (tests/golden/smollm2/transformers_logits.json, made on the GPU machine by
    tools/make_smollm2_transformers_golden.py: its metadata -> config, q/k un-permutation and dequantization,
    LlamaForCausalLM in float32 on the CPU) against our weights dequantized at load."""
    g = json.load(open(GOLDEN / "transformers_logits.json"))
    probe = np.array(g["probe_ids"])
    x, _ = smollm2_logits["deq"]
    for i, c in enumerate(g["cases"]):
        # Transformers' tokenizer for this file gives llama.cpp's ids (which ours match on every corpus item).
        assert c["hf_tokenizer_ids"] == c["ids"]
        mine = x[f"logits_{i}"]
        # float32 both, same dequantized weights (the golden is rounded to 1e-5): summation order only, as
        # against numpy above.
        np.testing.assert_allclose(mine[:, probe], np.array(c["probe_logits"]), atol=1e-3, rtol=0)
        top_ids = np.array(c["top_ids"])
        np.testing.assert_allclose(np.take_along_axis(mine, top_ids, axis=1), np.array(c["top_logits"]),
                                   atol=1e-3, rtol=0)
        assert x[f"greedy_{i}"].tolist() == c["greedy"]


def test_smollm2_quantized_logits_close_to_references(smollm2_logits, smollm2_ref_logits):
    g = json.load(open(GOLDEN / "logits.json"))
    probe = np.array(g["probe_ids"])
    x, log = smollm2_logits["q"]
    assert "dequantized" not in log  # Q4_1 and Q8_0 stay packed on the CPU
    for i, c in enumerate(g["cases"]):
        mine = x[f"logits_{i}"]
        ref = smollm2_ref_logits[i]
        # The kernels quantize activations to 8-bit blocks (as llama.cpp does): measured max |diff| vs the
        # float reference 1.0-1.8 over the whole vocabulary on logits up to ~36, mean |diff| ~0.2; on llama.cpp's
        # top-8 logits of each position 0.46 / 0.61 / 0.89 for the three prompts, where llama.cpp's own are
        # 0.51 / 0.65 / 0.79 and the numpy reference with the same block fake-quantization
        # (GgufLlama.forward(ids, act_blocks=True)) 0.74 / 0.47 / 0.63: the error of the algorithm, not of
        # the kernels.
        assert np.abs(mine - ref).max() < 2.5
        assert np.abs(mine - ref).mean() < 0.3
        np.testing.assert_allclose(mine[:, probe], np.array(c["probe_logits"]), atol=2.5, rtol=0)
        # Where llama.cpp's choice is clear (top-1 ahead by > 1), ours is the same.
        top = np.array(c["top_logits"])
        clear = top[:, 0] - top[:, 1] > 1.0
        assert (mine.argmax(-1)[clear] == np.array(c["top_ids"])[clear, 0]).all()


# K-quants need rows of 256: those models are 256 wide (ffn 512). "Q4_K_M": q / k / gate / up in Q4_K with v and
# down in Q6_K (parts of the concatenated qkv differ in type: two segments), as llama.cpp's Q4_K_M mixes types.
TINY_GGUFS = {t.name: (t, {}) for t in (Q.F32, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1)}
TINY_GGUFS["Q4_K"] = (Q.Q4_K, {"hidden": 256, "ffn": 512})
TINY_GGUFS["Q6_K"] = (Q.Q6_K, {"hidden": 256, "ffn": 512})
TINY_GGUFS["Q4_K_M"] = (Q.Q4_K, {"hidden": 256, "ffn": 512,
                                 "tensor_types": {"attn_v.weight": Q.Q6_K, "ffn_down.weight": Q.Q6_K}})
# What the CPU loader does with each (its log): Q4_K, Q5_0 and Q6_K linears repacked into the int formats.
TINY_GGUF_LOGS = {"Q4_K": ["gguf Q4_K repacked into int4-g32-min"],
                  "Q5_0": ["gguf Q5_0 repacked into int8-g32"],
                  "Q6_K": ["gguf Q6_K repacked into int8-g16"],
                  "Q4_K_M": ["gguf Q4_K repacked into int4-g32-min", "gguf Q6_K repacked into int8-g16",
                             "differ in type: run as segments (Q4_K as int4-g32-min + Q6_K as int8-g16)"]}


@pytest.mark.parametrize("name", list(TINY_GGUFS))
def test_tiny_gguf_matches_numpy(xinfer_bin, tmp_path, name):
    qtype, kwargs = TINY_GGUFS[name]
    path = tmp_path / f"tiny_{name}.gguf"
    make_gguf_fixtures.write_tiny_llama(path, qtype=qtype, tied=qtype not in (Q.Q4_0, Q.Q4_K, Q.Q6_K), **kwargs)
    ref = GgufLlama(str(path))
    prompts = [[5, 6, 7, 8, 9, 10, 11], [3], [40, 41, 42, 43] * 6]
    deq, _ = run_logits(xinfer_bin, path, tmp_path / "deq.safetensors", prompts, tmp_path, "--dequantize")
    qx, log = run_logits(xinfer_bin, path, tmp_path / "q.safetensors", prompts, tmp_path)
    for line in TINY_GGUF_LOGS.get(name, []):
        assert line in log, (line, log)
    for i, p in enumerate(prompts):
        want = ref.forward(p)
        np.testing.assert_allclose(deq[f"logits_{i}"], want, atol=1e-4, rtol=0)
        check_greedy_against(ref, p, deq[f"greedy_{i}"])
        # The kernels quantize activations to 8-bit blocks of 32 (the Q8_0 embedding is the tied lm_head even
        # with f32 linears); on these logits of magnitude ~0.1-2 that measured up to 0.052 (Q8_0/Q4_x).
        err = np.abs(qx[f"logits_{i}"] - want)
        assert err.max() < 0.1 and err.mean() < 0.02, (err.max(), err.mean())


def run_generate(xinfer_bin, model):
    return subprocess.run([str(xinfer_bin), "generate", "--model", str(model), "--prompt-ids", "5,6", "--max-tokens",
                           "2", "--print-ids", "--threads", "1"], capture_output=True, text=True, timeout=60)


def test_truncated_gguf_is_a_clear_error(xinfer_bin, tmp_path):
    src = tmp_path / "tiny.gguf"
    make_gguf_fixtures.write_tiny_llama(src)
    data = src.read_bytes()
    # cut inside the header, the metadata, the tensor infos and the tensor data
    for cut in (3, 10, 30, 200, 2000, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"cut_{cut}.gguf"
        bad.write_bytes(data[:cut])
        r = run_generate(xinfer_bin, bad)
        assert r.returncode != 0, cut
        assert bad.name in r.stderr and ("truncated" in r.stderr or "not a GGUF" in r.stderr), r.stderr
    r = run_generate(xinfer_bin, tmp_path / f"cut_{len(data) - 1}.gguf")
    assert "tensor 'output_norm.weight'" in r.stderr and "field 'offset'" in r.stderr, r.stderr


def test_unknown_tensor_type_is_a_clear_error(xinfer_bin, tmp_path):
    src = tmp_path / "tiny.gguf"
    make_gguf_fixtures.write_tiny_llama(src)
    data = bytearray(src.read_bytes())
    name = b"blk.0.attn_q.weight"
    at = data.index(len(name).to_bytes(8, "little") + name) + 8 + len(name)
    n_dims = int.from_bytes(data[at:at + 4], "little")
    type_at = at + 4 + 8 * n_dims
    data[type_at:type_at + 4] = (99).to_bytes(4, "little")
    bad = tmp_path / "badtype.gguf"
    bad.write_bytes(bytes(data))
    r = run_generate(xinfer_bin, bad)
    assert r.returncode != 0
    assert "badtype.gguf" in r.stderr and "tensor 'blk.0.attn_q.weight'" in r.stderr
    assert "field 'type'" in r.stderr and "unknown GGUF tensor type 99" in r.stderr, r.stderr


def test_unsupported_architecture_is_a_clear_error(xinfer_bin, tmp_path):
    bad = tmp_path / "qwen.gguf"
    make_gguf_fixtures.write_tiny_llama(bad, arch="qwen2")
    r = run_generate(xinfer_bin, bad)
    assert r.returncode != 0
    assert "qwen.gguf" in r.stderr and "unsupported general.architecture 'qwen2'" in r.stderr, r.stderr


def test_wrong_tensor_shape_is_a_clear_error(xinfer_bin, tmp_path):
    bad = tmp_path / "shape.gguf"
    make_gguf_fixtures.write_tiny_llama(bad, bad_shape="blk.1.ffn_up.weight")
    r = run_generate(xinfer_bin, bad)
    assert r.returncode != 0
    assert "shape.gguf" in r.stderr and "tensor 'blk.1.ffn_up.weight'" in r.stderr and "field 'shape'" in r.stderr
    assert "expected [128, 64], found [160, 64]" in r.stderr, r.stderr
