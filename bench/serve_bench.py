#!/usr/bin/env python3
"""Serving benchmark: streaming OpenAI requests against a running server, or one this script starts.

Sends --num-prompts streaming requests to /v1/completions (or /v1/chat/completions with --endpoint chat) and
measures what a client sees, per request:
  TTFT  time from sending the request to the first chunk that carries output
  ITL   every gap between two consecutive output chunks (one sample per gap, pooled over all requests)
  TPOT  (E2E - TTFT) / (output tokens - 1), one sample per request with >= 2 output tokens
  E2E   time from sending the request to the end of its stream
and over the run: p50 / p90 / p99 and mean of each, output tokens/s, requests/s, and goodput (requests/s
and output tokens/s of the requests meeting every SLO given: --slo-ttft on TTFT, --slo-itl on each of its
inter-token gaps, --slo-tpot on its TPOT; milliseconds). Output tokens are the server's usage counts
(stream_options.include_usage), so a chunk with several tokens counts them all.

Load: --concurrency N keeps N requests in flight (fixed concurrency); --request-rate R sends requests as a
Poisson process of R requests/s (exponential gaps, seeded; "inf": all at once), optionally capped by
--max-concurrency. --warmup W sends W requests first, all at once, and waits for them; with --warmup-overlap
they open the same closed loop instead, so the measured requests see the steady state rather than a burst of
N simultaneous prompts at their start (with identical lengths that burst persists as waves). Prompts: --prompt-type ids (random token ids in [--id-low, --id-high): no two prompts
share a prefix, so the prefix cache does not help; --warmup requests get prompts of their own, and the summary
reports the server's prefix-cache hits during the run, since a second run with the same --seed on the same
server is served from the cache) or text (random words from a small built-in vocabulary;
length in words, usage.prompt_tokens reports the tokens); lengths --input-len / --output-len, each drawn
uniformly from [L * (1 - r), L * (1 + r)] with --random-range-ratio r > 0 (fixed when 0). --ignore-eos
makes every request produce exactly its output length. Connections are kept alive and reused (one per
in-flight request), as the openai SDK, httpx and aiohttp do; --no-keep-alive opens one per request.

Every request is accounted for: completed (stream ended with [DONE]) or failed (HTTP error, broken stream,
timeout), with its error. --json PATH writes the configuration, the summary and (--per-request) every
request's record. Exit status 1 when a request failed (--allow-failures: 0).

  # against a running server
  python3 bench/serve_bench.py --base-url http://127.0.0.1:8000 --concurrency 16 --num-prompts 256 \\
      --input-len 128 --output-len 128 --ignore-eos --json bench/results/serve_c16.json
  # starting one ({port} is replaced by a free port; the server is stopped at the end)
  python3 bench/serve_bench.py --server-cmd "build/cpu-release/src/xinfer/cli/xinfer serve --port {port}" \\
      --concurrency 4 --num-prompts 32 --input-len 32 --output-len 16 --ignore-eos

Standard library only (asyncio streams, HTTP/1.1 with chunked transfer coding).
"""
import argparse
import asyncio
import json
import math
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

WORDS = ("the of and to in is was for on that with as by at from his her it an were are which this be or has "
         "had but not they have one their all two been first its new after who other when more into time some "
         "year only over would three also most may there city world state during made about people many such "
         "years up out these them than can then could since where later between under him she film did while "
         "school work both part known end second before being through age song band game team music river "
         "house king town water island light stone sea garden letter window market winter morning").split()


