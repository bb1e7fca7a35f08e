#!/usr/bin/env python3
"""Others' TTFT under load, with and without hostile bodies (issue 13's check), in one run.

N streaming clients (default 300) keep one /v1/completions request each in flight (closed loop, keep-alive
connections, bench/serve_bench.py's client). The run is cut into windows of about --window-s seconds that
alternate: without hostile bodies, then with them, and so on (alternating cancels drift: the KV cache
filling, the machine's other load). In a "with" window a separate process sends, at the same time, a body
nested --levels deep and a body of --keys distinct unknown keys (one connection each; the bounded parser
answers both with a 400), a pair every --hostile-interval-s seconds (0: the next pair as soon as both are
answered: a flood). A stream request counts in the window it was sent in, if its first token came in that
window too; "exposed" are the requests of "with" windows that waited for their first token while a hostile
body was in flight. Printed: TTFT p50 / p99 / mean per kind and the differences to "without", the hostile
requests answered (all must be 400), the server's CPU use per window kind (cores, from /proc when this
script started the server), the server CPU one hostile pair costs on an idle server split by the nice value
of the threads that spent it, and every failed request. On a machine with few cores the client, the attacker
and the server share them: the server's CPU figure tells how much of a difference is the server's.

  # start a server (stories260K converted from ../shared/models by tools/convert_llama2c.py by default)
  python3 bench/hostile_load.py --xinfer build/cpu-release/src/xinfer/cli/xinfer --streams 300
  # against a running one
  python3 bench/hostile_load.py --base-url http://127.0.0.1:8000 --streams 300

Exit status 1 when a stream request failed or a hostile body was not answered with a 400.
"""
import argparse
import asyncio
import bisect
import json
import multiprocessing as mp
import os
import pathlib
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import serve_bench  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def deep_body(levels):
    return ('{"prompt": ' + "[" * levels + "]" * levels + ', "model": "x"}').encode()


def many_keys_body(n):
    return ("{" + ",".join(f'"unknown_key_{i}": {i}' for i in range(n)) + ', "prompt": "Once"}').encode()


def post_raw(host, port, body, timeout=60.0):
    """One POST on a new connection; returns (status, seconds until the whole answer was read)."""
    t0 = time.perf_counter()
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else -1
    return status, time.perf_counter() - t0


