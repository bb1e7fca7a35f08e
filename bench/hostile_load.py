#!/usr/bin/env python3
"""Others' TTFT under load, with and without hostile bodies (issue 13's check), measured by a C++ client.

The instrument is bench/hostile_load_client (built with the benchmarks; one epoll thread, ~5% of a core for
300 streams), so that it takes little of the 2 cores it measures; the attacker is its own process at nice 19.
N streaming connections (default 300) keep one /v1/completions request each in flight (closed loop,
keep-alive, ignore_eos, max_tokens drawn per request from 0.5-1.5 x --max-tokens so that the streams do not run
in waves). A run is cut into --windows windows of --window-s seconds
(+-50%, seeded) that alternate: without hostile bodies, then with them. In a "with" window the attacker sends
at once a --levels-deep body and a --keys-key body (one connection each; the bounded parser answers 400), a
pair every --hostile-interval-s seconds from the window's start.

Which requests a pair can delay: "exposed" are those of "with" windows that waited for their first token
while a hostile body was in flight (sent before its answer, first token after it was sent). That choice
favours long TTFTs (a longer wait overlaps a pair more often), so they are compared with "sham-exposed"
requests of the "without" windows: those overlapping the same schedule of pairs (same offsets from the
window's start, the real pairs' durations) where no pair was sent. A request counts only when its first token
came in the window it was sent in. Printed per run and pooled over --runs runs: TTFT p50 / p90 / p99 per kind,
exposed - sham with a 95% bootstrap interval over windows (blocks of two adjacent windows, one of each
kind, resampled with replacement) for p50 and p90, the p99 difference per run (its spread over runs is its uncertainty); the
server's CPU by thread (name, nice; ns from /proc/PID/task/*/schedstat) per hostile pair on the idle server
and under load (with - without windows), the client's and the attacker's CPU, the load average.

  python3 bench/hostile_load.py --xinfer build/srv/src/xinfer/cli/xinfer --streams 300 --windows 40 --runs 3
  python3 bench/hostile_load.py --xinfer build/srv/src/xinfer/cli/xinfer --streams 300 --windows 40 --aa  # A/A
  python3 bench/hostile_load.py --base-url http://127.0.0.1:8000 --client build/srv/bench/hostile_load_client

Exit status 1 when a stream request failed or a hostile body was not answered with a 400.
"""
import argparse
import json
import os
import pathlib
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import serve_bench  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def deep_body(levels):
    return ('{"prompt": ' + "[" * levels + "]" * levels + ', "model": "x"}').encode()


def many_keys_body(n):
    return ("{" + ",".join(f'"unknown_key_{i}": {i}' for i in range(n)) + ', "prompt": "Once"}').encode()


def post_raw(host, port, body, timeout=60.0):
    """One POST on a new connection; returns the status."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else -1


def thread_cpu_ns(pid):
    """{(thread name, nice): CPU ns} over the threads of a process (schedstat: ns, not 10 ms ticks)."""
    out = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue  # the thread ended
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        nice = int(stat.rsplit(")", 1)[1].split()[16])
        out[(comm, nice)] = out.get((comm, nice), 0) + ns
    return out


def cpu_diff(after, before):
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}


def group_name(key):
    return f"{key[0]}@nice{key[1]}"


def pair_cpu_cost(host, port, pid, levels, keys, pairs):
    """Server CPU per hostile pair sent to an otherwise idle server, by thread (ms): the median over the pairs,
    each pair measured on its own (a pair that shares the cores with a burst of other work on a 2-vCPU
    machine can cost several times the usual CPU; the mean of 20 carried such outliers)."""
    bodies = [deep_body(levels), many_keys_body(keys)]
    post_raw(host, port, bodies[1])  # first use: page faults of the buffers, not counted
    per_pair = {}
    for _ in range(pairs):
        before = thread_cpu_ns(pid)
        ts = [threading.Thread(target=post_raw, args=(host, port, b)) for b in bodies]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for k, v in cpu_diff(thread_cpu_ns(pid), before).items():
            per_pair.setdefault(k, []).append(v)
    out = {}
    for k, vs in sorted(per_pair.items()):
        vs = sorted(vs + [0] * (pairs - len(vs)))  # a pair that took no CPU on a thread counts as 0
        if vs[-1]:
            out[group_name(k)] = vs[pairs // 2] / 1e6
    return out


def read_tsv(path):
    lines = pathlib.Path(path).read_text().splitlines()
    head = lines[0].split("\t")
    return [dict(zip(head, line.split("\t"))) for line in lines[1:] if line]


def wait_rusage(proc, timeout_s):
    """Waits for a child started by subprocess; returns (exit status, CPU seconds it used)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, ru.ru_utime + ru.ru_stime
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    return -9, float("nan")


