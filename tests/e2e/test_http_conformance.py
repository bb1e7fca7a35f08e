"""HTTP/1.1 as RFC 9110/9112 say, on raw sockets (a client library would hide what is checked here):
HEAD without a body, Expect: 100-continue, a Transfer-Encoding other than chunked, HTTP/1.0 clients
(close-delimited bodies, no chunked coding), and Host required in HTTP/1.1."""
import json
import socket
import time

import pytest


def connect(server):
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def read_head(sock, buf=b""):
    """Reads up to the end of a response's headers: (status, headers dict lower-cased, bytes after them)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before the headers ended: {buf!r}"
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, value = line.split(":", 1)
        headers[name.strip().lower()] = value.strip()
    return status, headers, rest


def read_until_close(sock, buf=b""):
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return buf
        buf += chunk


def recv_nothing_for(sock, seconds):
    """True if nothing arrives within `seconds` (the connection stays open and silent)."""
    sock.settimeout(seconds)
    try:
        data = sock.recv(65536)
    except socket.timeout:
        return True
    finally:
        sock.settimeout(10)
    return data == b""  # b"" would mean closed: not silent-and-open


def post_bytes(path, body, extra=b"", version=b"HTTP/1.1"):
    return (b"POST " + path + b" " + version + b"\r\nHost: t\r\nContent-Type: application/json\r\n" + extra +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def test_head_has_headers_but_no_body(server):
    sock = connect(server)
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n")
    status, headers, rest = read_head(sock)
    body_len = int(headers["content-length"])
    while len(rest) < body_len:
        rest += sock.recv(65536)
    assert status == 200 and body_len > 0 and len(rest) == body_len
    sock.sendall(b"HEAD /v1/models HTTP/1.1\r\nHost: t\r\n\r\n")
    status, headers, rest = read_head(sock)
    assert status == 200
    assert int(headers["content-length"]) == body_len  # what GET would send (RFC 9110 9.3.2)
    assert rest == b"" and recv_nothing_for(sock, 0.3), "a HEAD response must not carry a body"
    # The connection stays usable: the next response starts with its own status line.
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
    status, _, _ = read_head(sock)
    assert status == 200
    sock.close()


def test_expect_100_continue(server, model_name):
    body = json.dumps({"model": model_name, "prompt": "Once upon", "max_tokens": 2, "pad": "x" * 2048}).encode()
    sock = connect(server)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                 b"Expect: 100-continue\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    t0 = time.time()
    status, _, rest = read_head(sock)  # without the body sent: only an interim 100 can come
    assert status == 100 and time.time() - t0 < 0.5
    sock.sendall(body)
    status, headers, rest = read_head(sock, rest)
    assert status == 200
    while len(rest) < int(headers["content-length"]):
        rest += sock.recv(65536)
    assert json.loads(rest)["usage"]["completion_tokens"] == 2
    sock.close()


def test_transfer_encoding_other_than_chunked_is_400_and_close(server):
    # The "body" is itself a request: read as body-less, it would be answered as a second request
    # (request smuggling behind a proxy). RFC 9112 6.3: 400, then close.
    smuggled = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
    sock = connect(server)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n" + smuggled)
    status, headers, rest = read_head(sock)
    assert status == 400
    rest = read_until_close(sock, rest)  # closes: nothing else, in particular no second response
    assert b"HTTP/1.1" not in rest
    err = json.loads(rest[:int(headers["content-length"])])["error"]
    assert "Transfer-Encoding" in err["message"] and err["type"] == "invalid_request_error"
    sock.close()


def test_http11_without_host_is_400(server):
    sock = connect(server)
    sock.sendall(b"GET /health HTTP/1.1\r\n\r\n")
    status, headers, rest = read_head(sock)
    assert status == 400
    rest = read_until_close(sock, rest)
    assert "Host" in json.loads(rest)["error"]["message"]
    sock.close()
    # HTTP/1.0 has no Host requirement.
    sock = connect(server)
    sock.sendall(b"GET /health HTTP/1.0\r\n\r\n")
    status, _, _ = read_head(sock)
    assert status == 200
    sock.close()


def test_http10_stream_is_close_delimited(server, model_name):
    body = json.dumps({"model": model_name, "prompt": "Once upon", "max_tokens": 5, "stream": True}).encode()
    sock = connect(server)
    sock.sendall(post_bytes(b"/v1/completions", body, version=b"HTTP/1.0"))
    status, headers, rest = read_head(sock)
    assert status == 200
    assert "transfer-encoding" not in headers and "content-length" not in headers
    data = read_until_close(sock, rest)  # the body ends when the server closes
    events = [e for e in data.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), data  # no chunk-size lines
    assert events[-1] == "data: [DONE]"
    text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
    assert text
    sock.close()


def test_http10_plain_response_closes(server):
    sock = connect(server)
    sock.sendall(b"GET /v1/models HTTP/1.0\r\n\r\n")
    status, headers, rest = read_head(sock)
    assert status == 200 and "transfer-encoding" not in headers
    rest = read_until_close(sock, rest)
    assert len(rest) == int(headers["content-length"])
    assert json.loads(rest)["object"] == "list"
    sock.close()
