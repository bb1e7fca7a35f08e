#!/usr/bin/env python3
"""Golden data for quant/'s dequantization, made by implementations written by others.

GGUF block types: the `gguf` PyPI package (ggml's own Python port). For types that gguf can quantize
(Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16, BF16) random N(0, 1) data goes through `gguf.quants.quantize`; for the
K-quants (no Python quantizer) the blocks are random bytes with their f16 scale fields set to sane values
(every bit pattern of the quant fields is a valid block). The expected floats are always
`gguf.quants.dequantize` of the same bytes. With --model, the first rows of each tensor type in a real GGUF
file (SmolLM2-135M-Instruct.Q4_1.gguf) are added too.

Int formats (no torch-free reference package exists: compressed-tensors requires torch): numpy written from
the formats' published definitions (compressed-tensors / GPTQ: W = scale * (q - zero), symmetric zero 8 for
int4, 128 for uint8 storage; OCP FP8 E4M3FN decode), on our unpacked layouts (weight_format.h).

Output: <out>/manifest.txt, one case per line (read by tests/unit/quant/quant_golden_test.cpp):
  gguf <name> <type_id> <n_elems> <name>.bin <name>.f32
  int <name> <bits> <group_size> <zero_point 0|1> <g_idx 0|1> <N> <K>   files <name>.{weight,scales,zeros,gidx,f32}
  int8ch <name> <N> <K>                                                   files <name>.{weight,scales,f32}
  fp8 <name> <per_channel 0|1> <N> <K>                                    files <name>.{weight,scales,f32}

  python3 tools/make_quant_golden.py --out tests/golden/quant            # the committed goldens (seed 0)
  python3 tools/make_quant_golden.py --out /tmp/q --seed 7 --elems 4096 \
      --model ~/.cache/xinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf     # what tests/python runs
"""
import argparse
import pathlib

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

QUANTIZABLE = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
# K-quants: byte offsets of their f16 scale fields inside a block (ggml-common.h)
K_SCALE_FIELDS = {"Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def gguf_cases(rng, elems):
    cases = []
    for name in QUANTIZABLE:
        t = GGMLQuantizationType[name]
        x = rng.standard_normal((1, elems)).astype(np.float32)
        raw = np.ascontiguousarray(quants.quantize(x, t)).view(np.uint8).reshape(-1)
        cases.append((name.lower(), t, elems, raw))
    for name, fields in K_SCALE_FIELDS.items():
        t = GGMLQuantizationType[name]
        block_elems, block_bytes = GGML_QUANT_SIZES[t]
        blocks = rng.integers(0, 256, size=(elems // block_elems, block_bytes), dtype=np.uint8)
        for off in fields:
            scale = rng.uniform(0.001, 0.05, size=blocks.shape[0]).astype(np.float16)
            blocks[:, off:off + 2] = scale.view(np.uint8).reshape(-1, 2)
        cases.append((name.lower(), t, elems, blocks.reshape(-1)))
    return cases


def model_cases(path, rows):
    from gguf import GGUFReader
    reader = GGUFReader(path)
    seen, cases = set(), []
    for tensor in reader.tensors:
        t = tensor.tensor_type
        if t in seen or t == GGMLQuantizationType.F32:
            continue
        seen.add(t)
        data = np.asarray(tensor.data)
        raw = np.ascontiguousarray(data[:rows]).view(np.uint8).reshape(-1)
        n_elems = int(tensor.shape[0]) * min(rows, data.shape[0])
        cases.append((f"real_{t.name.lower()}", t, n_elems, raw))
    return cases


def fp8_e4m3_decode(b):
    b = b.astype(np.int32)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e = (b >> 3) & 15
    m = b & 7
    val = np.where(e == 0, m / 8.0 * 2.0**-6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    return (sign * val).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--elems", type=int, default=512, help="elements per GGUF case (multiple of 256)")
    ap.add_argument("--model", help="a GGUF file: add its first rows of each quantized tensor type")
    ap.add_argument("--model-rows", type=int, default=4)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    lines = []

    cases = gguf_cases(rng, args.elems)
    if args.model:
        cases += model_cases(args.model, args.model_rows)
    for name, t, n_elems, raw in cases:
        expected = quants.dequantize(raw, t).astype(np.float32).reshape(-1)
        assert expected.size == n_elems, (name, expected.size, n_elems)
        (out / f"{name}.bin").write_bytes(raw.tobytes())
        (out / f"{name}.f32").write_bytes(expected.tobytes())
        lines.append(f"gguf {name} {int(t)} {n_elems} {name}.bin {name}.f32")

    # int per-group: (bits, group, zero point, g_idx)
    n, k = 5, 256
    for bits, group, zp, gidx in [(4, 32, 0, 0), (4, 64, 1, 0), (4, 128, 1, 1), (8, 32, 0, 0), (8, 128, 1, 1),
                                  (4, 32, 0, 1)]:
        name = f"int{bits}_g{group}{'_zp' if zp else ''}{'_gidx' if gidx else ''}"
        groups = k // group
        q = rng.integers(0, 2**bits, size=(n, k), dtype=np.uint8)
        scales = rng.uniform(0.001, 0.1, size=(n, groups)).astype(np.float32)
        zeros = rng.integers(0, 2**bits, size=(n, groups), dtype=np.uint8)
        g_idx = rng.integers(0, groups, size=k).astype(np.int32) if gidx else np.arange(k, dtype=np.int32) // group
        zero = zeros.astype(np.float32) if zp else np.full((n, groups), 2.0 ** (bits - 1), np.float32)
        w = scales[:, g_idx] * (q.astype(np.float32) - zero[:, g_idx])
        packed = (q[:, 0::2] | (q[:, 1::2] << 4)).astype(np.uint8) if bits == 4 else q
        (out / f"{name}.weight").write_bytes(packed.tobytes())
        (out / f"{name}.scales").write_bytes(scales.tobytes())
        (out / f"{name}.zeros").write_bytes(zeros.tobytes() if zp else b"")
        (out / f"{name}.gidx").write_bytes(g_idx.tobytes() if gidx else b"")
        (out / f"{name}.f32").write_bytes(w.astype(np.float32).tobytes())
        lines.append(f"int {name} {bits} {group} {zp} {gidx} {n} {k}")

    q8 = rng.integers(-127, 128, size=(n, k), dtype=np.int8)
    s8 = rng.uniform(0.001, 0.1, size=n).astype(np.float32)
    (out / "int8ch.weight").write_bytes(q8.tobytes())
    (out / "int8ch.scales").write_bytes(s8.tobytes())
    (out / "int8ch.f32").write_bytes((s8[:, None] * q8.astype(np.float32)).astype(np.float32).tobytes())
    lines.append(f"int8ch int8ch {n} {k}")

    for per_channel in (0, 1):
        name = f"fp8_{'channel' if per_channel else 'tensor'}"
        b = rng.integers(0, 256, size=(n, k), dtype=np.uint8)
        b[(b & 0x7F) == 0x7F] = 0  # no NaNs
        s = rng.uniform(0.001, 0.1, size=n if per_channel else 1).astype(np.float32)
        w = (s[:, None] if per_channel else s[0]) * fp8_e4m3_decode(b)
        (out / f"{name}.weight").write_bytes(b.tobytes())
        (out / f"{name}.scales").write_bytes(s.tobytes())
        (out / f"{name}.f32").write_bytes(w.astype(np.float32).tobytes())
        lines.append(f"fp8 {name} {per_channel} {n} {k}")

    (out / "manifest.txt").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} cases to {out}")


if __name__ == "__main__":
    main()