def attacker_main(host, port, levels, keys, interval_s, on, stop, results):
    """Separate process: while `on` is set, sends the deep and the wide body at the same time (one connection
    each), then the next pair `interval_s` after the last one started (0: as soon as both are answered)."""
    bodies = {"deep": deep_body(levels), "keys": many_keys_body(keys)}

    def one(kind, out):
        t0 = time.perf_counter()
        try:
            status, _ = post_raw(host, port, bodies[kind])
        except OSError as e:
            status = f"{type(e).__name__}: {e}"
        out.append((kind, status, t0, time.perf_counter()))

    while not stop.is_set():
        if not on.wait(0.02):
            continue
        start = time.perf_counter()
        out = []
        pair = [threading.Thread(target=one, args=(k, out)) for k in bodies]
        for t in pair:
            t.start()
        for t in pair:
            t.join()
        for r in out:
            results.put(r)
        time.sleep(max(0.0, start + interval_s - time.perf_counter()))


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_by_nice(pid):
    """{nice value: utime + stime seconds} over the threads of a process."""
    out = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        nice = int(fields[16])
        out[nice] = out.get(nice, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def pair_cpu_cost(host, port, pid, levels, keys, pairs):
    """Server CPU per hostile pair sent to an otherwise idle server, by thread nice value (ms)."""
    bodies = [deep_body(levels), many_keys_body(keys)]
    before = thread_cpu_by_nice(pid)
    for _ in range(pairs):
        ts = [threading.Thread(target=post_raw, args=(host, port, b)) for b in bodies]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    after = thread_cpu_by_nice(pid)
    return {n: (after.get(n, 0.0) - before.get(n, 0.0)) * 1e3 / pairs for n in sorted(set(after) | set(before))}


def pct(v, q):
    return serve_bench.percentile(v, q) if v else float("nan")


async def run_streams(args, host, port, t_start, on, server_pid):
    """Closed loop of args.streams streams until the last window ends; switches `on` at window edges."""
    body = {"model": args.model_name, "prompt": args.prompt, "max_tokens": args.max_tokens,
            "ignore_eos": True, "stream": True, "temperature": 0}
    pool = serve_bench.Pool(host, port, True)
    records = []
    t_end = t_start + args.edges[-1]
    cpu = {0: 0.0, 1: 0.0}

    async def switcher():
        last_cpu = cpu_seconds(server_pid) if server_pid else 0.0
        for w in range(args.windows):
            edge = t_start + args.edges[w]
            await asyncio.sleep(max(0.0, edge - time.perf_counter()))
            if server_pid and w > 0:
                c = cpu_seconds(server_pid)
                cpu[(w - 1) % 2] += c - last_cpu
                last_cpu = c
            (on.set if w % 2 == 1 else on.clear)()
        await asyncio.sleep(max(0.0, t_end - time.perf_counter()))
        if server_pid:
            cpu[(args.windows - 1) % 2] += cpu_seconds(server_pid) - last_cpu
        on.clear()

    async def worker(i):
        while time.perf_counter() < t_end:
            rec = await serve_bench.one_request(pool, "/v1/completions", dict(body), i, False, True, args.timeout)
            records.append(rec)

    await asyncio.gather(switcher(), *[worker(i) for i in range(args.streams)])
    pool.close()
    return records, cpu


def window_of(t, edges):
    """Index of the window [edges[w], edges[w + 1]) holding t; -1 before, len(edges) - 1 after."""
    return bisect.bisect_right(edges, t) - 1


def classify(records, t_start, edges, hostile):
    """TTFTs (seconds) of the stream requests by what they met: "without" (sent in a window without hostile
    bodies, none in flight meanwhile), "with" (sent in a window with them), "exposed" (those of "with" that
    waited for their first token while a hostile body was in flight: sent before its answer, first token
    after it was sent). A request counts only if its first token came in the window it was sent in. Also
    returns the failed records."""
    spans = sorted((h[2], h[3]) for h in hostile)
    out = {"without": [], "with": [], "exposed": []}
    failed = [r for r in records if not r["ok"]]
    for r in records:
        if not r["ok"] or r["ttft_s"] is None:
            continue
        sent = r["start_s"] - t_start
        first = sent + r["ttft_s"]
        w = window_of(sent, edges)
        if w < 0 or w >= len(edges) - 1 or window_of(first, edges) != w:
            continue  # warm-up, or its first token came in another window
        a, b = r["start_s"], r["start_s"] + r["ttft_s"]
        exposed = any(h0 < b and a < h1 for h0, h1 in spans)
        if w % 2:
            out["with"].append(r["ttft_s"])
            if exposed:
                out["exposed"].append(r["ttft_s"])
        elif not exposed:  # a pair sent just before the window began may still be in flight
            out["without"].append(r["ttft_s"])
    return out, failed


def convert_stories260k(out_dir):
    src = ROOT.parent / "shared/models/stories260K"
    subprocess.run([sys.executable, str(ROOT / "tools/convert_llama2c.py"), "--checkpoint",
                    str(src / "stories260K.bin"), "--tokenizer", str(src / "tok512.bin"), "--out", str(out_dir)],
                   check=True, capture_output=True)
    return out_dir


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="a running server (else --xinfer starts one)")
    p.add_argument("--xinfer", help="xinfer binary: started as `serve` on a free port, stopped at the end")
    p.add_argument("--model", help="with --xinfer: model directory (default: stories260K, converted)")
    p.add_argument("--server-args", default="--max-num-seqs 512",
                   help="with --xinfer: extra serve flags (default: every stream runs at once)")
    p.add_argument("--server-log", help="with --xinfer: file for the server's output")
    p.add_argument("--streams", type=int, default=300)
    p.add_argument("--windows", type=int, default=6, help="alternating windows, the first without hostile bodies")
    p.add_argument("--window-s", type=float, default=3.0)
    p.add_argument("--warmup-s", type=float, default=2.0, help="load before the first window (not counted)")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens per stream request (ignore_eos)")
    p.add_argument("--prompt", default="Once upon a time")
    p.add_argument("--levels", type=int, default=100000, help="nesting depth of the deep body")
    p.add_argument("--keys", type=int, default=100000, help="distinct unknown keys of the wide body")
    p.add_argument("--hostile-interval-s", type=float, default=0.5,
                   help="a pair of hostile bodies every this many seconds in a 'with' window (0: back to back)")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--seed", type=int, default=0, help="window lengths")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args(argv)
    if (a.base_url is None) == (a.xinfer is None):
        p.error("give exactly one of --base-url and --xinfer")
    if a.windows < 2:
        p.error("--windows must be >= 2 (one of each kind)")
    # Window lengths vary (0.5-1.5x, seeded): a closed loop of equal requests runs in waves, and windows of
    # one length could fall in step with them (every "without" window on a wave's quiet part).
    rng = random.Random(a.seed)
    a.edges = [0.0]
    for _ in range(a.windows):
        a.edges.append(a.edges[-1] + a.window_s * rng.uniform(0.5, 1.5))
    return a


