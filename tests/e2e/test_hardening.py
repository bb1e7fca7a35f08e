"""Hostile bodies and costly requests: bounded JSON (depth, keys) answered with an OpenAI-shaped 400 while
everyone else is served, the API key checked before any body is parsed, per-request cost bounds,
unsupported features refused, TTFT on reused keep-alive connections, vLLM metric names."""
import json
import socket
import statistics
import threading
import time

import pytest

ROUTES = ["/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"]


def deep_body(levels=100000):
    return '{"prompt": ' + "[" * levels + "]" * levels + ', "model": "x"}'


def many_keys_body(n=100000):
    return "{" + ",".join(f'"unknown_key_{i}": {i}' for i in range(n)) + ', "prompt": "Once"}'


def assert_openai_error(data, status, expected_status, needle):
    assert status == expected_status, data
    err = json.loads(data)["error"]
    assert needle in err["message"], err
    assert set(err) == {"message", "type", "param", "code"}
    return err


@pytest.mark.parametrize("route", ROUTES)
def test_deep_nesting_is_a_400_naming_the_limit(server, route):
    status, _, data = server.request("POST", route, deep_body())
    assert_openai_error(data, status, 400, "nests deeper than the limit of 64 levels")
    # Deep values in the fields that crashed even as the last key.
    for field in ("chat_template_kwargs", "model"):
        body = '{"messages": [{"role": "user", "content": "hi"}], "%s": %s}' % (field, "{\"a\":" * 100000 + "1" + "}" * 100000)
        status, _, data = server.request("POST", route, body)
        assert_openai_error(data, status, 400, "nests deeper than the limit")
    assert server.request("GET", "/health")[0] == 200


def test_many_keys_is_fast(server):
    body = many_keys_body()
    assert len(body) > 1_500_000
    t0 = time.time()
    status, _, data = server.request("POST", "/v1/completions", body)
    took = time.time() - t0
    assert_openai_error(data, status, 400, "more than the limit of 4096 keys")
    assert took < 1.0, took  # was ~14 s (ordered_map insertion is a linear scan per key)
    # Under the key limit, a body of 4,000 unknown keys is served.
    body = "{" + ",".join(f'"k{i}": {i}' for i in range(4000)) + ', "prompt": "Once", "max_tokens": 2}'
    status, _, data = server.request("POST", "/v1/completions", body)
    assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 2


def server_thread_cpu_ms(pid, name):
    """CPU time (ms, from schedstat: ns resolution) of a process's threads called `name`."""
    import os
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        if comm == name:
            total += ns
    return total / 1e6


def raw_exchange(sock, head, body=b"", chunks=None):
    """Sends one request on `sock` (body whole, or as chunked coding from `chunks`), returns (status, body)."""
    if chunks is not None:
        body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    sock.sendall(head + body)
    return read_response(sock)


def read_response(sock):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, buf
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    status = int(head.split(b" ", 2)[1])
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk
        rest += chunk
    return status, rest[:length]


def test_large_body_is_read_off_the_io_threads(server):
    """A body of >= --low-priority-body-bytes (or chunked) is read on the nice +10 thread: the socket moves
    to that thread's reactor once the headers say so, and the io threads (which compete with the engine at
    normal priority) spend only the headers and the answer on it. A 4 MB body cost them 76 ms with the read
    buffer at header size, 4.5-7 ms with 64 KiB reads on the io thread; read elsewhere, ~0.1-0.4 ms. This body is
    refused at its 12th byte (the UTF-8 check and the parse also run on the nice +10 thread). CPU time of
    the threads by name (schedstat), not wall time: the machine's other load does not inflate it."""
    body = b'{"prompt": x' + b" " * (4 << 20)
    pid = server.proc.pid
    server.request("POST", "/v1/completions", body)  # first use: page faults of the buffers
    io0, bg0 = server_thread_cpu_ms(pid, "xi-http-io"), server_thread_cpu_ms(pid, "xi-http-bg")
    for _ in range(10):
        status, _, data = server.request("POST", "/v1/completions", body)
        assert_openai_error(data, status, 400, "not valid JSON")
    io = (server_thread_cpu_ms(pid, "xi-http-io") - io0) / 10
    bg = (server_thread_cpu_ms(pid, "xi-http-bg") - bg0) / 10
    print(f"4 MB body: {io:.2f} ms of io-thread CPU, {bg:.2f} ms on the low-priority thread, each")
    assert io < 1.5 and bg > io, (io, bg)