# ----------------------------------------------------------------------------------------------- statistics
def percentile(values, p):
    """p-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def describe(values_s):
    """mean / p50 / p90 / p99 / max in milliseconds (None when there are no samples)."""
    if not values_s:
        return {"n": 0, "mean_ms": None, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
    ms = [x * 1000.0 for x in values_s]
    return {"n": len(ms), "mean_ms": sum(ms) / len(ms), "p50_ms": percentile(ms, 50),
            "p90_ms": percentile(ms, 90), "p99_ms": percentile(ms, 99), "max_ms": max(ms)}


def summarize(records, duration_s, slo_ttft_ms=None, slo_itl_ms=None, slo_tpot_ms=None):
    done = [r for r in records if r["ok"]]
    failed = [r for r in records if not r["ok"]]
    out_tokens = sum(r["output_tokens"] for r in done)
    in_tokens = sum(r["prompt_tokens"] for r in done)
    ttft = [r["ttft_s"] for r in done if r["ttft_s"] is not None]
    itl = [g for r in done for g in r["itl_s"]]
    tpot = [r["tpot_s"] for r in done if r["tpot_s"] is not None]
    e2e = [r["e2e_s"] for r in done]

    def good(r):
        if slo_ttft_ms is not None and (r["ttft_s"] is None or r["ttft_s"] * 1000 > slo_ttft_ms):
            return False
        if slo_itl_ms is not None and any(g * 1000 > slo_itl_ms for g in r["itl_s"]):
            return False
        if slo_tpot_ms is not None and r["tpot_s"] is not None and r["tpot_s"] * 1000 > slo_tpot_ms:
            return False
        return True

    good_reqs = [r for r in done if good(r)]
    d = max(duration_s, 1e-9)
    return {
        "num_requests": len(records), "completed": len(done), "failed": len(failed),
        "duration_s": duration_s,
        "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "request_throughput": len(done) / d, "output_throughput": out_tokens / d,
        "total_token_throughput": (in_tokens + out_tokens) / d,
        "ttft": describe(ttft), "itl": describe(itl), "tpot": describe(tpot), "e2e": describe(e2e),
        "slo": {"ttft_ms": slo_ttft_ms, "itl_ms": slo_itl_ms, "tpot_ms": slo_tpot_ms},
        "good_requests": len(good_reqs),
        "goodput_requests_per_s": len(good_reqs) / d,
        "goodput_output_tokens_per_s": sum(r["output_tokens"] for r in good_reqs) / d,
        "errors": sorted({r["error"] for r in failed})[:10],
    }


# ----------------------------------------------------------------------------------------------- requests
def lengths(n, mean, ratio, rng):
    if ratio <= 0:
        return [mean] * n
    lo, hi = max(1, int(mean * (1 - ratio))), max(1, int(mean * (1 + ratio)))
    return [rng.randint(lo, hi) for _ in range(n)]


def make_requests(args, rng, n=None):
    """The request bodies (dicts), in send order: n (default --num-prompts) of them."""
    n = args.num_prompts if n is None else n
    ins = lengths(n, args.input_len, args.random_range_ratio, rng)
    outs = lengths(n, args.output_len, args.random_range_ratio, rng)
    bodies = []
    for i in range(n):
        if args.prompt_type == "ids":
            prompt = [rng.randrange(args.id_low, args.id_high) for _ in range(ins[i])]
        else:
            prompt = " ".join(rng.choice(WORDS) for _ in range(ins[i]))
        body = {"max_tokens": outs[i], "stream": True, "stream_options": {"include_usage": True},
                "temperature": args.temperature}
        if args.model:
            body["model"] = args.model
        if args.ignore_eos:
            body["ignore_eos"] = True
        if args.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        bodies.append(body)
    return bodies


class HttpError(Exception):
    pass


class Connection:
    """One HTTP/1.1 connection (asyncio streams), reusable while the server keeps it alive."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.reader = self.writer = None
        self.reusable = False

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reusable = True

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
        self.reusable = False

    async def post_stream(self, path, body, keep_alive):
        """Sends the request; returns (status, headers, async iterator over body bytes)."""
        data = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(data)}\r\n"
                f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n").encode()
        self.writer.write(head + data)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise HttpError("connection closed before the response")
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise HttpError(f"bad status line {status_line[:80]!r}")
        status = int(parts[1])
        headers = {}
        while True:
            line = await self.reader.readline()
            if not line:
                raise HttpError("connection closed in the response headers")
            if line in (b"\r\n", b"\n"):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        self.reusable = keep_alive and headers.get("connection", "").lower() != "close" and \
            not parts[0].startswith("HTTP/1.0")
        return status, headers, self._body(headers)

    async def _body(self, headers):
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await self.reader.readline()
                if not size_line:
                    raise HttpError("connection closed inside a chunked body")
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (await self.reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                data = await self.reader.readexactly(size)
                await self.reader.readexactly(2)
                yield data
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left > 0:
                data = await self.reader.read(min(left, 65536))
                if not data:
                    raise HttpError("connection closed inside the body")
                left -= len(data)
                yield data
        else:
            self.reusable = False
            while True:
                data = await self.reader.read(65536)
                if not data:
                    return
                yield data


class Pool:
    """Idle keep-alive connections; a request takes one (or opens one) and gives it back if reusable."""

    def __init__(self, host, port, keep_alive):
        self.host, self.port, self.keep_alive = host, port, keep_alive
        self.idle = []

    async def get(self):
        if self.keep_alive and self.idle:
            return self.idle.pop()
        c = Connection(self.host, self.port)
        await c.open()
        return c

    def put(self, c):
        if self.keep_alive and c.reusable:
            self.idle.append(c)
        else:
            c.close()

    def close(self):
        for c in self.idle:
            c.close()
        self.idle = []


def chunk_has_output(j, chat):
    """True when an SSE JSON chunk carries generated text (a token)."""
    for ch in j.get("choices") or []:
        if chat:
            delta = ch.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content"):
                return True
        elif ch.get("text"):
            return True
    return False


async def one_request(pool, path, body, index, chat, keep_alive, timeout_s):
    rec = {"index": index, "ok": False, "error": None, "ttft_s": None, "itl_s": [], "tpot_s": None,
           "e2e_s": None, "output_tokens": 0, "prompt_tokens": 0, "output_chunks": 0, "finish_reason": None,
           "max_tokens": body["max_tokens"], "start_s": None}
    conn = None
    t0 = time.perf_counter()
    rec["start_s"] = t0
    try:
        async def run():
            nonlocal conn
            conn = await pool.get()
            status, headers, body_iter = await conn.post_stream(path, body, keep_alive)
            if status != 200:
                text = b"".join([b async for b in body_iter])
                raise HttpError(f"HTTP {status}: {text[:200].decode('utf-8', 'replace')}")
            buf = b""
            last = None
            seen_done = False
            usage = None
            async for data in body_iter:
                buf += data
                while True:
                    cut = buf.find(b"\n\n")
                    if cut < 0:
                        break
                    event, buf = buf[:cut], buf[cut + 2:]
                    for line in event.split(b"\n"):
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            seen_done = True
                            continue
                        j = json.loads(payload)
                        if "error" in j and not j.get("choices"):
                            raise HttpError(f"error event: {json.dumps(j['error'])[:200]}")
                        if j.get("usage"):
                            usage = j["usage"]
                        if chunk_has_output(j, chat):
                            now = time.perf_counter()
                            if last is None:
                                rec["ttft_s"] = now - t0
                            else:
                                rec["itl_s"].append(now - last)
                            last = now
                            rec["output_chunks"] += 1
                        for ch in j.get("choices") or []:
                            if ch.get("finish_reason"):
                                rec["finish_reason"] = ch["finish_reason"]
            if not seen_done:
                raise HttpError("stream ended without [DONE]")
            return usage

        usage = await asyncio.wait_for(run(), timeout_s)
        rec["e2e_s"] = time.perf_counter() - t0
        if usage:
            rec["output_tokens"] = int(usage.get("completion_tokens", 0))
            rec["prompt_tokens"] = int(usage.get("prompt_tokens", 0))
        else:
            rec["output_tokens"] = rec["output_chunks"]
        if rec["output_tokens"] >= 2 and rec["ttft_s"] is not None:
            rec["tpot_s"] = (rec["e2e_s"] - rec["ttft_s"]) / (rec["output_tokens"] - 1)
        rec["ok"] = True
    except asyncio.TimeoutError:
        rec["error"] = f"timeout after {timeout_s} s"
    except (HttpError, OSError, ValueError, asyncio.IncompleteReadError) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        if conn is not None:
            if rec["ok"]:
                pool.put(conn)
            else:
                conn.close()
    return rec


class Progress:
    def __init__(self, total, enabled):
        self.total, self.enabled, self.done, self.failed = total, enabled, 0, 0
        self.t0 = time.perf_counter()
        self.last_draw = 0.0

    def update(self, rec):
        self.done += 1
        self.failed += 0 if rec["ok"] else 1
        now = time.perf_counter()
        if self.enabled and (now - self.last_draw > 0.1 or self.done == self.total):
            self.last_draw = now
            width = 30
            fill = int(width * self.done / max(1, self.total))
            el = now - self.t0
            sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} "
                             f"failed {self.failed} {el:6.1f} s")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


