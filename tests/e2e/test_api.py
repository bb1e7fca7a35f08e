"""Every endpoint and parameter through the official openai client against a real `xinfer serve`.

References: transformers' greedy story of stories260K (tests/golden/stories260K/golden.json), the Hugging Face
`tokenizers` package for token counts, jinja2 for the chat template rendering."""
import json
import math
import pathlib

import jinja2
import pytest
import tokenizers

from xinfer_server import CHAT_TEMPLATE

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests/golden/stories260K/golden.json").read_text())
PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def hf_tok(model_dir):
    return tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def stream_text(client, **kw):
    """Concatenated text of a streamed completion, its finish reasons by index and the usage chunk."""
    texts, reasons, usage = {}, {}, None
    for chunk in client.completions.create(stream=True, **kw):
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                reasons[c.index] = c.finish_reason
    return texts, reasons, usage


def test_models(client, model_name):
    models = client.models.list()
    assert [m.id for m in models.data] == [model_name]
    assert client.models.retrieve(model_name).id == model_name


def test_greedy_completion_is_the_golden_story(client, model_name):
    # Token-id prompt [BOS] (as the golden was made) with ignore_eos: 200 tokens equal transformers'.
    r = client.completions.create(model=model_name, prompt=[1], max_tokens=200, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].text == GOLDEN["text"]
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == 1 and r.usage.completion_tokens == 200 and r.usage.total_tokens == 201


def test_usage_counts_match_hf_tokenizer(client, model_name, hf_tok):
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=7, temperature=0)
    assert r.usage.prompt_tokens == len(hf_tok.encode(PROMPT).ids)  # BOS included, as the post-processor adds
    assert r.usage.completion_tokens == 7
    assert ", there was a little girl named Lily".startswith(r.choices[0].text)


def test_stream_equals_non_stream_greedy_and_seeded(client, model_name):
    for params in ({"temperature": 0}, {"temperature": 1.0, "top_p": 0.9, "seed": 1234},
                   {"temperature": 0.8, "extra_body": {"top_k": 20, "min_p": 0.05}, "seed": 5,
                    "presence_penalty": 0.5, "frequency_penalty": 0.3}):
        full = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=40, **params)
        texts, reasons, usage = stream_text(client, model=model_name, prompt=PROMPT, max_tokens=40,
                                            stream_options={"include_usage": True}, **params)
        assert texts[0] == full.choices[0].text, params
        assert reasons[0] == full.choices[0].finish_reason
        assert usage.completion_tokens == full.usage.completion_tokens
        assert usage.prompt_tokens == full.usage.prompt_tokens


def test_seed_changes_and_repeats(client, model_name):
    def gen(seed):
        return client.completions.create(model=model_name, prompt=PROMPT, max_tokens=30, temperature=1.0,
                                         seed=seed).choices[0].text
    assert gen(7) == gen(7)
    assert len({gen(7), gen(8), gen(9)}) > 1


def test_n_choices(client, model_name):
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=20, temperature=1.0, seed=3, n=4,
                                  extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    assert len({c.text for c in r.choices}) > 1  # rng_stream = index: different samples
    assert r.usage.completion_tokens == 4 * 20 and r.usage.prompt_tokens == 5  # the prompt counts once
    texts, reasons, _ = stream_text(client, model=model_name, prompt=PROMPT, max_tokens=20, temperature=1.0,
                                    seed=3, n=4, extra_body={"ignore_eos": True})
    assert [texts[i] for i in range(4)] == [c.text for c in sorted(r.choices, key=lambda c: c.index)]


def test_batch_prompts(client, model_name):
    r = client.completions.create(model=model_name, prompt=[PROMPT, "The dog"], max_tokens=5, temperature=0, n=2)
    assert len(r.choices) == 4
    by_index = {c.index: c.text for c in r.choices}
    assert by_index[0] == by_index[1] and by_index[2] == by_index[3] and by_index[0] != by_index[2]


def test_token_prompt_equals_text_prompt(client, model_name, hf_tok):
    ids = hf_tok.encode(PROMPT).ids
    a = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=15, temperature=0)
    b = client.completions.create(model=model_name, prompt=ids, max_tokens=15, temperature=0)
    assert a.choices[0].text == b.choices[0].text


def test_stop_strings_spanning_tokens(client, model_name):
    base = client.completions.create(model=model_name, prompt=[1], max_tokens=60, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    assert base == GOLDEN["text"][:len(base)]
    for stop in ("girl named", "e was", "ly. She", ["zzz", "little"]):
        first = min(base.find(s) for s in ([stop] if isinstance(stop, str) else stop) if s in base)
        r = client.completions.create(model=model_name, prompt=[1], max_tokens=60, temperature=0, stop=stop)
        assert r.choices[0].text == base[:first], stop
        assert r.choices[0].finish_reason == "stop"
        texts, reasons, _ = stream_text(client, model=model_name, prompt=[1], max_tokens=60, temperature=0, stop=stop)
        assert texts[0] == base[:first] and reasons[0] == "stop"
    r = client.completions.create(model=model_name, prompt=[1], max_tokens=60, temperature=0, stop="girl named",
                                  extra_body={"include_stop_str_in_output": True})
    assert r.choices[0].text == base[:base.find("girl named") + len("girl named")]


def test_completion_logprobs(client, model_name):
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 8
    assert "".join(lp.tokens).replace(" ", "") == r.choices[0].text.replace(" ", "")
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0 and 1 <= len(top) <= 3
        assert math.isclose(chosen, max(top.values()), abs_tol=1e-4)  # greedy picks the most likely
    assert lp.text_offset == sorted(lp.text_offset)
    # streamed logprobs carry the same tokens
    toks = []
    for chunk in client.completions.create(model=model_name, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3,
                                           stream=True):
        for c in chunk.choices:
            if c.logprobs:
                toks += c.logprobs.tokens
    assert toks == lp.tokens


def test_echo(client, model_name):
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=5, temperature=0, echo=True)
    plain = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=5, temperature=0)
    assert r.choices[0].text == PROMPT + plain.choices[0].text
    texts, _, _ = stream_text(client, model=model_name, prompt=PROMPT, max_tokens=5, temperature=0, echo=True)
    assert texts[0] == r.choices[0].text


