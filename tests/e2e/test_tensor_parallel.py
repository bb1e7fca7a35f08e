"""`xinfer serve --tensor-parallel-size N` on the CPU backend (N threads of one process, docs/tensor_parallel.md),
through the official openai client: greedy completions and chat at TP 2 and 4 give exactly the tokens of TP 1
(stories260K: 8 heads, 4 kv heads), one at a time and concurrently; the start-up log names every rank; SmolLM2's
GGUF at TP 3 (9 heads / 3 kv heads) answers as TP 1 does; sizes that do not divide the heads are refused at start-up
with the field named.

The offline tools take the flag too: `xinfer logits` at TP 2 / 4 writes the logits of TP 1 (prompt, greedy and
teacher-forced rows) within float tolerance, `xinfer eval ppl` (also with --reference) and `eval loglik` at TP 2
give TP 1's figures within 1e-4 relative (TP 1 itself is checked against a float64 numpy forward in
tests/python/test_eval_ppl.py)."""
import concurrent.futures
import json
import pathlib
import shutil
import subprocess

import numpy as np

import openai
import pytest

from xinfer_server import Server

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park. They", "One day, a big"]


def completions(client, prompts, max_tokens=24, parallel=False):
    def one(p):
        r = client.completions.create(model=client.model_name, prompt=p, max_tokens=max_tokens, temperature=0,
                                      logprobs=1)
        return r.choices[0].text, r.choices[0].logprobs.tokens, r.usage.completion_tokens
    if not parallel:
        return [one(p) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as ex:
        return list(ex.map(one, prompts))


def client_for(server):
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    c.model_name = c.models.list().data[0].id
    return c


@pytest.fixture(scope="module")
def tp1(start_server):
    return client_for(start_server("--max-num-batched-tokens", "16"))


@pytest.mark.parametrize("tp", [2, 4])
def test_greedy_completions_and_chat_equal_tp1(start_server, tp1, tp):
    server = start_server("--tensor-parallel-size", str(tp), "--max-num-batched-tokens", "16")
    log = pathlib.Path(server.log_path).read_text()
    assert f"tensor_parallel_size={tp}" in log
    for r in range(1, tp):
        assert f"tensor parallel rank {r}: tp {tp}/rank {r}" in log, log
    c = client_for(server)
    want = completions(tp1, PROMPTS)
    assert all(n == 24 for _, _, n in want)
    assert completions(c, PROMPTS) == want
    assert completions(c, PROMPTS, parallel=True) == want  # batched + chunked prefill (16-token budget)
    msgs = [{"role": "user", "content": "Tell me a story about a cat."}]
    a = tp1.chat.completions.create(model=tp1.model_name, messages=msgs, max_tokens=20, temperature=0)
    b = c.chat.completions.create(model=c.model_name, messages=msgs, max_tokens=20, temperature=0)
    assert b.choices[0].message.content == a.choices[0].message.content
    # Seeded sampling: rank 0 samples with the same random bits, so the same seed gives the same text.
    s1 = tp1.completions.create(model=tp1.model_name, prompt=PROMPTS[0], max_tokens=16, temperature=0.9, seed=7)
    s2 = c.completions.create(model=c.model_name, prompt=PROMPTS[0], max_tokens=16, temperature=0.9, seed=7)
    assert s2.choices[0].text == s1.choices[0].text


def test_async_scheduling_tp2_equals_tp1(start_server, tp1):
    """Pipelined greedy steps: each feeds the ids the step in flight sampled, which rank 0 broadcasts."""
    server = start_server("--tensor-parallel-size", "2", "--max-num-batched-tokens", "16", "--async-scheduling")
    assert "async_scheduling=1" in pathlib.Path(server.log_path).read_text()
    c = client_for(server)
    want = completions(tp1, PROMPTS)
    assert completions(c, PROMPTS) == want
    assert completions(c, PROMPTS, parallel=True) == want


def test_sizes_that_do_not_divide_the_heads_are_refused(xinfer_bin, model_dir, tmp_path):
    r = subprocess.run([str(xinfer_bin), "serve", "--model", str(model_dir), "--port", "0", "--threads", "2",
                        "--tensor-parallel-size", "3"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "tensor_parallel_size 3 does not divide the model's 8 attention heads" in r.stdout + r.stderr


def smollm2_gguf():
    p = pathlib.Path.home() / ".cache/xinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    return p if p.exists() else None


@pytest.mark.skipif(smollm2_gguf() is None, reason="SmolLM2 GGUF not fetched (scripts/fetch_smollm2.sh)")
def test_smollm2_gguf_tp3_equals_tp1(xinfer_bin, tmp_path):
    msgs = [{"role": "system", "content": "You are a helpful AI assistant."},  # test_smollm2.py's
            {"role": "user", "content": "What is the capital of France?"}]
    answers = []
    for tp in (1, 3):
        s = Server(xinfer_bin, smollm2_gguf(), tmp_path / f"serve_tp{tp}.log", "--tensor-parallel-size", str(tp),
                   "--kv-cache-memory", "64MiB", "--max-model-len", "512")
        try:
            c = client_for(s)
            r = c.chat.completions.create(model=c.model_name, messages=msgs, max_tokens=16, temperature=0)
            answers.append(r.choices[0].message.content)
        finally:
            s.stop()
    assert answers[1] == answers[0]
    assert "Paris" in answers[0]
    r = subprocess.run([str(xinfer_bin), "serve", "--model", str(smollm2_gguf()), "--port", "0",
                        "--tensor-parallel-size", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "does not divide the model's 9 attention heads" in r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------------------------
# xinfer logits / eval ppl / eval loglik --tensor-parallel-size

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "models" / "xinfer-tiny-shakespeare"  # 8 heads, 4 kv heads, FFN 704
GQA = ROOT / "tests" / "golden" / "llama_gqa"  # 4 heads, 2 kv heads, FFN 176, llama3 rope


def run_tool(xinfer_bin, *args, timeout=300):
    r = subprocess.run([str(xinfer_bin), *map(str, args), "--threads", "2", "--no-progress"], capture_output=True,
                       text=True, timeout=timeout)
    return r


@pytest.mark.parametrize("model", [GQA, BUNDLED], ids=["llama_gqa", "bundled"])
def test_logits_command_tp_equals_tp1(xinfer_bin, tmp_path, model):
    from safetensors.numpy import load_file
    reqs = [{"prompt_ids": [1, 5, 9, 33, 100, 7, 8, 200, 11, 12, 13], "forced_ids": [3, 4, 5, 6]},
            {"prompt_ids": [0, 42, 17]}]
    (tmp_path / "reqs.json").write_text(json.dumps(reqs))
    out = {}
    for tp in (1, 2, 4):
        path = tmp_path / f"tp{tp}.safetensors"
        r = run_tool(xinfer_bin, "logits", "--model", model, "--backend", "cpu", "--input", tmp_path / "reqs.json",
                     "--greedy-steps", 6, "--prefill-chunk", 4, "--block-size", 4, "--tensor-parallel-size", tp,
                     "--output", path)
        assert r.returncode == 0, r.stderr
        out[tp] = load_file(str(path))
    ref = out[1]
    for tp in (2, 4):
        assert sorted(out[tp]) == sorted(ref)
        for name, want in ref.items():
            got = out[tp][name]
            assert got.shape == want.shape, name
            if want.dtype == np.int32:
                assert (got == want).all(), (tp, name)  # prompts, positions, greedy ids
            else:  # f32 sums in another order (per-rank partials): rounding only
                err = np.abs(got.astype(np.float64) - want).max()
                assert err <= 1e-4 * max(1.0, np.abs(want).max()), (tp, name, err)


@pytest.fixture(scope="module")
def shakespeare_text(shared_dir):
    return (shared_dir / "corpora/tinyshakespeare/input.txt").read_text()[:6000]


def eval_ppl_json(xinfer_bin, tmp_path, text, *args):
    path = tmp_path / "text.txt"
    path.write_text(text)
    r = run_tool(xinfer_bin, "eval", "ppl", "--text", path, "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_eval_ppl_tp2_equals_tp1(xinfer_bin, tmp_path, shakespeare_text):
    args = ["--model", BUNDLED, "--ctx", 128, "--stride", 48, "--max-tokens", 400, "--prefill-chunk", 40]
    one = eval_ppl_json(xinfer_bin, tmp_path, shakespeare_text, *args)
    for tp in (2, 4):
        got = eval_ppl_json(xinfer_bin, tmp_path, shakespeare_text, *args, "--tensor-parallel-size", tp)
        assert got["tensor_parallel_size"] == tp
        assert (got["tokens_scored"], got["windows"]) == (one["tokens_scored"], one["windows"])
        assert got["ppl"] == pytest.approx(one["ppl"], rel=1e-4)
        assert got["nll_sum"] == pytest.approx(one["nll_sum"], rel=1e-4)


def test_eval_ppl_reference_tp2_equals_tp1(xinfer_bin, tmp_path, shakespeare_text, stories260k_dir):
    gqa = tmp_path / "llama_gqa"  # random weights, vocab 512: given stories260K's tokenizer
    gqa.mkdir()
    for f in ["config.json", "model.safetensors"]:
        shutil.copy(GQA / f, gqa / f)
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(stories260k_dir / f, gqa / f)
    args = ["--model", gqa, "--reference", stories260k_dir, "--ctx", 96, "--stride", 64, "--max-tokens", 300]
    one = eval_ppl_json(xinfer_bin, tmp_path, shakespeare_text, *args)
    two = eval_ppl_json(xinfer_bin, tmp_path, shakespeare_text, *args, "--tensor-parallel-size", 2)
    assert two["tokens_scored"] == one["tokens_scored"]
    for key in ("ppl", "nll_sum", "kl"):
        assert two[key] == pytest.approx(one[key], rel=1e-4), key
    assert two["top1"] == one["top1"]  # random weights: no near-ties at this tolerance


def test_eval_loglik_tp2_equals_tp1(xinfer_bin, tmp_path):
    rows = [{"context": "ROMEO: But soft, what light", "continuation": " through yonder window breaks?"},
            {"context": "To be, or not to be:", "continuation": " that is the question"},
            {"context_ids": [0, 5, 6, 7], "continuation_ids": [8, 9]}]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = {}
    for tp in (1, 2):
        r = run_tool(xinfer_bin, "eval", "loglik", "--model", BUNDLED, "--requests", path, "--prefill-chunk", 5,
                     "--tensor-parallel-size", tp)
        assert r.returncode == 0, r.stderr
        res[tp] = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(res[2]) == len(res[1]) == len(rows)
    for a, b in zip(res[1], res[2]):
        assert (b["context_ids"], b["continuation_ids"], b["is_greedy"]) == \
            (a["context_ids"], a["continuation_ids"], a["is_greedy"])
        assert b["logprob"] == pytest.approx(a["logprob"], rel=1e-4)
        assert b["token_logprobs"] == pytest.approx(a["token_logprobs"], rel=1e-4)


@pytest.mark.parametrize("command", [["logits", "--prompt-ids", "1,2,3", "--backend", "cpu"],
                                     ["eval", "ppl", "--text", "{text}"],
                                     ["eval", "loglik", "--requests", "{requests}"]])
def test_tools_refuse_sizes_that_do_not_divide_the_heads(xinfer_bin, tmp_path, command):
    (tmp_path / "t.txt").write_text("hello world " * 50)
    (tmp_path / "r.jsonl").write_text(json.dumps({"context_ids": [0, 5], "continuation_ids": [6]}) + "\n")
    args = [a.replace("{text}", str(tmp_path / "t.txt")).replace("{requests}", str(tmp_path / "r.jsonl"))
            for a in command]
    help_text = run_tool(xinfer_bin, *command[:2 if command[0] == "eval" else 1], "--help").stdout
    assert "--tensor-parallel-size" in help_text
    r = run_tool(xinfer_bin, *args, "--model", BUNDLED, "--tensor-parallel-size", 3)
    assert r.returncode != 0
    assert "tensor_parallel_size 3 does not divide the model's 8 attention heads" in r.stderr, r.stderr
    assert "Check failed" not in r.stderr