def test_oversized_body_is_drained_off_the_io_threads(server):
    """A 20 MB body past --max-body-bytes (8 MiB) is answered 413 from its headers; the lingering close then
    reads and drops what the client still sends so that it reads the answer (no reset). That drain ran on
    the io thread, 4 KiB at a time: 37 ms of its CPU per such body. Now 64 KiB there, the rest on the nice
    +10 thread."""
    pid = server.proc.pid
    body = b" " * (20 << 20)
    io0 = server_thread_cpu_ms(pid, "xi-http-io")
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        try:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            pass
        status, data = read_response(sock)
        sock.close()
        assert_openai_error(data, status, 413, "exceeds the limit")
    io = (server_thread_cpu_ms(pid, "xi-http-io") - io0) / 3
    print(f"20 MB body past the limit: {io:.2f} ms of io-thread CPU each")
    assert io < 5.0, io


def test_bodies_read_elsewhere_keep_the_connection(server, model_name):
    """The socket comes back to its io thread after a body read on the low-priority thread: on one keep-alive
    connection a large body, a small request, a chunked body, `Expect: 100-continue` with a large body, then a
    chunked body past --max-body-bytes (413, read there too) are each answered in turn."""
    def head(length=None, extra=b""):
        size = b"Transfer-Encoding: chunked\r\n" if length is None else b"Content-Length: %d\r\n" % length
        return b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" + extra + size + b"\r\n"

    large = json.dumps({"model": model_name, "prompt": "Once", "max_tokens": 2, "user": "u" * 200000}).encode()
    small = json.dumps({"model": model_name, "prompt": "Once", "max_tokens": 2}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    for _ in range(2):
        status, data = raw_exchange(sock, head(len(large)), large)
        assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 2, data
        status, data = raw_exchange(sock, head(len(small)), small)
        assert status == 200, data
    status, data = raw_exchange(sock, head(), chunks=[large[:70000], large[70000:70001], large[70001:]])
    assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 2, data
    sock.sendall(head(len(large), b"Expect: 100-continue\r\n"))
    got = b""
    while b"\r\n\r\n" not in got:
        got += sock.recv(4096)
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), got
    status, data = raw_exchange(sock, b"", large)
    assert status == 200, data
    over = b" " * (1 << 20)
    sock.sendall(head())
    try:
        for _ in range(9):  # 9 MiB in 1 MiB chunks, past the default 8 MiB limit
            sock.sendall(b"%x\r\n%s\r\n" % (len(over), over))
    except OSError:
        pass  # the server answered and closed before the end
    status, data = read_response(sock)
    assert_openai_error(data, status, 413, "exceeds the limit")
    sock.close()
    assert server.request("POST", "/v1/completions", small)[0] == 200


def test_drain_closes_a_connection_whose_body_is_read_elsewhere(start_server):
    """SIGTERM while a large body is half sent: the connection (its socket on the low-priority thread's
    reactor) closes at once, as one whose body an io thread reads, and the server exits 0 (before the drain
    cancelled that read, the connection stayed open until the body's timeout and the exit waited 5 s)."""
    import signal
    s = start_server()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000000\r\n\r\n" + b" " * 100000)
    time.sleep(0.3)
    t0 = time.perf_counter()
    s.proc.send_signal(signal.SIGTERM)
    assert sock.recv(1000) == b""
    closed_after = time.perf_counter() - t0
    assert s.proc.wait(timeout=30) == 0
    exited_after = time.perf_counter() - t0
    sock.close()
    assert closed_after < 2.0 and exited_after < 4.0, (closed_after, exited_after)


def test_api_key_checked_before_the_body(start_server):
    s = start_server("--api-key", "sekret")
    for route in ROUTES:
        status, headers, data = s.request("POST", route, deep_body())
        assert_openai_error(data, status, 401, "Incorrect API key")
        status, _, data = s.request("POST", route, '{"prompt": "x"}')
        assert status == 401, (route, data)
    status, _, data = s.request("POST", "/tokenize", {"prompt": "Once"}, {"Authorization": "Bearer sekret"})
    assert status == 200 and json.loads(data)["count"] > 0
    status, _, data = s.request("POST", "/tokenize", deep_body(), {"Authorization": "Bearer sekret"})
    assert_openai_error(data, status, 400, "nests deeper")
    assert s.request("GET", "/health")[0] == 200   # open, as documented
    assert s.request("GET", "/metrics")[0] == 200