async def run_load(args, bodies, host, port, progress=True, warm=()):
    """Sends `warm` (not measured), then `bodies` (measured). Without args.warmup_overlap the warm-up requests
    go all at once and finish before the measured run starts (which then opens with `concurrency`
    simultaneous requests); with it (fixed concurrency only) warm-up and measured requests form one closed
    loop whose first len(warm) requests are not measured, so the measured ones see the steady state. The
    measured duration starts at the first measured request's send."""
    path = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    chat = args.endpoint == "chat"
    keep_alive = not args.no_keep_alive
    pool = Pool(host, port, keep_alive)
    overlap = bool(warm) and getattr(args, "warmup_overlap", False)

    async def send_warm(b):
        await one_request(pool, path, dict(b), -1, chat, keep_alive, args.timeout)

    if warm and not overlap:
        await asyncio.gather(*[send_warm(b) for b in warm])
    cache_before = prefix_cache_tokens(host, port)

    bar = Progress(len(bodies), progress)
    records = [None] * len(bodies)
    t_start = None if overlap else time.perf_counter()

    async def send(i):
        nonlocal t_start
        if t_start is None:
            t_start = time.perf_counter()
        records[i] = await one_request(pool, path, bodies[i], i, chat, keep_alive, args.timeout)
        bar.update(records[i])

    if args.request_rate is None:  # fixed concurrency: N workers take the next request
        queue = ([-1 - w for w in range(len(warm))] if overlap else []) + list(range(len(bodies)))
        next_q = 0

        async def worker():
            nonlocal next_q
            while next_q < len(queue):
                i = queue[next_q]
                next_q += 1
                await (send_warm(warm[-1 - i]) if i < 0 else send(i))

        await asyncio.gather(*[worker() for _ in range(min(args.concurrency, len(queue)))])
    else:  # Poisson arrivals
        rng = random.Random(args.seed + 1)
        sem = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None

        async def limited(i):
            if sem is None:
                await send(i)
            else:
                async with sem:
                    await send(i)

        tasks = []
        for i in range(len(bodies)):
            tasks.append(asyncio.create_task(limited(i)))
            if args.request_rate != math.inf and i + 1 < len(bodies):
                await asyncio.sleep(rng.expovariate(args.request_rate))
        await asyncio.gather(*tasks)
    duration = time.perf_counter() - t_start
    pool.close()
    for r in records:
        r["start_s"] -= t_start
    if overlap:  # the run ends with the last measured request, not with a warm-up request still in flight
        duration = max(r["start_s"] + (r["e2e_s"] or 0.0) for r in records)
    cache_after = prefix_cache_tokens(host, port)
    if cache_before and cache_after:
        args.prefix_cache = {"hit_tokens": cache_after[0] - cache_before[0],
                             "queried_tokens": cache_after[1] - cache_before[1]}
    return records, duration


