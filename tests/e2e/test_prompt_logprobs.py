"""Prompt log-probabilities through the official openai client, as lm-evaluation-harness's `local-completions`
model asks for them (completions.create(prompt=token ids, echo=True, logprobs=1, max_tokens=1, temperature=0),
then sum(token_logprobs[ctxlen:-1]) and is_greedy), and vLLM's `prompt_logprobs` extension.

References written by others: lm-eval's parse_logprobs rule (re-stated below), llama.cpp's logits
(tests/golden/smollm2/prompt_logprobs.json, made by tools/make_prompt_logprobs_golden.py with llama-cpp-python),
and `xinfer eval loglik`, which scores the same token ids in one window from an empty cache (f64 log-softmax),
a path that shares no code with the server's (no scheduler, no chunk splitting by logits rows, no prefix cache).

The bundled model serves with --max-num-seqs 4: the model's logits buffer then holds 4 rows, so every prompt
below is split into several all-logits chunks, and prefix caching stays on (prompt logprobs must not use it).
"""
import json
import subprocess
import threading

import numpy as np
import openai
import pytest

from xinfer_server import ROOT, Server

BUNDLED = ROOT / "models" / "xinfer-tiny-shakespeare"
GOLDEN = ROOT / "tests" / "golden" / "smollm2" / "prompt_logprobs.json"
PAIRS = [
    ("ROMEO: But soft, what light through yonder window", " breaks?"),
    ("JULIET: O Romeo, Romeo, wherefore art thou", " Romeo?"),
    ("First Citizen: Before we proceed any further, hear me", " speak."),
    ("KING HENRY: Once more unto the breach, dear friends, once more; Or close the wall up with our English",
     " dead."),
    ("To be, or not to be:", " that is the question"),
]


