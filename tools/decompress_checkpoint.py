"""Writes a compressed-tensors checkpoint's weights decompressed to a dense float32 Hugging Face directory: every
quantized linear as scale * (q - zero point) (tools/quantize_numpy_reference.py's Checkpoint, written from the
published definitions), config.json without quantization_config, the other files (tokenizer, generation config)
copied. Scoring the quantized checkpoint against this directory (`xinfer eval ppl --model Q --reference D`)
measures what the activations' quantization alone costs, on the engine's own path; scoring D against the float
model measures the weights' part (docs/PERF.md "Session 32").

    python3 tools/decompress_checkpoint.py QUANTIZED_DIR OUT_DIR
"""
import argparse
import json
import pathlib
import shutil

import numpy as np
from safetensors.numpy import save_file

from quantize_numpy_reference import Checkpoint


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("quantized", type=pathlib.Path)
    ap.add_argument("out", type=pathlib.Path)
    a = ap.parse_args()
    if a.out.exists():
        raise SystemExit(f"{a.out} exists")
    ck = Checkpoint(a.quantized)
    a.out.mkdir(parents=True)
    config = dict(ck.c)
    config.pop("quantization_config", None)
    config["torch_dtype"] = "float32"
    (a.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in ck.w.items()}, str(a.out / "model.safetensors"),
              metadata={"format": "pt"})
    for f in a.quantized.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, a.out / f.name)
    print(f"{len(ck.quantized)} quantized modules decompressed, {len(ck.w)} tensors -> {a.out}")


if __name__ == "__main__":
    main()