def run_once(args, host, port, server_pid, run, tmp):
    """One run: windows, the stream client, the attacker, /proc samples at the window edges."""
    rng = random.Random(args.seed * 1000 + run)
    edges = [0.0]
    for _ in range(args.windows):
        edges.append(edges[-1] + args.window_s * rng.uniform(0.5, 1.5))
    # Bodies of max_tokens from --max-tokens / 2 to 3 / 2 x --max-tokens (mean --max-tokens), one drawn per
    # request: equal requests in a closed loop run in waves (admitted together, finished together).
    lo, hi = max(1, args.max_tokens // 2), max(1, args.max_tokens * 3 // 2)
    files = []
    for n in range(lo, hi + 1):
        body = {"model": args.model_name, "prompt": args.prompt, "max_tokens": n, "ignore_eos": True,
                "stream": True, "temperature": 0}
        files.append(pathlib.Path(tmp) / f"body{n}.json")
        files[-1].write_text(json.dumps(body))
    body_file = ",".join(str(f) for f in files)
    streams_out, attack_out = pathlib.Path(tmp) / f"streams{run}.tsv", pathlib.Path(tmp) / f"attack{run}.tsv"
    now = time.monotonic_ns()
    t_streams = now + int(0.3e9)
    t_start = t_streams + int(args.warmup_s * 1e9)
    t_end = t_start + int(edges[-1] * 1e9)
    common = ["--host", host, "--port", str(port)]
    client = subprocess.Popen([args.client, "streams", *common, "--streams", str(args.streams), "--body-file",
                               body_file, "--start-ns", str(t_streams), "--end-ns", str(t_end),
                               "--drain-s", str(args.timeout), "--ramp-s", str(args.ramp_s),
                               "--think-ms", str(args.think_ms), "--seed", str(args.seed * 1000 + run),
                               "--out", str(streams_out)])
    attacker = None if args.aa else subprocess.Popen(
        [args.client, "attack", *common, "--start-ns", str(t_start), "--edges", ",".join(f"{e:.6f}" for e in edges),
         "--interval-s", str(args.hostile_interval_s), "--levels", str(args.levels), "--keys", str(args.keys),
         "--nice", "19", "--out", str(attack_out)])
    samples = []  # server thread CPU at each window edge
    for e in edges:
        target = t_start + int(e * 1e9)
        while (d := target - time.monotonic_ns()) > 0:
            time.sleep(d / 1e9)
        if server_pid:
            samples.append((time.monotonic_ns(), thread_cpu_ns(server_pid)))
    rc_a, cpu_a = wait_rusage(attacker, args.timeout + 60) if attacker else (0, 0.0)
    rc_c, cpu_c = wait_rusage(client, args.timeout + 60)
    if rc_a or rc_c:
        raise RuntimeError(f"hostile_load_client exited {rc_c} (streams) / {rc_a} (attack)")
    streams = [{k: int(v) for k, v in r.items()} for r in read_tsv(streams_out)]
    if attacker:
        hostile = [{"kind": r["kind"], "start": int(r["start_ns"]), "end": int(r["end_ns"]),
                    "status": int(r["status"])} for r in read_tsv(attack_out)]
    else:  # --aa: nothing is sent; the "with" windows get the attack's schedule as pretend pairs
        hostile = []
        for w in range(1, len(edges) - 1, 2):
            t, w1 = t_start + int(edges[w] * 1e9), t_start + int(edges[w + 1] * 1e9)
            while t < w1:
                hostile += [{"kind": "deep", "start": t, "end": t + int(15e6), "status": 400},
                            {"kind": "keys", "start": t, "end": t + int(40e6), "status": 400}]
                t += int(args.hostile_interval_s * 1e9)
    return {"edges": edges, "t_start": t_start, "streams": streams, "hostile": hostile, "samples": samples,
            "client_cpu_s": cpu_c, "attacker_cpu_s": cpu_a, "span_s": edges[-1]}


def classify(run):
    """Per window: TTFTs (ms) of all its requests and of those exposed to a (real or sham) hostile body."""
    edges, t0 = run["edges"], run["t_start"]
    bounds = [t0 + int(e * 1e9) for e in edges]
    real = sorted((h["start"], h["end"]) for h in run["hostile"])
    # Sham pairs: each "without" window gets the next ("with") window's hostile bodies at the same offsets
    # from the window's start with the same durations (the attacker at nice 19 starts some pairs late).
    sham = []
    for h in run["hostile"]:
        w = int(np.searchsorted(bounds, h["start"], side="right")) - 1
        if w < 1 or w % 2 == 0 or w >= len(bounds) - 1:
            continue
        t = bounds[w - 1] + (h["start"] - bounds[w])
        if t < bounds[w]:
            sham.append((t, t + h["end"] - h["start"]))
    sham.sort()
    windows = [{"with": w % 2 == 1, "all": [], "exposed": []} for w in range(len(edges) - 1)]

    def overlaps(spans, a, b):
        # spans sorted by start; any (s, e) with s < b and a < e
        lo, hi = 0, len(spans)
        while lo < hi:  # first span starting at or after b
            mid = (lo + hi) // 2
            if spans[mid][0] < b:
                lo = mid + 1
            else:
                hi = mid
        return any(spans[j][1] > a for j in range(max(0, lo - 8), lo))

    failed = 0
    for r in run["streams"]:
        if not r["ok"] or r["first_ns"] == 0:
            failed += 1
            continue
        a, b = r["start_ns"], r["first_ns"]
        w = np.searchsorted(bounds, a, side="right") - 1
        if w < 0 or w >= len(windows) or not bounds[w] <= b < bounds[w + 1]:
            continue
        ttft = (b - a) / 1e6
        win = windows[w]
        if win["with"]:
            win["all"].append(ttft)
            if overlaps(real, a, b):
                win["exposed"].append(ttft)
        elif not overlaps(real, a, b):  # a pair sent just before the window began may still be in flight
            win["all"].append(ttft)
            if overlaps(sham, a, b):
                win["exposed"].append(ttft)
    return windows, failed


def pooled(windows, with_, part):
    v = [t for w in windows if w["with"] == with_ for t in w[part]]
    return np.array(v)


def bootstrap_diff(windows, part, qs, n_boot, seed):
    """95% intervals of percentile(with windows' `part`) - percentile(without windows' `part`). The unit
    resampled (with replacement) is a block of two adjacent windows, one of each kind (2k, 2k + 1): slow
    drift of the machine's load moves both halves of a block alike, so it cancels in the difference."""
    rng = np.random.default_rng(seed)
    blocks = [(np.array(windows[k][part]), np.array(windows[k + 1][part])) for k in range(0, len(windows) - 1, 2)]
    out = {q: [] for q in qs}
    for _ in range(n_boot):
        pick = rng.integers(0, len(blocks), len(blocks))
        wo = np.concatenate([blocks[i][0] for i in pick])
        wi = np.concatenate([blocks[i][1] for i in pick])
        if len(wi) == 0 or len(wo) == 0:
            continue
        for q, x, y in zip(qs, np.percentile(wi, qs), np.percentile(wo, qs)):
            out[q].append(x - y)
    return {q: (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) if v else (float("nan"),) * 2
            for q, v in out.items()}


def load_cpu(run, interval_s):
    """Server CPU by thread in "with" vs "without" windows: ms per second of each, and per pair sent."""
    s = run["samples"]
    if not s:
        return None
    tot = {True: {}, False: {}}
    span = {True: 0.0, False: 0.0}
    for w in range(len(s) - 1):
        kind = w % 2 == 1
        span[kind] += (s[w + 1][0] - s[w][0]) / 1e9
        for k, v in cpu_diff(s[w + 1][1], s[w][1]).items():
            tot[kind][k] = tot[kind].get(k, 0) + v
    pairs = sum(1 for h in run["hostile"] if h["kind"] == "keys")
    out = {}
    for k in sorted(set(tot[True]) | set(tot[False])):
        with_rate = tot[True].get(k, 0) / 1e6 / span[True]
        wo_rate = tot[False].get(k, 0) / 1e6 / span[False]
        out[group_name(k)] = {"ms_per_s_with": with_rate, "ms_per_s_without": wo_rate,
                              "ms_per_pair": (with_rate - wo_rate) * span[True] / pairs if pairs else float("nan")}
    return out


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
    p.add_argument("--server-pid", type=int, help="with --base-url: the server's pid, for its CPU by thread")
    p.add_argument("--xinfer", help="xinfer binary: started as `serve` on a free port, stopped at the end")
    p.add_argument("--client", help="hostile_load_client binary (default: bench/ of --xinfer's build dir)")
    p.add_argument("--model", help="with --xinfer: model directory (default: stories260K, converted)")
    p.add_argument("--server-args", default="--max-num-seqs 512",
                   help="with --xinfer: extra serve flags (default: every stream runs at once)")
    p.add_argument("--server-log", help="with --xinfer: file for the server's output")
    p.add_argument("--streams", type=int, default=300)
    p.add_argument("--windows", type=int, default=40, help="alternating windows per run, the first without")
    p.add_argument("--window-s", type=float, default=1.5)
    p.add_argument("--runs", type=int, default=1, help="repeated runs on the same server (p99's spread)")
    p.add_argument("--warmup-s", type=float, default=2.0, help="load before the first window (not counted)")
    p.add_argument("--ramp-s", type=float, default=1.0, help="the streams' first requests spread over this")
    p.add_argument("--think-ms", type=float, default=10.0,
                   help="pause between a stream's requests, uniform in [0, this] (keeps the streams out of step)")
    p.add_argument("--max-tokens", type=int, default=32,
                   help="mean tokens per stream request (ignore_eos; uniform from half to 1.5 times this)")
    p.add_argument("--prompt", default="Once upon a time")
    p.add_argument("--levels", type=int, default=100000, help="nesting depth of the deep body")
    p.add_argument("--keys", type=int, default=100000, help="distinct unknown keys of the wide body")
    p.add_argument("--hostile-interval-s", type=float, default=0.5, help="a pair every this many seconds")
    p.add_argument("--idle-pairs", type=int, default=20, help="pairs sent to the idle server for its CPU cost")
    p.add_argument("--aa", action="store_true",
                   help="A/A run: no hostile bodies; the 'with' windows get pretend pairs (15 / 40 ms) on the same "
                        "schedule, so 'exposed - sham' shows what the machine resolves when nothing is sent")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--seed", type=int, default=0, help="window lengths")
    p.add_argument("--json", help="write the figures here")
    a = p.parse_args(argv)
    if (a.base_url is None) == (a.xinfer is None):
        p.error("give exactly one of --base-url and --xinfer")
    if a.windows < 4 or a.windows % 2:
        p.error("--windows must be even and >= 4")
    if a.client is None:
        if a.xinfer is None:
            p.error("--client is needed with --base-url")
        a.client = str(pathlib.Path(a.xinfer).resolve().parents[3] / "bench/hostile_load_client")
    if not os.access(a.client, os.X_OK):
        p.error(f"{a.client} is not an executable: build the target hostile_load_client (or pass --client)")
    return a


def pct(v, q):
    return float(np.percentile(v, q)) if len(v) else float("nan")


def main(argv=None):
    args = parse_args(argv)
    proc = None
    tmp = tempfile.TemporaryDirectory(prefix="hostile_load_")
    load_before = os.getloadavg()
    try:
        if args.xinfer:
            model = args.model or str(convert_stories260k(pathlib.Path(tmp.name) / "stories260K"))
            host, port = "127.0.0.1", serve_bench.free_port()
            cmd = f"{args.xinfer} serve --model {model} --port {port} {args.server_args}"
            proc, cmd = serve_bench.start_server(cmd, port, args.server_log)
            print(f"started: {cmd}", file=sys.stderr)
            server_pid = proc.pid
        else:
            u = urllib.parse.urlparse(args.base_url)
            host, port = u.hostname, u.port or 80
            server_pid = args.server_pid
        serve_bench.wait_ready(host, port, proc, 120)
        _, models = serve_bench.http_get(host, port, "/v1/models")
        args.model_name = json.loads(models)["data"][0]["id"]
        idle = pair_cpu_cost(host, port, server_pid, args.levels, args.keys, args.idle_pairs) if server_pid else None
        runs = [run_once(args, host, port, server_pid, r, tmp.name) for r in range(args.runs)]
    finally:
        serve_bench.stop_server(proc)
        tmp.cleanup()
    load_after = os.getloadavg()

    qs = [50, 90, 99]
    all_windows, per_run, failed_total = [], [], 0
    print(f"{args.streams} streams x {args.max_tokens} tokens; {args.runs} run(s) of {args.windows} windows of "
          f"{args.window_s:g} s (+-50%) alternating without / with a {args.levels}-level + {args.keys}-key pair "
          f"every {args.hostile_interval_s:g} s; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    for r, run in enumerate(runs):
        windows, failed = classify(run)
        failed_total += failed
        all_windows += windows
        row = {"failed": failed, "client_cores": run["client_cpu_s"] / (run["span_s"] + args.warmup_s),
               "attacker_cpu_s": run["attacker_cpu_s"], "server_cpu_under_load": load_cpu(run, args.hostile_interval_s)}
        for name, with_, part in (("without", False, "all"), ("sham", False, "exposed"), ("with", True, "all"),
                                  ("exposed", True, "exposed")):
            v = pooled(windows, with_, part)
            row[name] = {"n": len(v), **{f"p{q}": pct(v, q) for q in qs}, "mean": float(v.mean()) if len(v) else None}
        row["exposed_minus_sham"] = {f"p{q}": row["exposed"][f"p{q}"] - row["sham"][f"p{q}"] for q in qs}
        row["with_minus_without"] = {f"p{q}": row["with"][f"p{q}"] - row["without"][f"p{q}"] for q in qs}
        per_run.append(row)
        print(f" run {r}: client {row['client_cores']:.3f} cores, attacker {run['attacker_cpu_s']:.2f} s CPU, "
              f"{failed} failed")
        for name in ("without", "sham", "with", "exposed"):
            x = row[name]
            print(f"   {name:<8} {x['n']:6d} requests  TTFT p50 {x['p50']:7.1f}  p90 {x['p90']:7.1f}  "
                  f"p99 {x['p99']:7.1f} ms")
        print("   exposed - sham: " + ", ".join(f"p{q} {row['exposed_minus_sham'][f'p{q}']:+.1f}" for q in qs) +
              " ms; with - without: " + ", ".join(f"p{q} {row['with_minus_without'][f'p{q}']:+.1f}" for q in qs))
    pooled_rows = {}
    for name, with_, part in (("without", False, "all"), ("sham", False, "exposed"), ("with", True, "all"),
                              ("exposed", True, "exposed")):
        v = pooled(all_windows, with_, part)
        pooled_rows[name] = {"n": len(v), **{f"p{q}": pct(v, q) for q in qs}}
    ci_exposed = bootstrap_diff(all_windows, "exposed", [50, 90], args.bootstrap, args.seed)
    ci_with = bootstrap_diff(all_windows, "all", [50, 90], args.bootstrap, args.seed + 1)
    d = {f"p{q}": pooled_rows["exposed"][f"p{q}"] - pooled_rows["sham"][f"p{q}"] for q in qs}
    dw = {f"p{q}": pooled_rows["with"][f"p{q}"] - pooled_rows["without"][f"p{q}"] for q in qs}
    p99s = [r["exposed_minus_sham"]["p99"] for r in per_run]
    print(f" pooled over {len(all_windows)} windows: exposed {pooled_rows['exposed']['n']} vs sham "
          f"{pooled_rows['sham']['n']} requests: p50 {d['p50']:+.1f} ms [95% {ci_exposed[50][0]:+.1f}, "
          f"{ci_exposed[50][1]:+.1f}], p90 {d['p90']:+.1f} ms [{ci_exposed[90][0]:+.1f}, {ci_exposed[90][1]:+.1f}]; "
          f"with - without p50 {dw['p50']:+.1f} [{ci_with[50][0]:+.1f}, {ci_with[50][1]:+.1f}], p90 {dw['p90']:+.1f} "
          f"[{ci_with[90][0]:+.1f}, {ci_with[90][1]:+.1f}]")
    print(" exposed - sham p99 per run: " + ", ".join(f"{x:+.1f}" for x in p99s) + " ms")
    if idle:
        print(" server CPU per hostile pair, idle server: " + ", ".join(f"{k} {v:.2f} ms" for k, v in idle.items()))
    for r, row in enumerate(per_run):
        lc = row["server_cpu_under_load"]
        if lc:
            print(f" run {r} server CPU per pair under load (with - without windows): " +
                  ", ".join(f"{k} {v['ms_per_pair']:+.2f} ms" for k, v in lc.items() if k.startswith("xi-http")) +
                  "; all threads ms/s without " + f"{sum(v['ms_per_s_without'] for v in lc.values()):.0f}")
    hostile = [h for run in runs for h in run["hostile"]]
    bad = [h for h in hostile if h["status"] != 400]
    for kind in ("deep", "keys"):
        took = [(h["end"] - h["start"]) / 1e6 for h in hostile if h["kind"] == kind and h["status"] == 400]
        print(f" hostile {kind}{' (pretend: --aa)' if args.aa else ''}: {sum(h['kind'] == kind for h in hostile)} sent, {len(took)} answered 400, "
              f"p50 {pct(took, 50):.1f} ms, max {max(took) if took else float('nan'):.1f} ms")
    for h in bad[:5]:
        print(f" hostile {h['kind']} answered {h['status']}")
    if args.json:
        out = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "config": {k: v for k, v in vars(args).items() if k != "json"},
               "runs": per_run, "pooled": pooled_rows, "exposed_minus_sham": d,
               "exposed_minus_sham_ci95": {f"p{q}": ci_exposed[q] for q in ci_exposed},
               "with_minus_without": dw, "with_minus_without_ci95": {f"p{q}": ci_with[q] for q in ci_with},
               "exposed_minus_sham_p99_per_run": p99s, "pair_cpu_ms_idle": idle,
               "stream_requests": sum(len(run["streams"]) for run in runs), "stream_failed": failed_total,
               "hostile_sent": len(hostile), "hostile_not_400": len(bad),
               "loadavg_before": load_before, "loadavg_after": load_after}
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1))
    return 1 if failed_total or bad or not hostile else 0


if __name__ == "__main__":
    sys.exit(main())