def prefix_cache_tokens(host, port):
    """(hit, queried) prompt tokens of the server's prefix cache so far, from /metrics (xinfer's or vLLM's
    names); None when the server does not report them."""
    try:
        status, text = http_get(host, port, "/metrics")
    except OSError:
        return None
    if status != 200:
        return None
    found = {}
    for line in text.decode("utf-8", "replace").splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name = line.split("{")[0].split(" ")[0]
        for key in ("hits", "queries"):
            if name.endswith(f"prefix_cache_{key}_total") or name.endswith(f"prefix_cache_{key}"):
                try:
                    found.setdefault(key, float(line.rsplit(" ", 1)[1]))
                except ValueError:
                    pass
    return (found["hits"], found["queries"]) if len(found) == 2 else None


# ----------------------------------------------------------------------------------------------- server
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(host, port, path, timeout=2.0):
    import http.client
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def wait_ready(host, port, proc, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before it was ready")
        try:
            status, _ = http_get(host, port, "/v1/models")
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"server not ready on {host}:{port} after {timeout_s} s")


def start_server(cmd, port, log_path):
    cmd = cmd.replace("{port}", str(port))
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(shlex.split(cmd), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, cmd


def stop_server(proc):
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ----------------------------------------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--base-url", default=None, help="server to load, e.g. http://127.0.0.1:8000")
    p.add_argument("--server-cmd", default=None,
                   help="start this server command (shell words; {port} = a free port) and stop it at the end")
    p.add_argument("--server-log", default=None, help="with --server-cmd: file for the server's output")
    p.add_argument("--server-timeout", type=float, default=600, help="seconds to wait for the server")
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--model", default=None, help="model name in the requests (default: the server's first)")
    p.add_argument("--num-prompts", type=int, default=100)
    load = p.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, default=None, help="fixed number of requests in flight")
    load.add_argument("--request-rate", type=float, default=None, help="Poisson arrivals per second (inf: all at once)")
    p.add_argument("--max-concurrency", type=int, default=None, help="with --request-rate: cap on requests in flight")
    p.add_argument("--prompt-type", choices=["ids", "text"], default="ids")
    p.add_argument("--input-len", type=int, default=128, help="prompt length (tokens for ids, words for text)")
    p.add_argument("--output-len", type=int, default=128, help="max_tokens of each request")
    p.add_argument("--random-range-ratio", type=float, default=0.0,
                   help="lengths uniform in [L(1-r), L(1+r)]; 0: fixed")
    p.add_argument("--id-low", type=int, default=10, help="token-id prompts: smallest id")
    p.add_argument("--id-high", type=int, default=None,
                   help="token-id prompts: ids below this (default: 1000, enough for every vocabulary we serve)")
    p.add_argument("--ignore-eos", action="store_true", help="every request generates exactly max_tokens")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--warmup", type=int, default=0,
                   help="requests sent (and not measured) before the run, all at once, with prompts of their own")
    p.add_argument("--warmup-overlap", action="store_true",
                   help="fixed concurrency: the --warmup requests open the same closed loop as the measured ones "
                        "instead of running before it, so the measurement starts in the steady state (no burst "
                        "of --concurrency simultaneous prompts at its start); prefix-cache hits then include "
                        "the warm-up requests'")
    p.add_argument("--timeout", type=float, default=600, help="seconds per request")
    p.add_argument("--no-keep-alive", action="store_true", help="a new connection per request")
    p.add_argument("--slo-ttft", type=float, default=None, help="goodput: TTFT SLO (ms)")
    p.add_argument("--slo-itl", type=float, default=None, help="goodput: SLO on every inter-token gap (ms)")
    p.add_argument("--slo-tpot", type=float, default=None, help="goodput: SLO on each request's TPOT (ms)")
    p.add_argument("--seed", type=int, default=0,
                   help="prompts and lengths; runs against one server with the same seed send the same prompts, "
                        "which its prefix cache then serves (the summary reports the hit rate)")
    p.add_argument("--json", default=None, help="write configuration + summary to this file")
    p.add_argument("--per-request", action="store_true", help="with --json: every request's record too")
    p.add_argument("--label", default=None, help="free text stored in the JSON")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--allow-failures", action="store_true", help="exit 0 even when requests failed")
    args = p.parse_args(argv)
    if (args.base_url is None) == (args.server_cmd is None):
        p.error("give exactly one of --base-url and --server-cmd")
    if args.concurrency is None and args.request_rate is None:
        args.concurrency = 1
    if args.concurrency is not None and args.concurrency < 1:
        p.error("--concurrency must be >= 1")
    if args.warmup_overlap and (args.request_rate is not None or args.warmup < 1):
        p.error("--warmup-overlap needs --concurrency (not --request-rate) and --warmup >= 1")
    if args.request_rate is not None and not args.request_rate > 0:
        p.error("--request-rate must be > 0")
    if args.num_prompts < 1 or args.input_len < 1 or args.output_len < 1:
        p.error("--num-prompts, --input-len and --output-len must be >= 1")
    if args.id_high is None:
        args.id_high = 1000
    if args.id_high <= args.id_low:
        p.error("--id-high must be > --id-low")
    if args.endpoint == "chat" and args.prompt_type == "ids":
        p.error("--endpoint chat takes text prompts: add --prompt-type text")
    return args


