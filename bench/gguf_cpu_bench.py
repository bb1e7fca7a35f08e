#!/usr/bin/env python3
"""CPU decode and prefill of a GGUF model, xinfer and llama.cpp side by side in one run, with the roofline.

  python3 bench/gguf_cpu_bench.py --gguf "$(scripts/fetch_smollm2.sh)" --xinfer build/cpu-release/src/xinfer/cli/xinfer

Figures (each the median of --reps runs, after one warm-up):
  prefill  tok/s of one 128-token prompt (--prefill-len)
  decode   tok/s of 128 tokens (--decode-len) at batch 1, after a 16-token prompt, one token per forward
  batch 8  output tok/s of 8 sequences decoding together (each 16-token prompt + 128 tokens), counting
           decode steps only (xinfer: 8 / the median inter-token latency of the offline run)
  long     (not by default: --figures ...,long) one --long-len-token prompt (2048), then --decode-len tokens
           at that context: prefill tok/s and decode tok/s, where attention is most of the work
Roofline: the bytes one decode step must read (every linear's quantized weights, the tied Q8_0 lm_head, the
norms; the embedding row is negligible), over the memory bandwidth measured here with numpy (a large array
copy, bytes read + written). A 135M model's 98 MB do not fit the 32 MB L3, so DRAM bandwidth is the ceiling
at batch 1; at batch 8 the weights are read once per step for all rows.

llama.cpp runs through llama-cpp-python (pip builds llama.cpp from source: a peer for benchmarks, not a test
dependency), 1:1 the same threads. xinfer runs `xinfer bench --backend cpu` (latency mode for batch 1, offline
throughput for batch 8) and reports its own TTFT / ITL; prefill tok/s = prompt / TTFT.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def measure_bandwidth_gbs():
    a = np.ones(64 << 20, dtype=np.float32)  # 256 MiB, far past the L3
    b = np.empty_like(a)
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        dt = time.perf_counter() - t
        best = max(best, 2 * a.nbytes / dt / 1e9)
    return best


def decode_bytes(path):
    """Bytes one decode step reads: every tensor except the embedding, plus the lm_head (output.weight, or the
    tied token_embd)."""
    import gguf

    r = gguf.GGUFReader(path)
    total, embd, has_output = 0, 0, False
    for t in r.tensors:
        if t.name == "token_embd.weight":
            embd = int(t.n_bytes)
            continue
        has_output |= t.name == "output.weight"
        total += int(t.n_bytes)
    return total + (0 if has_output else embd)


def llama_cpp_figures(path, threads, prefill_len, decode_len, reps, figures, long_len):
    import llama_cpp
    from llama_cpp import Llama

    # Room for 8 sequences in one context (llama-cpp-python does not expose n_seq_max: set the default).
    import llama_cpp.llama_cpp as low

    default_params = low.llama_context_default_params

    def params_for_8():
        p = default_params()
        p.n_seq_max = 8
        return p

    low.llama_context_default_params = params_for_8
    try:
        llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=8 * 256, n_batch=512,
                    verbose=False)
    finally:
        low.llama_context_default_params = default_params
    rng = np.random.default_rng(0)
    vocab = llm.n_vocab()

    def prompt(n):
        return [int(x) for x in rng.integers(100, vocab - 100, n)]

    def run_prefill():
        llm.reset()
        ids = prompt(prefill_len)
        t = time.perf_counter()
        llm.eval(ids)
        return prefill_len / (time.perf_counter() - t)

    def run_decode():
        llm.reset()
        llm.eval(prompt(16))
        t = time.perf_counter()
        for tok in prompt(decode_len):
            llm.eval([tok])
        return decode_len / (time.perf_counter() - t)

    def run_batch(nseq=8):
        ctx = llm.ctx
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        batch = llama_cpp.llama_batch_init(16 * nseq, 0, nseq)
        try:
            def submit(tokens_per_seq, pos0):
                batch.n_tokens = 0
                for s, toks in enumerate(tokens_per_seq):
                    for j, tok in enumerate(toks):
                        i = batch.n_tokens
                        batch.token[i] = tok
                        batch.pos[i] = pos0 + j
                        batch.n_seq_id[i] = 1
                        batch.seq_id[i][0] = s
                        batch.logits[i] = j == len(toks) - 1
                        batch.n_tokens += 1
                assert llama_cpp.llama_decode(ctx, batch) == 0
            submit([prompt(16) for _ in range(nseq)], 0)
            t = time.perf_counter()
            for step in range(decode_len):
                submit([[int(x)] for x in rng.integers(100, vocab - 100, nseq)], 16 + step)
            return nseq * decode_len / (time.perf_counter() - t)
        finally:
            llama_cpp.llama_batch_free(batch)

    out = {}
    for name, fn in (("prefill", run_prefill), ("decode", run_decode), ("batch8", run_batch)):
        if name not in figures:
            out[name] = float("nan")
            continue
        fn()
        out[name] = statistics.median(fn() for _ in range(reps))
    out["long_prefill"] = out["long_decode"] = float("nan")
    if "long" in figures:
        del llm
        long_llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads,
                         n_ctx=long_len + decode_len + 16, n_batch=512, verbose=False)
        pre, dec = [], []
        for _ in range(reps):
            long_llm.reset()
            ids = prompt(long_len)
            t = time.perf_counter()
            long_llm.eval(ids)
            pre.append(long_len / (time.perf_counter() - t))
            t = time.perf_counter()
            for tok in prompt(decode_len):
                long_llm.eval([tok])
            dec.append(decode_len / (time.perf_counter() - t))
        out["long_prefill"], out["long_decode"] = statistics.median(pre), statistics.median(dec)
    return out


def xinfer_figures(xinfer, path, threads, prefill_len, decode_len, reps, figures, long_len):
    out = {}
    with tempfile.TemporaryDirectory() as d:
        base = [xinfer, "bench", "--backend", "cpu", "--model", path, "--threads", str(threads), "--no-progress",
                "--no-ceilings", "--output-dir", d]
        runs = {
            "prefill": ["--latency", "--input-len", str(prefill_len), "--output-len", "2", "--num-iters", str(reps)],
            "decode": ["--latency", "--input-len", "16", "--output-len", str(decode_len), "--num-iters", str(reps)],
            "batch8": ["--input-len", "16", "--output-len", str(decode_len), "--num-prompts", "8",
                       "--max-num-seqs", "8"],
            "long": ["--latency", "--input-len", str(long_len), "--output-len", str(decode_len), "--num-iters",
                     str(reps)],
        }
        for name in figures:
            max_len = long_len + decode_len + 16 if name == "long" else 2048
            subprocess.run(base + runs[name] + ["--max-model-len", str(max_len), "--name", name], check=True,
                           capture_output=True)
        res = {n: json.load(open(os.path.join(d, n + ".json")))["results"][0] for n in figures}
    out["raw"] = res
    nan = float("nan")
    out["prefill"] = prefill_len / (res["prefill"]["ttft_ms"]["p50"] / 1e3) if "prefill" in res else nan
    out["decode"] = 1e3 / res["decode"]["itl_ms"]["p50"] if "decode" in res else nan
    # 8 sequences decoding together: one step per token
    out["batch8"] = 8e3 / res["batch8"]["itl_ms"]["p50"] if "batch8" in res else nan
    out["long_prefill"] = long_len / (res["long"]["ttft_ms"]["p50"] / 1e3) if "long" in res else nan
    out["long_decode"] = 1e3 / res["long"]["itl_ms"]["p50"] if "long" in res else nan
    return out


def cpu_time_prefill(path, xinfer, prefill_len, reps):
    """CPU seconds per prefill of one prompt at 1 thread, both engines: on a shared, loaded machine the CPU
    time of a single-threaded run is what it would take on an idle core (wall clock is not, and llama.cpp's
    spinning threads collapse under contention). llama.cpp: time.process_time() around llm.eval (median of
    `reps`); xinfer: the children's rusage of `bench --latency` with 1 + 10 iterations minus that with 1
    (loading, KV allocation and the warm-up cancel)."""
    import resource
    from llama_cpp import Llama

    llm = Llama(model_path=path, n_threads=1, n_threads_batch=1, n_ctx=max(512, 2 * prefill_len), n_batch=512,
                verbose=False)
    rng = np.random.default_rng(0)

    def ids():
        return [int(x) for x in rng.integers(100, llm.n_vocab() - 100, prefill_len)]

    llm.reset()
    llm.eval(ids())
    times = []
    for _ in range(reps):
        llm.reset()
        p = ids()
        c = time.process_time()
        llm.eval(p)
        times.append(time.process_time() - c)
    llama_s = statistics.median(times)

    def child_cpu(iters):
        with tempfile.TemporaryDirectory() as d:
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([xinfer, "bench", "--backend", "cpu", "--model", path, "--threads", "1", "--no-progress",
                            "--no-ceilings", "--output-dir", d, "--max-model-len", str(max(512, 2 * prefill_len)),
                            "--kv-cache-memory", "64MiB", "--latency", "--input-len", str(prefill_len),
                            "--output-len", "1", "--num-iters", str(iters), "--name", "p"],
                           check=True, capture_output=True)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            return (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)

    xinfer_s = (child_cpu(11) - child_cpu(1)) / 10
    return llama_s, xinfer_s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--xinfer", help="the xinfer binary (omit to run llama.cpp only)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prefill-len", type=int, default=128)
    ap.add_argument("--decode-len", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip the peer")
    ap.add_argument("--long-len", type=int, default=2048, help="the long figure's prompt length")
    ap.add_argument("--figures", default="prefill,decode,batch8",
                    help="comma-separated subset of prefill,decode,batch8,long (default: the first three)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run both engines this many times, alternating (the figures of each round are printed)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--cpu-time-prefill", action="store_true",
                    help="only: prefill CPU time per prompt at 1 thread, both engines (for a loaded machine)")
    args = ap.parse_args()
    if args.cpu_time_prefill:
        for rnd in range(args.rounds):
            l, x = cpu_time_prefill(args.gguf, args.xinfer, args.prefill_len, args.reps)
            print(f"round {rnd + 1} (load average {os.getloadavg()[0]:.2f}): prefill {args.prefill_len} tokens, "
                  f"1 thread, CPU time: llama.cpp {l * 1e3:.1f} ms ({args.prefill_len / l:.1f} tok/s per core), "
                  f"xinfer {x * 1e3:.1f} ms ({args.prefill_len / x:.1f} tok/s per core): {l / x:.2f}x", flush=True)
        return 0

    bw = measure_bandwidth_gbs()
    step_bytes = decode_bytes(args.gguf)
    roof = bw * 1e9 / step_bytes
    print(f"memory bandwidth (numpy copy, read + write): {bw:.1f} GB/s; one decode step reads "
          f"{step_bytes / 1e6:.1f} MB -> roofline {roof:.0f} tok/s at batch 1, {8 * roof:.0f} at batch 8",
          flush=True)
    figures = [f for f in args.figures.split(",") if f]
    for f in figures:
        if f not in ("prefill", "decode", "batch8", "long"):
            ap.error(f"unknown figure {f!r}")
    all_rounds = []
    for rnd in range(args.rounds):
        rows = {}
        if not args.no_llama_cpp:
            rows["llama.cpp"] = llama_cpp_figures(args.gguf, args.threads, args.prefill_len, args.decode_len,
                                                  args.reps, figures, args.long_len)
        if args.xinfer:
            rows["xinfer"] = xinfer_figures(args.xinfer, args.gguf, args.threads, args.prefill_len,
                                            args.decode_len, args.reps, figures, args.long_len)
        all_rounds.append(rows)
        load = os.getloadavg()[0]
        print(f"\nround {rnd + 1} (load average {load:.2f})")
        long_head = f" {f'ctx {args.long_len}: prefill':>19} {'decode tok/s':>13}" if "long" in figures else ""
        print(f"{'engine':<10} {'prefill tok/s':>14} {'decode tok/s':>13} {'of roofline':>12} {'batch 8 tok/s':>14}"
              + long_head)
        for name, r in rows.items():
            long_cols = f" {r['long_prefill']:>19.1f} {r['long_decode']:>13.1f}" if "long" in figures else ""
            print(f"{name:<10} {r['prefill']:>14.1f} {r['decode']:>13.1f} {r['decode'] / roof:>11.0%} "
                  f"{r['batch8']:>14.1f}" + long_cols)
        if "llama.cpp" in rows and "xinfer" in rows:
            x, l = rows["xinfer"], rows["llama.cpp"]
            long_cols = (f" {x['long_prefill'] / l['long_prefill']:>18.2f}x {x['long_decode'] / l['long_decode']:>12.2f}x"
                         if "long" in figures else "")
            print(f"{'ratio':<10} {x['prefill'] / l['prefill']:>13.2f}x {x['decode'] / l['decode']:>12.2f}x "
                  f"{'':>12} {x['batch8'] / l['batch8']:>13.2f}x" + long_cols, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bandwidth_gbs": bw, "decode_step_bytes": step_bytes, "roofline_tok_s": roof,
                       "threads": args.threads,
                       "rounds": [{k: {kk: vv for kk, vv in v.items() if kk != "raw"} for k, v in rows.items()}
                                  for rows in all_rounds]}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
