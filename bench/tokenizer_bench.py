#!/usr/bin/env python3
"""Single-thread encode MB/s: xinfer (bench/tokenizer_bench) vs Hugging Face `tokenizers`, same text,
same chunking, one run. Prints both figures and the ratio per tokenizer (target ratio >= 1.0).

  python3 bench/tokenizer_bench.py --build build/cpu-release [--names llama3 qwen2_5 llama2 gpt2]
"""
import argparse
import gzip
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def chunks_of(text: bytes, size: int):
    out, pos = [], 0
    while pos < len(text):
        end = min(len(text), pos + size)
        nl = text.find(b"\n", end)
        end = len(text) if nl < 0 else nl + 1
        out.append(text[pos:end].decode("utf-8"))
        pos = end
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build" / "cpu-release"))
    ap.add_argument("--names", nargs="*", default=["llama3", "qwen2_5", "mistral_nemo", "deepseek_v3", "gpt2", "llama2"])
    ap.add_argument("--chunk", type=int, default=4096)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    bench = pathlib.Path(args.build) / "bench" / "tokenizer_bench"
    text = (SHARED / "corpora/tinyshakespeare/input.txt").read_bytes() + (SHARED / "corpora/wikitext-2/test.txt").read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "text.txt").write_bytes(text)
        chunks = chunks_of(text, args.chunk)
        print(f"text: {len(text) / 1e6:.2f} MB, {len(chunks)} chunks of ~{args.chunk} B, single thread, best of {args.passes}")
        print(f"{'tokenizer':<14}{'HF MB/s':>10}{'xinfer MB/s':>13}{'ratio':>8}{'  (xinfer cold MB/s)':>22}")
        for name in args.names:
            d = tmp / name
            d.mkdir()
            with gzip.open(SHARED / "tokenizers" / name / "tokenizer.json.gz", "rb") as fi, open(d / "tokenizer.json", "wb") as fo:
                shutil.copyfileobj(fi, fo)
            hf = tokenizers.Tokenizer.from_file(str(d / "tokenizer.json"))
            best, n_ids = 1e30, 0
            for _ in range(args.passes):
                t0 = time.perf_counter()
                n_ids = sum(len(hf.encode(c, add_special_tokens=False).ids) for c in chunks)
                best = min(best, time.perf_counter() - t0)
            hf_mbs = len(text) / 1e6 / best
            out = subprocess.run([str(bench), "--tokenizer", str(d), "--text", str(tmp / "text.txt"), "--chunk",
                                  str(args.chunk), "--passes", str(args.passes)], capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            assert r["ids"] == n_ids, f"{name}: id count differs ({r['ids']} vs {n_ids})"
            print(f"{name:<14}{hf_mbs:>10.2f}{r['mb_per_s']:>13.2f}{r['mb_per_s'] / hf_mbs:>8.2f}{r['cold_mb_per_s']:>22.2f}")


if __name__ == "__main__":
    main()
