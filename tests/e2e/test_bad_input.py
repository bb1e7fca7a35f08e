"""Bad input: each case gets a clear 4xx in OpenAI's error shape, and the server keeps serving others."""
import json
import socket

import pytest

GOOD = {"prompt": "Once upon a time", "max_tokens": 2}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

# (name, method, path, body (dict / str / bytes), headers, expected status, text the message must contain)
CASES = [
    ("malformed json", "POST", "/v1/completions", '{"prompt": "x",', {}, 400, "not valid JSON"),
    ("json not an object", "POST", "/v1/completions", "[1, 2]", {}, 400, "JSON object"),
    ("empty body", "POST", "/v1/completions", "", {}, 400, "not valid JSON"),
    ("invalid utf-8 body", "POST", "/v1/completions", b'{"prompt": "\xff\xfe"}', {}, 400, "UTF-8"),
    ("lone surrogate escape", "POST", "/v1/completions", '{"prompt": "\\ud800", "max_tokens": 1}', {}, 400, "JSON"),
    ("missing prompt", "POST", "/v1/completions", {"max_tokens": 2}, {}, 400, "'prompt' is required"),
    ("prompt wrong type", "POST", "/v1/completions", {"prompt": 5}, {}, 400, "'prompt' must be"),
    ("prompt token out of vocab", "POST", "/v1/completions", {"prompt": [1, 99999]}, {}, 400, "token ids"),
    ("negative token id", "POST", "/v1/completions", {"prompt": [-1]}, {}, 400, "token ids"),
    ("empty prompt list", "POST", "/v1/completions", {"prompt": []}, {}, 400, "must not be empty"),
    ("max_tokens string", "POST", "/v1/completions", {**GOOD, "max_tokens": "10"}, {}, 400, "'max_tokens' must be an integer"),
    ("max_tokens zero", "POST", "/v1/completions", {**GOOD, "max_tokens": 0}, {}, 400, "'max_tokens' must be in"),
    ("max_tokens float", "POST", "/v1/completions", {**GOOD, "max_tokens": 2.5}, {}, 400, "integer"),
    ("temperature too high", "POST", "/v1/completions", {**GOOD, "temperature": 5}, {}, 400, "'temperature' must be in"),
    ("temperature string", "POST", "/v1/completions", {**GOOD, "temperature": "hot"}, {}, 400, "must be a number"),
    ("top_p zero", "POST", "/v1/completions", {**GOOD, "top_p": 0}, {}, 400, "'top_p' must be in (0, 1]"),
    ("top_k below -1", "POST", "/v1/completions", {**GOOD, "top_k": -2}, {}, 400, "'top_k'"),
    ("min_p above 1", "POST", "/v1/completions", {**GOOD, "min_p": 1.5}, {}, 400, "'min_p'"),
    ("presence_penalty out of range", "POST", "/v1/completions", {**GOOD, "presence_penalty": 3}, {}, 400, "presence_penalty"),
    ("repetition_penalty zero", "POST", "/v1/completions", {**GOOD, "repetition_penalty": 0}, {}, 400, "repetition_penalty"),
    ("n zero", "POST", "/v1/completions", {**GOOD, "n": 0}, {}, 400, "'n' must be in"),
    ("n too large", "POST", "/v1/completions", {**GOOD, "n": 1000}, {}, 400, "'n' must be in"),
    ("logprobs too many", "POST", "/v1/completions", {**GOOD, "logprobs": 50}, {}, 400, "'logprobs' must be in"),
    ("stop wrong type", "POST", "/v1/completions", {**GOOD, "stop": 7}, {}, 400, "'stop' must be"),
    ("stop list with number", "POST", "/v1/completions", {**GOOD, "stop": ["a", 1]}, {}, 400, "'stop' must be"),
    ("empty stop string", "POST", "/v1/completions", {**GOOD, "stop": ""}, {}, 400, "must not be empty"),
    ("logit_bias bad key", "POST", "/v1/completions", {**GOOD, "logit_bias": {"abc": 1}}, {}, 400, "logit_bias"),
    ("logit_bias out of range", "POST", "/v1/completions", {**GOOD, "logit_bias": {"5": 500}}, {}, 400, "[-100, 100]"),
    ("seed string", "POST", "/v1/completions", {**GOOD, "seed": "x"}, {}, 400, "'seed' must be an integer"),
    ("stream not bool", "POST", "/v1/completions", {**GOOD, "stream": "yes"}, {}, 400, "'stream' must be a boolean"),
    ("stream_options without stream", "POST", "/v1/completions", {**GOOD, "stream_options": {"include_usage": True}}, {}, 400, "stream_options"),
    ("prompt too long", "POST", "/v1/completions", {"prompt": [1] * 600, "max_tokens": 1}, {}, 400, "maximum context length is"),
    ("prompt + max_tokens too long", "POST", "/v1/completions", {"prompt": [1] * 10, "max_tokens": 600}, {}, 400, "maximum context length is"),
    ("unknown model", "POST", "/v1/completions", {**GOOD, "model": "gpt-9"}, {}, 404, "does not exist"),
    ("unknown model retrieve", "GET", "/v1/models/gpt-9", None, {}, 404, "does not exist"),
    ("unknown route", "GET", "/v1/nothing", None, {}, 404, "Not Found"),
    ("wrong method", "GET", "/v1/completions", None, {}, 405, "Method Not Allowed"),
    ("wrong method health", "POST", "/health", "{}", {}, 405, "Method Not Allowed"),
    ("chat missing messages", "POST", "/v1/chat/completions", {"max_tokens": 2}, {}, 400, "'messages' is required"),
    ("chat empty messages", "POST", "/v1/chat/completions", {"messages": []}, {}, 400, "must not be empty"),
    ("chat messages not list", "POST", "/v1/chat/completions", {"messages": "hi"}, {}, 400, "must be a list"),
    ("chat bad role", "POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, {}, 400, "role 'wizard'"),
    ("chat missing role", "POST", "/v1/chat/completions", {"messages": [{"content": "hi"}]}, {}, 400, "role"),
    ("chat missing content", "POST", "/v1/chat/completions", {"messages": [{"role": "user"}]}, {}, 400, "content is required"),
    ("chat content wrong type", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, {}, 400, "content must be"),
    ("chat image part", "POST", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, {}, 400, "not supported"),
    ("chat top_logprobs without logprobs", "POST", "/v1/chat/completions", {**CHAT, "top_logprobs": 2}, {}, 400, "requires 'logprobs'"),
    ("chat max_completion_tokens negative", "POST", "/v1/chat/completions", {**CHAT, "max_completion_tokens": -3}, {}, 400, "max_completion_tokens"),
    ("chat unknown model", "POST", "/v1/chat/completions", {**CHAT, "model": "nope"}, {}, 404, "does not exist"),
    ("tokenize without prompt", "POST", "/tokenize", {}, {}, 400, "'prompt'"),
    ("detokenize bad ids", "POST", "/detokenize", {"tokens": [1, "a"]}, {}, 400, "token ids"),
]


def check_error(status, data, expected_status, needle):
    assert status == expected_status, data
    err = json.loads(data)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert needle in err["message"], err
    return err


@pytest.mark.parametrize("name,method,path,body,headers,status,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input(server, name, method, path, body, headers, status, needle):
    code, _, data = server.request(method, path, body, headers)
    err = check_error(code, data, status, needle)
    if status == 400:
        assert err["type"] == "invalid_request_error"
    if name == "unknown model":
        assert err["code"] == "model_not_found"
    # ... and the server still answers a good request.
    code, _, data = server.request("POST", "/v1/completions", GOOD)
    assert code == 200 and json.loads(data)["usage"]["completion_tokens"] == 2


def test_body_too_large(start_server):
    s = start_server("--max-body-bytes", "4096")
    code, _, data = s.request("POST", "/v1/completions", {"prompt": "x" * 100000, "max_tokens": 1})
    check_error(code, data, 413, "exceeds the limit")
    code, _, data = s.request("POST", "/v1/completions", GOOD)
    assert code == 200


def test_malformed_http(server):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(b"GARBAGE / HTTP/9.9\r\n\r\n")
    reply = sock.recv(4096)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 400")
    code, _, _ = server.request("GET", "/health")
    assert code == 200


def test_api_key(start_server):
    s = start_server("--api-key", "sekrit")
    code, headers, data = s.request("POST", "/v1/completions", GOOD)
    err = check_error(code, data, 401, "Incorrect API key")
    assert err["code"] == "invalid_api_key"
    code, _, data = s.request("POST", "/v1/completions", GOOD, {"Authorization": "Bearer sekrit-not"})
    check_error(code, data, 401, "Incorrect API key")
    code, _, data = s.request("POST", "/v1/completions", GOOD, {"Authorization": "Bearer sekrit"})
    assert code == 200
    code, _, _ = s.request("GET", "/health")  # health and metrics stay open, as vLLM's
    assert code == 200
    import openai
    c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        c.models.list()
    c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="sekrit", max_retries=0)
    assert c.models.list().data[0].id == "stories260K"
