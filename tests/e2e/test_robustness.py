"""Dropped streams free their KV blocks, overload answers 429, output filter rules, SIGTERM drains."""
import json
import signal
import socket
import threading
import time

import pytest

GOLDEN_PREFIX = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                 "One day, she saw a big, red ball.")


def open_stream(port, body):
    """Sends a streaming request on a raw socket and returns it once the first SSE event has arrived."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(65536)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200")
    return sock


def wait_idle(server, timeout=10):
    deadline = time.time() + timeout
    while True:
        m = server.metrics()
        idle = (m["xinfer:num_requests_running"] == 0 and m["xinfer:num_requests_waiting"] == 0
                and m["xinfer:num_free_kv_cache_blocks"] == m["xinfer:num_kv_cache_blocks"]
                and m["xinfer:server_active_requests"] == 0)
        if idle or time.time() > deadline:
            return m, idle
        time.sleep(0.05)


def test_50_dropped_streams_free_every_block(start_server):
    s = start_server("--max-num-seqs", "64")
    body = {"prompt": [1], "max_tokens": 480, "temperature": 1.0, "stream": True, "ignore_eos": True}
    socks = [open_stream(s.port, body) for _ in range(50)]
    m = s.metrics()
    assert m["xinfer:num_requests_running"] + m["xinfer:num_requests_waiting"] > 0
    assert m["xinfer:num_free_kv_cache_blocks"] < m["xinfer:num_kv_cache_blocks"]
    t0 = time.time()
    for sock in socks:
        sock.close()
    m, idle = wait_idle(s)
    assert idle, m
    assert time.time() - t0 < 5
    assert m["xinfer:server_client_disconnects_total"] >= 50
    assert m["xinfer:kv_cache_usage_perc"] == 0
    assert m["xinfer:server_open_connections"] <= 1  # only the /metrics request: no leaked sessions
    code, _, data = s.request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 4})
    assert code == 200 and json.loads(data)["usage"]["completion_tokens"] == 4
    code, _, _ = s.request("GET", "/health")
    assert code == 200


def test_dropped_non_stream_request_is_aborted(start_server):
    s = start_server()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    data = json.dumps({"prompt": [1], "max_tokens": 480, "n": 16, "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    time.sleep(0.1)
    sock.close()
    m, idle = wait_idle(s)
    assert idle, m


def test_overload_answers_429(start_server):
    s = start_server("--max-num-seqs", "1", "--max-waiting", "1")
    body = {"prompt": [1], "max_tokens": 400, "ignore_eos": True}
    results = []

    def run():
        results.append(s.request("POST", "/v1/completions", body))

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r[0] for r in results)
    assert 429 in codes and 200 in codes, codes
    for code, _, data in results:
        if code == 429:
            err = json.loads(data)["error"]
            assert err["type"] == "rate_limit_error" and "overloaded" in err["message"]
        else:
            assert code == 200 and json.loads(data)["usage"]["completion_tokens"] == 400
    code, _, _ = s.request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2})
    assert code == 200


def write_rules(tmp_path, rules):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    return str(path)


def collect_stream(s, body):
    code, _, data = s.request("POST", "/v1/completions", {**body, "stream": True})
    assert code == 200
    text, reason = "", None
    events = [e for e in data.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    for e in events[:-1]:
        c = json.loads(e[len("data: "):])["choices"][0]
        text += c["text"]
        reason = c["finish_reason"] or reason
    return text, reason


def test_filter_rules_mask_and_stop(start_server, tmp_path):
    s = start_server("--filter-rules", write_rules(tmp_path, [
        {"pattern": "Lily", "action": "mask", "replacement": "[name]"},
        {"pattern": "out[a-z]+e", "type": "regex", "action": "stop"}]))
    body = {"prompt": [1], "max_tokens": 60, "temperature": 0}
    expected = "Once upon a time, there was a little girl named [name]. She loved to play "
    code, _, data = s.request("POST", "/v1/completions", body)
    c = json.loads(data)["choices"][0]
    assert (c["text"], c["finish_reason"]) == (expected, "stop")
    assert collect_stream(s, body) == (expected, "stop")


def test_filter_rules_content_filter(start_server, tmp_path):
    s = start_server("--filter-rules", write_rules(tmp_path, [
        {"pattern": "r[a-z]d ball", "type": "regex", "action": "content_filter"}]))
    body = {"prompt": [1], "max_tokens": 60, "temperature": 0}
    expected = GOLDEN_PREFIX[:GOLDEN_PREFIX.find("red ball")]
    code, _, data = s.request("POST", "/v1/completions", body)
    c = json.loads(data)["choices"][0]
    assert (c["text"], c["finish_reason"]) == (expected, "content_filter")
    assert collect_stream(s, body) == (expected, "content_filter")
    m, idle = wait_idle(s)
    assert idle and m['xinfer:server_choices_finished_total{finished_reason="content_filter"}'] == 2


def test_bad_filter_rules_file_fails_start(xinfer_bin, model_dir, tmp_path):
    import subprocess
    path = write_rules(tmp_path, [{"pattern": "(", "type": "regex", "action": "mask"}])
    r = subprocess.run([str(xinfer_bin), "serve", "--model", str(model_dir), "--filter-rules", path],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "does not compile" in r.stderr


def test_missing_default_model_is_a_clear_error(xinfer_bin, tmp_path):
    import subprocess
    import shutil
    exe = tmp_path / "xinfer"
    shutil.copy(xinfer_bin, exe)  # outside any checkout: no bundled model next to it
    r = subprocess.run([str(exe), "serve"], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert r.returncode == 1 and "bundled model" in r.stderr


def test_sigterm_drains_in_flight_and_exits_0(start_server):
    s = start_server()
    sock = open_stream(s.port, {"prompt": [1], "max_tokens": 300, "ignore_eos": True, "stream": True, "n": 4})
    s.proc.send_signal(signal.SIGTERM)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        if data.endswith(b"0\r\n\r\n"):
            break
    sock.close()
    assert b"data: [DONE]" in data
    assert data.count(b'"finish_reason":"length"') == 4  # every choice ran to the end
    assert s.proc.wait(timeout=30) == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=2).recv(1)


def test_idle_keep_alive_times_out_and_connection_limit(start_server):
    s = start_server("--keep-alive-timeout", "0.5", "--max-connections", "2")
    a = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    b = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    time.sleep(0.1)
    c = socket.create_connection(("127.0.0.1", s.port), timeout=5)  # third: refused with 503
    c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert c.recv(4096).startswith(b"HTTP/1.1 503")
    c.close()
    t0 = time.time()
    assert a.recv(1) == b"" and b.recv(1) == b""  # idle connections closed by the server
    assert time.time() - t0 < 3
    a.close()
    b.close()
    code, _, _ = s.request("GET", "/health")
    assert code == 200
