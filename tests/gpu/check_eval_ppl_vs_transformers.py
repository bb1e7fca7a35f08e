#!/usr/bin/env python3
"""`xinfer eval ppl` against transformers' perplexity on the same windows (issue 15's check), GPU machine.

transformers (float32 weights, the model's own modeling_llama, on CUDA when there is one) scores the text's first
N token ids with the sliding-window loop of its guide "Perplexity of fixed-length models" (windows [begin, end),
begin = 0, stride, 2 stride, ...; the tokens already scored by the previous window are context only, each
window's first token is never a target; the loop stops at the first window reaching the end), summing
-log_softmax(logits)[target] in float64 per target token. xinfer's `eval ppl --json` (CPU backend: f32; CUDA:
the model's own dtype) on the same text, --ctx, --stride, --max-tokens must give the same nll_sum and
tokens_scored: CPU within 1e-5 relative, CUDA within 1e-2 (bf16 activations). The token ids are the
`tokenizers` package's (Tokenizer.from_file(tokenizer.json).encode(text), special tokens added), whose count
must equal xinfer's `text_tokens`.

Usage: check_eval_ppl_vs_transformers.py XINFER MODEL_DIR TEXT [--ctx 128 --stride 64 --max-tokens 2048]
       [--numpy]  (a dry run without torch: tools/numpy_llama.py's float64 forward instead of transformers)
Prints one JSON line per backend and exits 1 when a check fails.
"""
import argparse
import json
import pathlib
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def guide_nll(logits_fn, ids, ctx, stride):
    """Sum of -log p(target) and the number of targets, by the guide's loop. logits_fn(ids) -> [len, V]."""
    n = len(ids)
    nll, scored, prev_end, windows = 0.0, 0, 0, 0
    for begin in range(0, n, stride):
        end = min(begin + ctx, n)
        first = max(prev_end, begin + 1)
        logits = np.asarray(logits_fn(ids[begin:end - 1]), dtype=np.float64)  # the last token is never fed
        for t in range(first, end):
            row = logits[t - 1 - begin]
            m = row.max()
            lse = m + np.log(np.exp(row - m).sum())
            nll -= float(row[ids[t]] - lse)
            scored += 1
        prev_end = end
        windows += 1
        if end == n:
            break
    return nll, scored, windows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("xinfer")
    ap.add_argument("model")
    ap.add_argument("text")
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--stride", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--backends", default="cpu,cuda")
    ap.add_argument("--numpy", action="store_true")
    a = ap.parse_args()
    from tokenizers import Tokenizer
    text = pathlib.Path(a.text).read_text()
    all_ids = Tokenizer.from_file(str(pathlib.Path(a.model) / "tokenizer.json")).encode(text).ids
    ids = all_ids[:a.max_tokens]
    if a.numpy:
        sys.path.insert(0, str(ROOT / "tools"))
        import numpy_llama
        c = json.loads((pathlib.Path(a.model) / "config.json").read_text())
        w = numpy_llama.read_float_safetensors(pathlib.Path(a.model) / "model.safetensors")
        logits_fn = lambda x: numpy_llama.llama_forward(c, w, x)  # noqa: E731
        ref_name = "numpy float64"
    else:
        import torch
        from transformers import AutoModelForCausalLM
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).to(dev).eval()

        def logits_fn(x):
            with torch.no_grad():
                return model(torch.tensor([x], device=dev)).logits[0].double().cpu().numpy()
        ref_name = "transformers " + __import__("transformers").__version__ + " float32 on " + dev
    ref_nll, ref_scored, ref_windows = guide_nll(logits_fn, ids, a.ctx, a.stride)
    ok = True
    for backend in a.backends.split(","):
        p = subprocess.run([a.xinfer, "eval", "ppl", "--model", a.model, "--text", a.text, "--ctx", str(a.ctx),
                            "--stride", str(a.stride), "--max-tokens", str(a.max_tokens), "--backend", backend,
                            "--json", "--no-progress"], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            print(json.dumps({"backend": backend, "error": p.stderr[-2000:]}))
            ok = False
            continue
        r = json.loads(p.stdout)
        rel = abs(r["nll_sum"] - ref_nll) / abs(ref_nll)
        tol = 1e-5 if backend == "cpu" else 1e-2
        good = (r["tokens_scored"] == ref_scored and r["windows"] == ref_windows and r["text_tokens"] == len(all_ids)
                and rel <= tol)
        good = bool(good)
        ok = ok and good
        print(json.dumps({"backend": backend, "reference": ref_name, "ok": good, "xinfer_nll_sum": r["nll_sum"],
                          "reference_nll_sum": ref_nll, "rel_diff": rel, "tolerance": tol,
                          "xinfer_ppl": r["ppl"], "reference_ppl": float(np.exp(ref_nll / ref_scored)),
                          "tokens_scored": [r["tokens_scored"], ref_scored], "windows": [r["windows"], ref_windows],
                          "text_tokens": [r["text_tokens"], len(all_ids)]}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
