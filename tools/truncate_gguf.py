#!/usr/bin/env python3
"""Copies a llama GGUF keeping only its first N decoder blocks (the embedding, final norm and output tensors and
all metadata kept; llama.block_count set to N), with the gguf package's reader and writer. Used to carry a real
model's real quantized weights (and so real activation statistics) to a machine that takes only a few tens of MB,
e.g. SmolLM2-135M-Instruct's Q4_1 GGUF (98 MB, 30 blocks) cut to 8 blocks (~47 MB) for the GPU checks of
docs/PERF.md. The cut model is no chat model any more; compare backends on it, not outputs against the full one.

    python3 tools/truncate_gguf.py --gguf IN.gguf --blocks 8 --out OUT.gguf
"""
import argparse
import re

import gguf


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True, help="input GGUF (llama architecture)")
    ap.add_argument("--blocks", type=int, required=True, help="decoder blocks to keep (the first N)")
    ap.add_argument("--out", required=True, help="output GGUF")
    a = ap.parse_args()
    r = gguf.GGUFReader(a.gguf)
    arch = r.fields["general.architecture"].contents()
    count_key = f"{arch}.block_count"
    total = r.fields[count_key].contents()
    if not 1 <= a.blocks <= total:
        raise SystemExit(f"--blocks {a.blocks}: the model has {total}")
    w = gguf.GGUFWriter(a.out, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the header, and the key the writer writes itself
        value = a.blocks if name == count_key else field.contents()
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, value, vtype, sub_type=sub)
    kept = [t for t in r.tensors if not (m := re.match(r"blk\.(\d+)\.", t.name)) or int(m.group(1)) < a.blocks]
    for t in kept:  # the raw blocks as stored (a quantized tensor's data is its bytes, [rows, row bytes])
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in kept:
        w.write_tensor_data(t.data)
    w.close()
    print(f"{a.out}: {len(kept)} of {len(r.tensors)} tensors, {a.blocks} of {total} blocks")


if __name__ == "__main__":
    main()
