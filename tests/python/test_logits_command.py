"""`xinfer logits` on the CPU against the transformers goldens, and tests/gpu/check_8b_vs_transformers.py (the
full-size comparison run on the GPU machine) driven by its numpy reference: its pipeline end to end, that it
fails on a model xinfer gets wrong, and its pass rule on synthetic logits."""
import importlib.util
import json
import pathlib
import subprocess

import numpy as np
import pytest
from safetensors.numpy import load_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
MODELS = ["llama_gqa", "llama_tied", "mistral", "qwen2", "qwen3"]


def load_check_script():
    spec = importlib.util.spec_from_file_location("check_8b", ROOT / "tests/gpu/check_8b_vs_transformers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_logits(xinfer_bin, *args):
    return subprocess.run([str(xinfer_bin), "logits", "--backend", "cpu", "--threads", "2", "--no-progress", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", MODELS)
def test_logits_match_transformers_goldens(xinfer_bin, tmp_path, name):
    g = load_file(str(GOLDEN / name / "golden.safetensors"))
    reqs = [{"prompt_ids": g[f"prompt_{i}"].tolist(), "forced_ids": g[f"greedy_{i}"].tolist()} for i in range(3)]
    (tmp_path / "req.json").write_text(json.dumps(reqs))
    out = tmp_path / "out.safetensors"
    # prefill chunks of 5 tokens: the 33-token prompt takes 7 steps, each asking for all of its rows
    r = run_logits(xinfer_bin, "--model", str(GOLDEN / name), "--input", str(tmp_path / "req.json"),
                   "--greedy-steps", "20", "--prefill-chunk", "5", "--output", str(out))
    assert r.returncode == 0, r.stderr
    x = load_file(str(out))
    for i in range(3):
        n = len(g[f"prompt_{i}"])
        np.testing.assert_array_equal(x[f"prompt_{i}"], g[f"prompt_{i}"])
        np.testing.assert_array_equal(x[f"positions_{i}"], np.arange(n))
        np.testing.assert_allclose(x[f"logits_{i}"], g[f"logits_{i}"], atol=1e-4, rtol=0)
        np.testing.assert_array_equal(x[f"greedy_{i}"], g[f"greedy_{i}"])
        np.testing.assert_allclose(x[f"greedy_logits_{i}"], g[f"greedy_logits_{i}"], atol=1e-4, rtol=0)
        # forced row j: after feeding greedy[j] = the golden row that chose greedy[j + 1]
        assert x[f"forced_logits_{i}"].shape == (20, g[f"logits_{i}"].shape[1])
        np.testing.assert_allclose(x[f"forced_logits_{i}"][:-1], g[f"greedy_logits_{i}"][1:], atol=1e-4, rtol=0)


def test_logits_last_positions_and_single_prompt(xinfer_bin, tmp_path):
    g = load_file(str(GOLDEN / "llama_gqa" / "golden.safetensors"))
    out = tmp_path / "out.safetensors"
    ids = ",".join(str(t) for t in g["prompt_2"])
    r = run_logits(xinfer_bin, "--model", str(GOLDEN / "llama_gqa"), "--prompt-ids", ids, "--last-positions", "4",
                   "--greedy-steps", "0", "--output", str(out))
    assert r.returncode == 0, r.stderr
    x = load_file(str(out))
    assert sorted(x) == ["logits_0", "positions_0", "prompt_0"]
    np.testing.assert_array_equal(x["positions_0"], np.arange(29, 33))
    np.testing.assert_allclose(x["logits_0"], g["logits_2"][-4:], atol=1e-4, rtol=0)


def test_logits_rejects_bad_input(xinfer_bin, tmp_path):
    r = run_logits(xinfer_bin, "--model", str(GOLDEN / "llama_gqa"), "--prompt-ids", "1,512")
    assert r.returncode == 1 and "outside the vocabulary" in r.stderr
    r = run_logits(xinfer_bin, "--model", str(GOLDEN / "llama_gqa"), "--prompt-ids", "1,x")
    assert r.returncode == 1 and "not a token id" in r.stderr
    (tmp_path / "bad.json").write_text('[{"prompt_ids": []}]')
    r = run_logits(xinfer_bin, "--model", str(GOLDEN / "llama_gqa"), "--input", str(tmp_path / "bad.json"))
    assert r.returncode == 1 and "empty prompt" in r.stderr


def test_check_script_end_to_end_numpy_reference(xinfer_bin, tmp_path):
    check = load_check_script()
    rc = check.main(["--xinfer", str(xinfer_bin), "--tiny", "--reference", "numpy", "--backend", "cpu",
                     "--lengths", "5,40", "--steps", "4", "--out", str(tmp_path / "out"), "--work", str(tmp_path)])
    res = json.loads((tmp_path / "out" / "check_8b.json").read_text())
    assert rc == 0 and res["ok"]
    assert "RESULT: PASS" in (tmp_path / "out" / "check_8b.txt").read_text()
    for p in res["prompts"]:
        for s in p["sets"].values():
            assert s["xi_max"] < 1e-3 < s["ref_max"]  # xinfer f32 == numpy f32; the bf16 floor is real
    assert not any(tmp_path.glob("xinfer_check_8b_*")), "temp dir not removed"


def test_check_script_fails_when_xinfer_runs_another_model(xinfer_bin, tmp_path):
    """xinfer reads a config without the llama3 rope scaling: the long prompt's logits must fail the rule."""
    check = load_check_script()
    cfg = check.model_config(tiny=True)
    prompts = check.make_prompts(cfg["vocab_size"], [600], seed=1)  # the error grows with the position
    w = check.numpy_weights(cfg, seed=1)
    from safetensors.numpy import save_file
    (tmp_path / "model").mkdir()
    save_file(w, str(tmp_path / "model" / "model.safetensors"))
    wrong = {k: v for k, v in cfg.items() if k != "rope_scaling"}
    (tmp_path / "model" / "config.json").write_text(json.dumps(wrong))
    forced = [[int(np.argmax(check.numpy_forward(cfg, w, prompts[0], True)[-1]))]]
    run = check.XinferRun(xinfer_bin, tmp_path / "model", prompts, forced, 1, "cpu", tmp_path, tmp_path / "log", 120)
    full = prompts[0] + forced[0]  # the references are computed while xinfer runs in the background
    ref = {"greedy": forced, "bf16": [check.numpy_forward(cfg, w, full, True)],
           "f32": [check.numpy_forward(cfg, w, full, False)]}
    xi = run.wait()
    res = check.compare(ref, xi, prompts, tol=2.0)
    assert not res["ok"]
    sets = res["prompts"][0]["sets"]
    assert sets["prefill"]["ratio_max"] > 3.0 and sets["decode"]["ratio_mean"] > 3.0


def test_check_rule_on_synthetic_logits():
    check = load_check_script()
    rng = np.random.default_rng(0)
    n, S, V = 20, 6, 500
    f = rng.standard_normal((n + S, V)).astype(np.float32)
    b = f + 0.01 * rng.standard_normal(f.shape).astype(np.float32)
    greedy = [int(f[n - 1 + k].argmax()) for k in range(S)]
    ref = {"greedy": [greedy], "bf16": [b], "f32": [f]}

    def xi_of(x, xi_greedy):
        return {"prompt_0": np.arange(n), "positions_0": np.arange(n), "logits_0": x[:n], "forced_logits_0": x[n:],
                "greedy_0": np.asarray(xi_greedy)}

    prompts = [list(range(n))]
    same_noise = f + 0.01 * rng.standard_normal(f.shape).astype(np.float32)
    assert check.compare(ref, xi_of(same_noise, greedy), prompts, 2.0)["ok"]
    assert not check.compare(ref, xi_of(f + 0.03 * rng.standard_normal(f.shape).astype(np.float32), greedy),
                             prompts, 2.0)["ok"]
    nan = same_noise.copy()
    nan[3, 7] = np.nan
    assert not check.compare(ref, xi_of(nan, greedy), prompts, 2.0)["ok"]
    # greedy divergence: fine at a near-tie, not where f32 clearly prefers the reference's token
    row = f[n - 1 + 2]
    second = int(np.argsort(row)[-2])
    tie = f.copy()
    tie[n - 1 + 2, second] = row[greedy[2]] - 0.001
    b_tie = tie + (b - f)
    ref_tie = {"greedy": [greedy], "bf16": [b_tie], "f32": [tie]}
    diverged = greedy[:2] + [second] + greedy[3:]
    x_tie = tie + (same_noise - f)
    res = check.compare(ref_tie, xi_of(x_tie, diverged), prompts, 2.0)
    assert res["prompts"][0]["greedy"]["first_divergence"] == 2 and res["prompts"][0]["greedy"]["ok"]
    far = f.copy()
    far[n - 1 + 2, second] = row[greedy[2]] - 1.0
    ref_far = {"greedy": [greedy], "bf16": [far + (b - f)], "f32": [far]}
    res = check.compare(ref_far, xi_of(far + (same_noise - f), diverged), prompts, 2.0)
    assert not res["prompts"][0]["greedy"]["ok"] and not res["ok"]