def eval_loglik(xinfer_bin, model, rows, tmp_path, name="requests.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = subprocess.run([str(xinfer_bin), "eval", "loglik", "--model", str(model), "--requests", str(path),
                        "--threads", "2", "--no-progress"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def lm_eval_parse(choice, ctxlen, generated=1):
    """lm-eval's TemplateAPI/local-completions rule: logprob = sum(token_logprobs[ctxlen:-1]) (the last entry is
    the generated token), is_greedy = every such token's logprob equals the max of its top_logprobs."""
    end = len(choice.logprobs.token_logprobs) - generated
    lps = choice.logprobs.token_logprobs[ctxlen:end]
    tops = choice.logprobs.top_logprobs[ctxlen:end]
    return sum(lps), all(lp == max(top.values()) for lp, top in zip(lps, tops))


@pytest.fixture(scope="module", params=["sync", "async"])
def tiny(request, xinfer_bin, tmp_path_factory):
    # async: steps are pipelined (greedy rows launched behind the step in flight); a step with prompt rows
    # must complete the one in flight first and run synchronously.
    extra = ["--async-scheduling"] if request.param == "async" else []
    s = Server(xinfer_bin, BUNDLED, tmp_path_factory.mktemp("plp") / "serve.log", "--max-num-seqs", "4", *extra)
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(tiny):
    return openai.OpenAI(base_url=tiny.base_url + "/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference(xinfer_bin, tmp_path_factory):
    return eval_loglik(xinfer_bin, BUNDLED, [{"context": c, "continuation": x} for c, x in PAIRS],
                       tmp_path_factory.mktemp("plp_eval"))


def test_lm_eval_loglikelihood_batch_equals_eval(client, reference):
    # One batched request of token-id prompts, as lm-eval sends them.
    prompts = [r["context_ids"] + r["continuation_ids"] for r in reference]
    assert all(len(p) > 4 for p in prompts)  # longer than the 4 logits rows: chunked
    resp = client.completions.create(model="xinfer-tiny-shakespeare", prompt=prompts, echo=True, logprobs=1,
                                     max_tokens=1, temperature=0, seed=1234)
    assert len(resp.choices) == len(prompts)
    for ref, choice in zip(reference, sorted(resp.choices, key=lambda c: c.index)):
        lp = choice.logprobs
        n = len(ref["context_ids"]) + len(ref["continuation_ids"])
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n + 1
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        total, greedy = lm_eval_parse(choice, len(ref["context_ids"]))
        assert abs(total - ref["logprob"]) < 1e-4, (total, ref["logprob"])
        assert greedy == ref["is_greedy"]
        mine = lp.token_logprobs[len(ref["context_ids"]):n]
        np.testing.assert_allclose(mine, ref["token_logprobs"], atol=1e-4, rtol=0)
        # logprobs=1: the top entry plus the prompt token itself (OpenAI: up to logprobs + 1 entries)
        assert all(1 <= len(t) <= 2 for t in lp.top_logprobs[1:])
    assert resp.usage.completion_tokens == len(prompts)


def test_max_tokens_0_returns_the_prompt_alone(client, tiny, reference):
    ref = reference[0]
    ids = ref["context_ids"] + ref["continuation_ids"]
    r = client.completions.create(model="xinfer-tiny-shakespeare", prompt=ids, echo=True, logprobs=1, max_tokens=0)
    c = r.choices[0]
    assert len(c.logprobs.tokens) == len(ids) and c.finish_reason == "length"
    assert abs(sum(c.logprobs.token_logprobs[len(ref["context_ids"]):]) - ref["logprob"]) < 1e-4
    assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == len(ids)
    assert c.text == tiny.json("POST", "/detokenize", {"tokens": ids})[1]["prompt"]


def test_string_prompt_offsets_line_up_with_the_echo(client, reference):
    context, continuation = PAIRS[1]
    ref = reference[1]
    r = client.completions.create(model="xinfer-tiny-shakespeare", prompt=context + continuation, echo=True,
                                  logprobs=2, max_tokens=3, temperature=0)
    c = r.choices[0]
    lp = c.logprobs
    n = len(ref["context_ids"]) + len(ref["continuation_ids"])
    assert len(lp.tokens) == n + 3
    assert c.text.startswith(context + continuation)
    assert abs(sum(lp.token_logprobs[len(ref["context_ids"]):n]) - ref["logprob"]) < 1e-4
    # The BOS the tokenizer adds is not in the echoed text: width 0; every other token sits at its offset.
    assert lp.tokens[0] == "<|begin_of_text|>" and lp.text_offset[:2] == [0, 0]
    for tok, off in zip(lp.tokens[1:], lp.text_offset[1:]):
        assert c.text[off:off + len(tok)] == tok
    assert lp.text_offset == sorted(lp.text_offset)


def test_streamed_echo_equals_the_body(client):
    kw = dict(model="xinfer-tiny-shakespeare", prompt=PAIRS[2][0], echo=True, logprobs=2, max_tokens=4,
              temperature=0)
    body = client.completions.create(**kw).choices[0]
    text, toks, lps, offs, reasons = "", [], [], [], []
    first = True
    for chunk in client.completions.create(stream=True, **kw):
        for c in chunk.choices:
            if first:  # the prompt rides with the first output, its logprobs with it
                assert c.text.startswith(PAIRS[2][0]) and c.logprobs.token_logprobs[0] is None
                first = False
            text += c.text
            if c.logprobs:
                toks += c.logprobs.tokens
                lps += c.logprobs.token_logprobs
                offs += c.logprobs.text_offset
            if c.finish_reason:
                reasons.append(c.finish_reason)
    assert text == body.text and toks == body.logprobs.tokens and offs == body.logprobs.text_offset
    assert lps[0] is None and body.logprobs.token_logprobs[0] is None
    np.testing.assert_allclose(lps[1:], body.logprobs.token_logprobs[1:], atol=1e-6)
    assert reasons == [body.finish_reason]
    # max_tokens 0 streamed: one chunk with the prompt, finish_reason length
    chunks = list(client.completions.create(stream=True, **{**kw, "max_tokens": 0}))
    assert len(chunks) == 1 and chunks[0].choices[0].finish_reason == "length"
    assert chunks[0].choices[0].logprobs.tokens == body.logprobs.tokens[:len(chunks[0].choices[0].logprobs.tokens)]


def test_n_choices_and_prefix_cache_give_the_same_prompt_logprobs(client, tiny):
    prompt = PAIRS[3][0] + PAIRS[3][1]
    # A plain request first: its prompt blocks are in the prefix cache afterwards.
    client.completions.create(model="xinfer-tiny-shakespeare", prompt=prompt, max_tokens=1)
    before = tiny.metrics().get("xinfer:prefix_cache_hits_total")
    r = client.completions.create(model="xinfer-tiny-shakespeare", prompt=prompt, echo=True, logprobs=0,
                                  max_tokens=2, n=3, temperature=1.0, seed=7)
    cold = None
    for c in r.choices:
        plp = c.logprobs.token_logprobs[:r.usage.prompt_tokens]
        cold = cold or plp
        # Every choice computed every prompt position; chunks of different lengths in different batches
        # change the CPU GEMMs' summation order (measured up to 5e-7), not more.
        assert plp[0] is None
        np.testing.assert_allclose(plp[1:], cold[1:], atol=1e-5, rtol=0)
    if before is not None:
        assert tiny.metrics().get("xinfer:prefix_cache_hits_total") == before  # no cached prompt position used
    # Raw logprobs: the same with another temperature (and from a cache holding this prompt).
    again = client.completions.create(model="xinfer-tiny-shakespeare", prompt=prompt, echo=True, logprobs=0,
                                      max_tokens=0, temperature=0)
    assert again.choices[0].logprobs.token_logprobs[0] is None
    np.testing.assert_allclose(again.choices[0].logprobs.token_logprobs[1:], cold[1:], atol=1e-5, rtol=0)


def test_vllm_prompt_logprobs_extension(client, reference):
    ref = reference[4]
    ids = ref["context_ids"] + ref["continuation_ids"]
    r = client.completions.create(model="xinfer-tiny-shakespeare", prompt=ids, max_tokens=1, temperature=0,
                                  extra_body={"prompt_logprobs": 3})
    c = r.choices[0].model_dump()
    assert c["logprobs"] is None
    plp = c["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    for pos, entry in enumerate(plp[1:], start=1):
        tok = str(ids[pos])
        assert next(iter(entry)) == tok  # the prompt token leads, then the top 3 (rank 1..3), deduplicated
        rank = entry[tok]["rank"]
        ranks = sorted(v["rank"] for v in entry.values())
        assert ranks == ([1, 2, 3] if rank <= 3 else [1, 2, 3, rank])
        assert all(isinstance(v["decoded_token"], str) for v in entry.values())
        by_rank = sorted(entry.values(), key=lambda v: v["rank"])
        assert [v["logprob"] for v in by_rank] == sorted((v["logprob"] for v in by_rank), reverse=True)
    cont = [plp[p][str(ids[p])]["logprob"] for p in range(len(ref["context_ids"]), len(ids))]
    np.testing.assert_allclose(cont, ref["token_logprobs"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("body,param,needle", [
    ({"prompt": "x", "echo": True, "logprobs": 21, "max_tokens": 1}, "logprobs", "[0, 20]"),
    ({"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs", "[0, 20]"),
    ({"prompt": "x", "prompt_logprobs": -1}, "prompt_logprobs", "not supported"),
    ({"prompt": "x", "prompt_logprobs": 2, "stream": True}, "prompt_logprobs", "stream"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens", "only with 'echo'"),
    ({"prompt": "x " * 600, "echo": True, "logprobs": 1, "max_tokens": 0}, "prompt", "maximum context length"),
    ({"prompt": "the " * 400, "n": 8, "prompt_logprobs": 20, "max_tokens": 1}, "prompt_logprobs",
     "--max-request-logprobs"),
])
def test_bad_input(tiny, body, param, needle):
    status, j = tiny.json("POST", "/v1/completions", body)
    assert status == 400, j
    assert j["error"]["param"] == param and needle in j["error"]["message"], j


def test_echo_on_chat_is_refused(tiny):
    status, j = tiny.json("POST", "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}], "echo": True, "logprobs": True})
    assert status == 400 and j["error"]["param"] in ("echo", "messages"), j


@pytest.fixture(scope="module")
def smollm2(xinfer_bin, tmp_path_factory):
    r = subprocess.run(["bash", str(ROOT / "scripts/fetch_smollm2.sh")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    gguf = r.stdout.strip()
    s = Server(xinfer_bin, gguf, tmp_path_factory.mktemp("plp_smollm2") / "serve.log", "--max-num-seqs", "8")
    yield s, gguf
    assert s.stop() == 0


def test_smollm2_prompt_logprobs_vs_llama_cpp_and_eval(smollm2, xinfer_bin, tmp_path):
    server, gguf = smollm2
    g = json.load(open(GOLDEN))
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0, timeout=120)
    name = c.models.list().data[0].id
    ref = eval_loglik(xinfer_bin, gguf, [{"context_ids": k["ids"][:k["ctx_len"]],
                                          "continuation_ids": k["ids"][k["ctx_len"]:]} for k in g["cases"]], tmp_path)
    sums = []
    for case, mine_eval in zip(g["cases"], ref):
        # Our tokenizer gives llama.cpp's ids for the text (no BOS for SmolLM2).
        tok = server.json("POST", "/tokenize", {"prompt": case["context"] + case["continuation"]})[1]
        assert tok["tokens"] == case["ids"]
        r = c.completions.create(model=name, prompt=case["context"] + case["continuation"], echo=True, logprobs=5,
                                 max_tokens=1, temperature=0)
        lp = r.choices[0].logprobs
        mine = np.array(lp.token_logprobs[1:len(case["ids"])])
        gold = np.array([p["logprob"] for p in case["positions"]])
        # Same weights, both quantize activations to 8-bit blocks but not identically (our Q4_1 kernels vs
        # llama.cpp's Q8_1 path): measured per-token |diff| <= 0.46 nats, mean <= 0.105 over these prompts.
        # A position shift or a missing normalization would be several nats off.
        assert np.abs(mine - gold).max() < 0.75 and np.abs(mine - gold).mean() < 0.15
        # Where llama.cpp's top choice is clear (ahead by > 1 nat), the rank-1 token is the same.
        for p, pos in enumerate(case["positions"], start=1):
            if pos["top_logprobs"][0] - pos["top_logprobs"][1] > 1.0:
                top = lp.top_logprobs[p]
                best = server.json("POST", "/detokenize", {"tokens": pos["top_ids"][:1]})[1]["prompt"]
                assert max(top, key=top.get) == best, (case["context"], p)
        k = case["ctx_len"]
        total, _ = lm_eval_parse(r.choices[0], k)
        assert abs(total - mine_eval["logprob"]) < 1e-4  # the server equals xinfer eval exactly
        assert abs(total - sum(p["logprob"] for p in case["positions"][k - 1:])) < 0.6
        sums.append(total)
    # The multiple-choice answer lm-eval would pick is llama.cpp's: " Paris" over " Berlin".
    assert sums[0] > sums[1]


def test_chat_prompt_logprobs_on_the_response(tiny):
    status, j = tiny.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Good morrow"}],
                                                            "max_tokens": 2, "prompt_logprobs": 1})
    assert status == 200, j
    plp = j["prompt_logprobs"]  # once per response (one prompt), as vLLM
    assert len(plp) == j["usage"]["prompt_tokens"] and plp[0] is None
    assert all(1 <= len(e) <= 2 and all(v["logprob"] <= 0 for v in e.values()) for e in plp[1:])
    assert "prompt_logprobs" not in j["choices"][0]


def test_prompt_logprobs_while_other_requests_decode(client, reference):
    """Greedy generations from other threads keep decode rows (pipelined with --async-scheduling) in the
    steps that carry the echo requests' prompt rows; the prompt logprobs are unchanged."""
    stop = threading.Event()
    errors = []

    def generate():
        try:
            while not stop.is_set():
                client.completions.create(model="xinfer-tiny-shakespeare", prompt="ROMEO:", max_tokens=24,
                                          temperature=0, extra_body={"ignore_eos": True})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=generate) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for ref in reference:
            ids = ref["context_ids"] + ref["continuation_ids"]
            r = client.completions.create(model="xinfer-tiny-shakespeare", prompt=ids, echo=True, logprobs=1,
                                          max_tokens=1, temperature=0)
            total, greedy = lm_eval_parse(r.choices[0], len(ref["context_ids"]))
            assert abs(total - ref["logprob"]) < 1e-4 and greedy == ref["is_greedy"]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
