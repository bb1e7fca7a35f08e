#!/usr/bin/env python3
"""Serving load test: N concurrent streaming clients against `xinfer serve`; every stream must complete.

Starts `xinfer serve --model MODEL` on a free port (or uses --url), opens N client threads at once, each
streaming one /v1/completions request with max_tokens tokens (ignore_eos, include_usage), and checks that
every stream ends with [DONE], finish_reason "length" and usage.completion_tokens == max_tokens (nothing
lost). Prints p50/p99 time to first token (TTFT) and inter-token latency (ITL) as the client sees them.

  python3 bench/serve_load.py --xinfer build/cpu-release/src/xinfer/cli/xinfer --model DIR --clients 256
"""
import argparse
import http.client
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def percentile(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


def one_client(port, body, start_evt, out):
    start_evt.wait()
    t0 = time.perf_counter()
    rec = {"ok": False, "ttft": None, "itl": [], "tokens": 0}
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            rec["error"] = f"HTTP {r.status}: {r.read()[:200]!r}"
            out.append(rec)
            return
        last = None
        done = False
        finish = None
        buf = b""
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                payload = event[len(b"data: "):]
                if payload == b"[DONE]":
                    done = True
                    continue
                j = json.loads(payload)
                if j.get("usage"):
                    rec["tokens"] = j["usage"]["completion_tokens"]
                for c in j["choices"]:
                    now = time.perf_counter()
                    if c["text"]:
                        if last is None:
                            rec["ttft"] = now - t0
                        else:
                            rec["itl"].append(now - last)
                        last = now
                    finish = c["finish_reason"] or finish
        conn.close()
        rec["ok"] = done and finish == "length"
        rec["finish"] = finish
    except Exception as e:  # noqa: BLE001 - recorded and reported
        rec["error"] = repr(e)
    rec["e2e"] = time.perf_counter() - t0
    out.append(rec)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--xinfer", default="build/cpu-release/src/xinfer/cli/xinfer")
    ap.add_argument("--model", help="model directory (default: the bundled model)")
    ap.add_argument("--url-port", type=int, help="use a running server on 127.0.0.1:PORT instead")
    ap.add_argument("--clients", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--serve-args", default="", help="extra flags for xinfer serve")
    ap.add_argument("--json-out", help="write the figures to this JSON file")
    args = ap.parse_args()

    proc = None
    port = args.url_port
    if port is None:
        log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        cmd = [args.xinfer, "serve", "--port", "0", "--max-connections", str(args.clients + 64)]
        if args.model:
            cmd += ["--model", args.model]
        cmd += args.serve_args.split()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            text = pathlib.Path(log.name).read_text()
            if "ready in" in text:
                port = int(re.search(r"listening on http://[^:]+:(\d+)", text).group(1))
                break
            if proc.poll() is not None:
                sys.exit("xinfer serve exited:\n" + text)
            time.sleep(0.05)
        if port is None:
            sys.exit("xinfer serve did not become ready")

    body = json.dumps({"prompt": args.prompt, "max_tokens": args.max_tokens, "temperature": 1.0, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}})
    out = []
    start = threading.Event()
    threads = [threading.Thread(target=one_client, args=(port, body, start, out)) for _ in range(args.clients)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    start.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0

    ok = [r for r in out if r["ok"] and r["tokens"] == args.max_tokens]
    bad = [r for r in out if r not in ok]
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    itl = [x for r in ok for x in r["itl"]]
    figures = {
        "clients": args.clients, "completed": len(ok), "failed": len(bad), "max_tokens": args.max_tokens,
        "wall_s": round(wall, 3), "output_tok_per_s": round(sum(r["tokens"] for r in ok) / wall, 1),
        "ttft_p50_ms": round(percentile(ttft, 50) * 1e3, 1), "ttft_p99_ms": round(percentile(ttft, 99) * 1e3, 1),
        "itl_p50_ms": round(percentile(itl, 50) * 1e3, 2), "itl_p99_ms": round(percentile(itl, 99) * 1e3, 2),
        "itl_mean_ms": round(statistics.mean(itl) * 1e3, 2) if itl else None,
    }
    print(json.dumps(figures, indent=1))
    for r in bad[:5]:
        print("failed:", {k: r.get(k) for k in ("error", "finish", "tokens")}, file=sys.stderr)
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps(figures, indent=1) + "\n")
    if proc:
        proc.terminate()
        proc.wait(timeout=60)
    sys.exit(0 if not bad else 1)


if __name__ == "__main__":
    main()