def test_logit_bias_and_ignore_eos(client, model_name, hf_tok):
    tok = hf_tok.encode("the", add_special_tokens=False).ids[-1]
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=6, temperature=0,
                                  logit_bias={str(tok): 100}, logprobs=1)
    assert r.choices[0].logprobs.tokens == [hf_tok.decode([tok])] * 6
    r = client.completions.create(model=model_name, prompt=[1], max_tokens=300, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 300 and r.choices[0].finish_reason == "length"


def test_max_tokens_default_and_repetition_penalty(client, model_name):
    r = client.completions.create(model=model_name, prompt=PROMPT, temperature=0)
    assert r.usage.completion_tokens == 16  # OpenAI's default for completions
    a = client.completions.create(model=model_name, prompt=[1], max_tokens=100, temperature=0,
                                  extra_body={"ignore_eos": True, "repetition_penalty": 1.3})
    assert a.choices[0].text != GOLDEN["text"][:len(a.choices[0].text)]


def test_priority_and_user_accepted(client, model_name):
    r = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=3, user="someone",
                                  extra_body={"priority": -5})
    assert r.usage.completion_tokens == 3


def render_chat(messages, add_generation_prompt=True):
    env = jinja2.Environment()
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                 bos_token="<s>", eos_token="</s>")


def test_chat_completion(client, server, model_name, hf_tok):
    messages = [{"role": "system", "content": "You tell stories."},
                {"role": "user", "content": [{"type": "text", "text": "Tell me"}, {"type": "text", "text": "a story"}]}]
    r = client.chat.completions.create(model=model_name, messages=messages, max_completion_tokens=12, temperature=0)
    expected_prompt = render_chat([messages[0], {"role": "user", "content": "Tell me\na story"}])
    # tokenizer_config has no add_bos for chat: the template carries BOS; encode without special tokens.
    assert r.usage.prompt_tokens == len(hf_tok.encode(expected_prompt, add_special_tokens=False).ids)
    assert r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens <= 12
    status, tok = server.json("POST", "/tokenize", {"messages": messages})
    assert status == 200 and tok["count"] == r.usage.prompt_tokens
    # stream: same text, role first, usage last
    parts, roles, usage = [], [], None
    for chunk in client.chat.completions.create(model=model_name, messages=messages, max_completion_tokens=12,
                                                temperature=0, stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                parts.append(c.delta.content)
    assert roles == ["assistant"]
    assert "".join(parts) == r.choices[0].message.content
    assert usage.total_tokens == r.usage.total_tokens


def test_chat_logprobs_and_n(client, model_name):
    r = client.chat.completions.create(model=model_name, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=5, temperature=0, logprobs=True, top_logprobs=2, n=2, seed=1)
    assert len(r.choices) == 2
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens // 2
    for e in content:
        assert len(e.top_logprobs) == 2 and e.bytes == list(e.token.encode())
        assert math.isclose(e.logprob, e.top_logprobs[0].logprob, abs_tol=1e-4)


def test_tokenize_detokenize(server, hf_tok, model_name):
    text = "Lily and Ben went to the park. \u00e9"
    status, r = server.json("POST", "/tokenize", {"model": model_name, "prompt": text})
    assert status == 200
    assert r["tokens"] == hf_tok.encode(text).ids and r["count"] == len(r["tokens"]) and r["max_model_len"] > 0
    status, r2 = server.json("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
    assert r2["tokens"] == hf_tok.encode(text, add_special_tokens=False).ids
    status, d = server.json("POST", "/detokenize", {"tokens": r2["tokens"]})
    assert status == 200 and d["prompt"] == hf_tok.decode(r2["tokens"], skip_special_tokens=False)


def test_health_and_metrics(server, client, model_name):
    status, _, body = server.request("GET", "/health")
    assert status == 200
    client.completions.create(model=model_name, prompt=PROMPT, max_tokens=2)
    m = server.metrics()
    for name in ("xinfer:num_requests_running", "xinfer:num_requests_waiting", "xinfer:kv_cache_usage_perc",
                 "xinfer:num_free_kv_cache_blocks", "xinfer:server_active_requests",
                 "xinfer:time_to_first_token_seconds_count", "xinfer:e2e_request_latency_seconds_count",
                 "xinfer:request_queue_time_seconds_count", "xinfer:prompt_tokens_total",
                 "xinfer:generation_tokens_total"):
        assert any(k == name or k.startswith(name + "{") for k in m), name
    assert m['xinfer:server_http_responses_total{code="200"}'] >= 1


def test_keep_alive_reuses_connection(server):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    for _ in range(3):
        conn.request("GET", "/v1/models")
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["object"] == "list"
    sock = conn.sock
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": PROMPT, "max_tokens": 3, "stream": True}),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read().decode()
    assert body.endswith("data: [DONE]\n\n") and conn.sock is sock
    conn.close()
