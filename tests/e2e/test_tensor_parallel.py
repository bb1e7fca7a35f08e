"""`xinfer serve --tensor-parallel-size N` on the CPU backend (N threads of one process, docs/tensor_parallel.md),
through the official openai client: greedy completions and chat at TP 2 and 4 give exactly the tokens of TP 1
(stories260K: 8 heads, 4 kv heads), one at a time and concurrently; the start-up log names every rank; SmolLM2's
GGUF at TP 3 (9 heads / 3 kv heads) answers as TP 1 does; sizes that do not divide the heads are refused at start-up
with the field named."""
import concurrent.futures
import pathlib
import subprocess

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