def test_request_cost_bounds(server, model_name):
    # ~100 bytes that used to cost minutes, tens of MB and a GB of memory.
    status, _, data = server.request("POST", "/v1/chat/completions", {
        "model": model_name, "messages": [{"role": "user", "content": "hi"}], "n": 128, "logprobs": True,
        "top_logprobs": 20})
    err = assert_openai_error(data, status, 400, "--max-request-tokens")
    assert err["code"] == "request_too_costly"
    status, _, data = server.request("POST", "/v1/completions", {
        "model": model_name, "prompt": "Once", "n": 64, "max_tokens": 64, "logprobs": 20})
    err = assert_openai_error(data, status, 400, "--max-request-logprobs")
    # Just under both bounds is served.
    status, _, data = server.request("POST", "/v1/completions", {
        "model": model_name, "prompt": "Once", "n": 2, "max_tokens": 4, "logprobs": 2})
    assert status == 200 and len(json.loads(data)["choices"]) == 2


def test_bounds_are_flags(start_server, model_name):
    s = start_server("--max-request-tokens", "10", "--max-request-logprobs", "1000000")
    status, _, data = s.request("POST", "/v1/completions", {"prompt": "Once", "n": 3, "max_tokens": 4})
    assert_openai_error(data, status, 400, "up to 12 tokens")
    status, _, _ = s.request("POST", "/v1/completions", {"prompt": "Once", "n": 2, "max_tokens": 5})
    assert status == 200