def main(argv=None):
    args = parse_args(argv)
    proc = None
    tmp = tempfile.TemporaryDirectory(prefix="hostile_load_")
    try:
        if args.xinfer:
            model = args.model or str(convert_stories260k(pathlib.Path(tmp.name) / "stories260K"))
            host, port = "127.0.0.1", serve_bench.free_port()
            cmd = f"{args.xinfer} serve --model {model} --port {port} {args.server_args}"
            proc, cmd = serve_bench.start_server(cmd, port, args.server_log)
            print(f"started: {cmd}", file=sys.stderr)
        else:
            u = urllib.parse.urlparse(args.base_url)
            host, port = u.hostname, u.port or 80
        serve_bench.wait_ready(host, port, proc, 120)
        _, models = serve_bench.http_get(host, port, "/v1/models")
        args.model_name = json.loads(models)["data"][0]["id"]

        cost = pair_cpu_cost(host, port, proc.pid, args.levels, args.keys, 20) if proc else None
        on, stop, results = mp.Event(), mp.Event(), mp.Queue()
        attacker = mp.Process(target=attacker_main,
                              args=(host, port, args.levels, args.keys, args.hostile_interval_s, on, stop, results))
        attacker.start()
        t_start = time.perf_counter() + args.warmup_s
        records, cpu = asyncio.run(run_streams(args, host, port, t_start, on, proc.pid if proc else None))
        stop.set()
        attacker.join(timeout=args.timeout)
        hostile = []
        while not results.empty():
            hostile.append(results.get())
    finally:
        serve_bench.stop_server(proc)
        tmp.cleanup()

    kinds, failed = classify(records, t_start, args.edges, hostile)
    span = {k: sum(args.edges[w + 1] - args.edges[w] for w in range(args.windows) if w % 2 == k) for k in (0, 1)}
    rows = {}
    print(f"{args.streams} streams, {args.max_tokens} tokens each, {args.windows} windows of {args.window_s:g} s "
          f"(+-50%, seeded) "
          f"alternating without / with hostile bodies (a {args.levels}-level and a {args.keys}-key body at once, "
          + (f"a pair every {args.hostile_interval_s:g} s)" if args.hostile_interval_s > 0 else "back to back)"))
    for name, label in (("without", "without hostile bodies"), ("with", "with hostile bodies"),
                        ("exposed", "  of which exposed")):
        v = [t * 1e3 for t in kinds[name]]
        rows[name] = {"n": len(v), "ttft_p50_ms": pct(v, 50), "ttft_p99_ms": pct(v, 99),
                      "ttft_mean_ms": statistics.fmean(v) if v else float("nan")}
        line = (f"  {label:<23} {len(v):6d} requests  TTFT p50 {rows[name]['ttft_p50_ms']:8.1f}  p99 "
                f"{rows[name]['ttft_p99_ms']:8.1f}  mean {rows[name]['ttft_mean_ms']:8.1f} ms")
        if proc and name != "exposed":
            k = 1 if name == "with" else 0
            rows[name]["server_cores"] = cpu[k] / span[k]
            line += f"  server CPU {rows[name]['server_cores']:.2f} cores"
        print(line)
    d50 = rows["with"]["ttft_p50_ms"] - rows["without"]["ttft_p50_ms"]
    d99 = rows["with"]["ttft_p99_ms"] - rows["without"]["ttft_p99_ms"]
    e50 = rows["exposed"]["ttft_p50_ms"] - rows["without"]["ttft_p50_ms"]
    e99 = rows["exposed"]["ttft_p99_ms"] - rows["without"]["ttft_p99_ms"]
    print(f"  difference (with - without): p50 {d50:+.1f} ms, p99 {d99:+.1f} ms; "
          f"(exposed - without): p50 {e50:+.1f} ms, p99 {e99:+.1f} ms")
    if cost is not None:
        print("  server CPU per hostile pair, idle server (20 pairs): " +
              ", ".join(f"{v:.1f} ms on threads at nice {n}" for n, v in cost.items()) +
              " (the part not at nice 10 is what the engine's threads compete with)")
    bad_hostile = [h for h in hostile if h[1] != 400]
    for kind in ("deep", "keys"):
        took = sorted((h[3] - h[2]) * 1e3 for h in hostile if h[0] == kind and h[1] == 400)
        print(f"  hostile {kind:<4}: {sum(1 for h in hostile if h[0] == kind)} sent, {len(took)} answered 400, "
              f"answer p50 {pct(took, 50):.1f} ms, max {max(took) if took else float('nan'):.1f} ms")
    for r in failed[:5]:
        print(f"  failed stream request: {r['error']}")
    for h in bad_hostile[:5]:
        print(f"  hostile {h[0]} answered {h[1]}")
    if args.json:
        out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "config": {k: v for k, v in vars(args).items() if k not in ("json", "edges")},
               "ttft": rows, "diff_p50_ms": d50, "diff_p99_ms": d99, "exposed_diff_p50_ms": e50,
               "exposed_diff_p99_ms": e99,
               "stream_requests": len(records), "stream_failed": len(failed),
               "hostile_sent": len(hostile), "hostile_not_400": len(bad_hostile),
               "pair_cpu_ms_by_nice": cost, "loadavg": os.getloadavg()}
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))
    return 1 if failed or bad_hostile or not hostile else 0


if __name__ == "__main__":
    sys.exit(main())
