#!/usr/bin/env python3
"""Serving a GGUF model on the CPU: `xinfer serve` and llama.cpp's `llama-server` side by side, one after the
other on the same machine, with the same client (bench/serve_bench.py), the same prompts and the same threads.

  python3 bench/gguf_serve_bench.py --gguf "$(scripts/fetch_smollm2.sh)" \\
      --xinfer build/cpu-release/src/xinfer/cli/xinfer --llama-server /path/to/llama-server \\
      [--concurrency 8] [--num-prompts 32] [--input-len 128] [--output-len 128] [--threads 2] [--json OUT]

llama-server is llama.cpp's own HTTP server (continuous batching over `-np` parallel slots); llama-cpp-python's
wheel does not ship it, but its source distribution vendors llama.cpp, which builds it:
    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 && tar xzf llama_cpp_python-0.3.36.tar.gz
    cd llama_cpp_python-0.3.36/vendor/llama.cpp && cmake -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \\
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF && ninja -C build llama-server
Both get `--concurrency` slots and a context of concurrency x (input + output) tokens; prompts are random token
ids (no shared prefix, so neither prefix cache helps), ignore_eos so every request generates exactly
--output-len tokens, greedy, a new connection per request (llama-server closes idle keep-alive connections,
which a pooled client then sees as failed requests). Prints serve_bench's summary for each and the ratio of output tok/s; the roofline
for reference is bench/gguf_cpu_bench.py's (batch 8 reads the weights once per step).
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent


def run_one(name, server_cmd, args, tmp):
    out = pathlib.Path(tmp) / f"{name}.json"
    cmd = [sys.executable, str(ROOT / "serve_bench.py"), "--server-cmd", server_cmd,
           "--server-log", str(pathlib.Path(tmp) / f"{name}.log"), "--server-timeout", "300",
           "--concurrency", str(args.concurrency), "--num-prompts", str(args.num_prompts),
           "--warmup", str(args.concurrency), "--input-len", str(args.input_len), "--output-len",
           str(args.output_len), "--ignore-eos", "--id-low", "100", "--id-high", str(args.id_high),
           "--no-progress", "--no-keep-alive", "--label", name, "--json", str(out)]
    print(f"== {name}: {server_cmd}", flush=True)
    r = subprocess.run(cmd, text=True, capture_output=True)
    print(r.stdout, end="")
    if r.returncode != 0:
        print(r.stderr, file=sys.stderr)
        log = pathlib.Path(tmp) / f"{name}.log"
        if log.exists():
            print(log.read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"{name}: serve_bench failed ({r.returncode})")
    return json.loads(out.read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--xinfer", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--id-high", type=int, default=49000, help="token ids drawn from [100, this)")
    ap.add_argument("--xinfer-args", default="", help="extra flags for xinfer serve")
    ap.add_argument("--only", choices=["xinfer", "llama.cpp"], default=None, help="run one server only")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ctx = args.concurrency * (args.input_len + args.output_len + 16)
    servers = {
        "xinfer": f"{args.xinfer} serve --model {args.gguf} --port {{port}} --threads {args.threads} "
                  f"--max-num-seqs {args.concurrency} {args.xinfer_args}",
        "llama.cpp": f"{args.llama_server} -m {args.gguf} --port {{port}} -t {args.threads} -tb {args.threads} "
                     f"-np {args.concurrency} -c {ctx} --cont-batching --no-warmup",
    }
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cmd in servers.items():
            if args.only in (None, name):
                results[name] = run_one(name, cmd, args, tmp)
    if len(results) < 2:
        return
    tok = {n: r["summary"]["output_throughput"] for n, r in results.items()}
    print(f"output tok/s at concurrency {args.concurrency}: xinfer {tok['xinfer']:.1f}, llama.cpp "
          f"{tok['llama.cpp']:.1f}, ratio {tok['xinfer'] / tok['llama.cpp']:.2f}x")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