def test_unsupported_features_are_refused(server, model_name):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    base = {"model": model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    status, _, data = server.request("POST", "/v1/chat/completions", {**base, "tools": tools, "tool_choice": "required"})
    err = assert_openai_error(data, status, 400, "not supported")
    assert err["param"] == "tool_choice"
    for fmt in ({"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}):
        status, _, data = server.request("POST", "/v1/chat/completions", {**base, "response_format": fmt})
        err = assert_openai_error(data, status, 400, "not supported")
        assert err["param"] == "response_format"
    status, _, _ = server.request("POST", "/v1/chat/completions", {**base, "tools": tools, "tool_choice": "auto"})
    assert status == 200


def stream_ttft_openai(client, model_name, n):
    """TTFT of n sequential streamed requests through one pooled openai client (its connection is reused)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        stream = client.completions.create(model=model_name, prompt="Once upon a time", max_tokens=4, stream=True)
        first = None
        for _chunk in stream:
            if first is None:
                first = time.perf_counter() - t0
        out.append(first)
    return out


def stream_ttft_http_client(conn, model_name):
    """TTFT of one streamed request on an http.client connection (new or reused), read to the end."""
    body = json.dumps({"model": model_name, "prompt": "Once upon a time", "max_tokens": 4, "stream": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    first = r.read1(65536)
    ttft = time.perf_counter() - t0
    assert r.status == 200 and first.startswith(b"data: ")
    r.read()
    return ttft


def stream_ttft_fresh(port, model_name):
    body = json.dumps({"model": model_name, "prompt": "Once upon a time", "max_tokens": 4, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    t0 = time.perf_counter()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(65536)
        assert chunk
        got += chunk
    ttft = time.perf_counter() - t0
    sock.close()
    return ttft


def test_reused_connection_ttft_matches_a_new_connection(start_server, model_name):
    """Nagle + the client's delayed ACK held each streamed request's first chunk ~40 ms on a reused
    keep-alive connection (not on a new one). Same client code both ways (http.client, one persistent
    connection vs a new one per request), only the reuse differs; the pooled openai client's TTFT is printed."""
    import http.client
    import openai
    s = start_server()
    reused_conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    stream_ttft_http_client(reused_conn, model_name)  # opens the connection
    reused, fresh = [], []
    for _ in range(15):
        reused.append(stream_ttft_http_client(reused_conn, model_name))
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        fresh.append(stream_ttft_http_client(conn, model_name))
        conn.close()
    reused_conn.close()
    r, f = statistics.median(reused), statistics.median(fresh)
    client = openai.OpenAI(base_url=s.base_url + "/v1", api_key="x", max_retries=0, timeout=30)
    pooled = statistics.median(stream_ttft_openai(client, model_name, 12)[2:])
    print(f"TTFT median: http.client reused {r * 1e3:.2f} ms, new connection {f * 1e3:.2f} ms; "
          f"openai pooled client {pooled * 1e3:.2f} ms")
    assert r - f < 0.005, (reused, fresh)
    # The SDK's own CPU cost (pydantic, its HTTP stack) is in `pooled` and swings with machine load, so it
    # is printed, not asserted: the http.client pair above is the guard.


def test_hostile_bodies_do_not_delay_other_streams(xinfer_bin, model_dir, tmp_path):
    """bench/hostile_load.py at 32 streams (PERF.md has the 300-stream runs): its C++ client, windows without
    and with a 100,000-level and a 100,000-key body sent together every 0.5 s by an attacker at nice 19.
    Every stream request completes and every hostile body gets its 400. What bounds the delay a pair can
    cause the engine (whose threads run at normal priority) is the CPU the pair takes at normal priority:
    the io threads' share, measured per thread (schedstat) on the idle server: ~0.7 ms per pair with the body
    read on the nice +10 thread (2.5-4 ms when the io thread read it, 7.5-11.5 ms when it also parsed it).
    Wall-clock TTFT percentiles of a shared 2-core machine are printed, and only a stall (seconds, as the
    unbounded parser's 13.5 s) fails them."""
    import importlib.util
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    client = xinfer_bin.parents[3] / "bench/hostile_load_client"
    if not client.exists():
        pytest.fail(f"{client} not built: build the target hostile_load_client (scripts/test.sh builds all)")
    spec = importlib.util.spec_from_file_location("hostile_load", root / "bench/hostile_load.py")
    hl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hl)
    out = tmp_path / "hostile.json"
    rc = hl.main(["--xinfer", str(xinfer_bin), "--client", str(client), "--model", str(model_dir), "--streams", "32",
                  "--windows", "8", "--window-s", "1.0", "--warmup-s", "1", "--bootstrap", "200",
                  "--server-args", "--max-num-seqs 64 --threads 2", "--json", str(out)])
    r = json.loads(out.read_text())
    assert rc == 0, r
    assert r["stream_failed"] == 0 and r["hostile_not_400"] == 0 and r["hostile_sent"] >= 8, r
    assert r["pooled"]["without"]["n"] >= 20 and r["pooled"]["with"]["n"] >= 20, r
    cost = r["pair_cpu_ms_idle"]
    io, bg = cost.get("xi-http-io@nice0", 0.0), cost.get("xi-http-bg@nice10", 0.0)
    assert io < 2.0 and bg > io, cost
    assert r["with_minus_without"]["p50"] < 1000, r


VLLM_NAMES = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:num_requests_running",
              "vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
              "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total"]


@pytest.mark.parametrize("prefix", ["vllm", "both"])
def test_metrics_prefix(start_server, model_name, prefix):
    s = start_server("--metrics-prefix", prefix)
    assert s.request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 3})[0] == 200
    status, _, data = s.request("GET", "/metrics")
    text = data.decode()
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    for name in VLLM_NAMES:
        rows = [line for line in samples if line.split("{")[0].split(" ")[0] in (name, name + "_count")]
        assert rows, name
        assert all(f'model_name="{model_name}"' in line for line in rows), rows
        assert f"# TYPE {name} " in text
    gen = [line for line in samples if line.startswith("vllm:generation_tokens_total")]
    assert float(gen[0].rsplit(" ", 1)[1]) >= 3
    assert ("xinfer:num_requests_running" in text) == (prefix == "both")


def test_fuzz_targets_bounded_run():
    """scripts/fuzz.sh: both libFuzzer targets (ASan + UBSan) for 20 s each from the committed corpora;
    any crash, leak, sanitizer report or timeout fails. Needs clang-14 with libFuzzer (scripts/fuzz.sh
    installs it; here the test runs where clang++-14 is present or XINFER_FUZZ=1 asks for it)."""
    import os
    import pathlib
    import shutil
    import subprocess
    if shutil.which("clang++-14") is None and os.environ.get("XINFER_FUZZ") != "1":
        pytest.skip("clang++-14 not installed (XINFER_FUZZ=1 makes scripts/fuzz.sh install it)")
    root = pathlib.Path(__file__).resolve().parents[2]
    seconds = os.environ.get("XINFER_FUZZ_SECONDS", "20")
    r = subprocess.run(["bash", str(root / "scripts/fuzz.sh"), seconds], capture_output=True, text=True,
                       timeout=900, cwd=root)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