def print_summary(s, out=sys.stdout):
    def row(name, d):
        if d["n"] == 0:
            return f"  {name:<5} (no samples)"
        return (f"  {name:<5} mean {d['mean_ms']:9.2f}  p50 {d['p50_ms']:9.2f}  p90 {d['p90_ms']:9.2f}  "
                f"p99 {d['p99_ms']:9.2f}  max {d['max_ms']:9.2f} ms")
    print(f"requests: {s['completed']} completed, {s['failed']} failed of {s['num_requests']} "
          f"in {s['duration_s']:.2f} s", file=out)
    print(f"throughput: {s['output_throughput']:.1f} output tok/s, {s['request_throughput']:.2f} req/s, "
          f"{s['total_input_tokens']} input + {s['total_output_tokens']} output tokens", file=out)
    for k in ("ttft", "itl", "tpot", "e2e"):
        print(row(k.upper(), s[k]), file=out)
    slo = s["slo"]
    if any(v is not None for v in slo.values()):
        print(f"goodput: {s['good_requests']}/{s['completed']} requests within SLO "
              f"(ttft {slo['ttft_ms']} ms, itl {slo['itl_ms']} ms, tpot {slo['tpot_ms']} ms): "
              f"{s['goodput_requests_per_s']:.2f} req/s, {s['goodput_output_tokens_per_s']:.1f} tok/s", file=out)
    pc = s.get("prefix_cache")
    if pc and pc["queried_tokens"] > 0:
        print(f"prefix cache during the run: {pc['hit_tokens']:.0f} of {pc['queried_tokens']:.0f} prompt tokens "
              f"hit ({100 * pc['hit_tokens'] / pc['queried_tokens']:.1f}%)"
              + (" -- the same prompts were sent before (same --seed on this server?)"
                 if pc["hit_tokens"] > 0.05 * pc["queried_tokens"] else ""), file=out)
    for e in s["errors"]:
        print(f"  error: {e}", file=out)


