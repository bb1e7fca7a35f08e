#!/usr/bin/env python3
"""A GGUF model on the CUDA backend against the CPU backend's float reference, on the GPU machine itself.

Runs `xinfer logits` three times on the same requests (prompts plus greedy steps):
  - `--backend cuda`: the CUDA loader's path (Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K linears repacked into the int kernels'
    formats, model/gguf_repack.h; other types dequantized to bf16 at load),
  - `--backend cuda --dequantize`: every block-format weight dequantized to bf16 at load,
  - `--backend cpu --dequantize`: the float32 reference (the weights exactly as the gguf package dequantizes them),
and prints, per request, the largest prompt-logit difference of both CUDA runs from the reference, the prompt
positions whose top-1 token agrees, and whether the greedy tokens agree. It fails (exit 1) when the repacked run
has a NaN, disagrees on a top-1 token where the reference leads by more than twice the error of both CUDA runs,
or errs by more than 3x the bf16-dequantized run (plus 1e-3 of the logit scale): the int kernels should not be
much worse than bf16 weights. Default model: the tiny Q4_1 GGUF in tests/unit/model/data (2 layers, k 64/128).

    python3 tests/gpu/check_gguf_cuda_vs_cpu.py --xinfer BIN/xinfer [--gguf M.gguf] [--out DIR]

`--device-backend cpu` runs the "device" side on the CPU too: a dry run of the script itself, whose criteria
fail by design (the CPU keeps GGUF blocks and quantizes activations to 8 bits where CUDA repacks them).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file

DEFAULT_REQUESTS = [
    {"prompt_ids": [1, 5, 9, 13, 17, 21, 25]},
    {"prompt_ids": [2, 40, 41, 7]},
    {"prompt_ids": [3, 11, 60, 61, 62, 63, 64, 65, 66, 67, 20]},
    {"prompt_ids": [4]},
]


def run(xinfer, gguf, backend, dequantize, requests_path, out_path, steps):
    cmd = [xinfer, "logits", "--backend", backend, "--model", gguf, "--input", requests_path,
           "--greedy-steps", str(steps), "--output", out_path, "--no-progress"]
    if dequantize:
        cmd.append("--dequantize")
    p = subprocess.run(cmd, capture_output=True, text=True)
    log = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{log[-2000:]}")
    notes = [line.split("] ", 1)[-1] for line in log.splitlines() if "repacked" in line or "dequantized" in line]
    return load_file(out_path), notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--xinfer", required=True, help="the xinfer binary")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--gguf", default=os.path.join(here, "..", "unit", "model", "data", "tiny_llama_q4_1.gguf"))
    ap.add_argument("--requests", help="JSON list of {prompt_ids: [...]} (default: four short prompts)")
    ap.add_argument("--greedy-steps", type=int, default=16)
    ap.add_argument("--device-backend", default="cuda", help="backend of the two device runs (cpu: a dry run)")
    ap.add_argument("--out", help="folder for the logits files (default: a temporary one)")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="gguf_check_")
    os.makedirs(out, exist_ok=True)
    requests_path = a.requests
    if requests_path is None:
        requests_path = os.path.join(out, "requests.json")
        with open(requests_path, "w") as f:
            json.dump(DEFAULT_REQUESTS, f)
    ref, _ = run(a.xinfer, a.gguf, "cpu", True, requests_path, os.path.join(out, "cpu_dequantized.safetensors"),
                 a.greedy_steps)
    dev, dev_notes = run(a.xinfer, a.gguf, a.device_backend, False, requests_path,
                         os.path.join(out, "device.safetensors"), a.greedy_steps)
    deq, _ = run(a.xinfer, a.gguf, a.device_backend, True, requests_path,
                 os.path.join(out, "device_dequantized.safetensors"), a.greedy_steps)
    print(f"{os.path.basename(a.gguf)} on {a.device_backend}: " + "; ".join(dev_notes))
    failures = []
    r = 0
    while f"logits_{r}" in ref:
        want = ref[f"logits_{r}"].astype(np.float64)
        got, got_deq = dev[f"logits_{r}"].astype(np.float64), deq[f"logits_{r}"].astype(np.float64)
        scale = float(np.abs(want).max())
        err, err_deq = float(np.abs(got - want).max()), float(np.abs(got_deq - want).max())
        top = np.sort(want, axis=-1)
        lead = top[:, -1] - top[:, -2]
        agree = got.argmax(-1) == want.argmax(-1)
        clear = lead > 2 * max(err, err_deq)
        greedy = bool((dev[f"greedy_{r}"] == ref[f"greedy_{r}"]).all())
        greedy_deq = bool((deq[f"greedy_{r}"] == ref[f"greedy_{r}"]).all())
        print(f"request {r}: max |logit - reference| {err:.4f} (bf16-dequantized: {err_deq:.4f}; logits up to "
              f"{scale:.2f}); top-1 equal at {int(agree.sum())} of {len(agree)} positions; greedy tokens equal: "
              f"{greedy} (bf16-dequantized: {greedy_deq})")
        if not np.isfinite(got).all():
            failures.append(f"request {r}: non-finite logits")
        if not agree[clear].all():
            failures.append(f"request {r}: top-1 differs where the reference leads by more than twice the error")
        if err > 3 * err_deq + 1e-3 * scale:
            failures.append(f"request {r}: error {err:.4f} > 3x the bf16-dequantized run's {err_deq:.4f}")
        r += 1
    if r == 0:
        failures.append("no logits in the reference file")
    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
