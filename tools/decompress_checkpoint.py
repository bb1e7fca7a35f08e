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

from quantize_numpy_reference import Checkpoint


def write_safetensors_f32(path: pathlib.Path, tensors: dict) -> None:
    """tensors: name -> array, stored as little-endian F32 in name order (the safetensors layout: u64 header
    length, JSON header, data)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        b = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


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
    write_safetensors_f32(a.out / "model.safetensors", ck.w)
    for f in a.quantized.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, a.out / f.name)
    print(f"{len(ck.quantized)} quantized modules decompressed, {len(ck.w)} tensors -> {a.out}")


if __name__ == "__main__":
    main()