def main(argv=None):
    args = parse_args(argv)
    proc = None
    try:
        if args.server_cmd:
            host, port = "127.0.0.1", free_port()
            proc, cmd = start_server(args.server_cmd, port, args.server_log)
            print(f"started: {cmd}", file=sys.stderr)
        else:
            u = urllib.parse.urlparse(args.base_url)
            host, port = u.hostname, u.port or 80
        wait_ready(host, port, proc, args.server_timeout)
        if args.model is None:
            _, models = http_get(host, port, "/v1/models")
            data = json.loads(models).get("data") or []
            args.model = data[0]["id"] if data else None
        rng = random.Random(args.seed)
        # Warm-up prompts are drawn after the measured ones: measured prompts depend on --seed alone, and none
        # is in the server's prefix cache because a warm-up request computed it.
        every = make_requests(args, rng, args.num_prompts + args.warmup)
        bodies, warm = every[:args.num_prompts], every[args.num_prompts:]
        args.prefix_cache = None
        records, duration = asyncio.run(run_load(args, bodies, host, port, progress=not args.no_progress,
                                                 warm=warm))
    finally:
        stop_server(proc)
    summary = summarize(records, duration, args.slo_ttft, args.slo_itl, args.slo_tpot)
    summary["prefix_cache"] = args.prefix_cache
    print_summary(summary)
    if args.json:
        config = {k: v for k, v in vars(args).items() if k not in ("json", "prefix_cache")}
        if config.get("request_rate") == math.inf:
            config["request_rate"] = "inf"
        result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "config": config, "summary": summary}
        if args.per_request:
            result["requests"] = records
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if summary["failed"] == 0 or args.allow_failures else 1


if __name__ == "__main__":
    sys.exit(main())
