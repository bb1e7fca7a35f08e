"""A benchmark-sized GGUF of random blocks, for timing GGUF linears at real shapes (`xinfer bench --model FILE`):
Llama-3.1-8B's shapes by default (32 layers, hidden 4096, ffn 14336, heads 32 / 8, vocabulary 128256), the
tensor types of llama.cpp's Q4_K_M file type as its quantizer assigns them:

    token_embd Q4_K; output Q6_K; attn_q / attn_k / attn_output / ffn_gate / ffn_up Q4_K;
    attn_v and ffn_down Q6_K in the layers where use_more_bits(i, n) (the first and last eighth of the
    layers and every third one between them), else Q4_K

so about half the layers' q / k / v concatenate parts of two types. The block bytes are random, with each
block's f16 scales set so the weights come out around +-0.05 (no NaN or infinity); written by the `gguf`
package's GGUFWriter with the fixtures' byte-level BPE vocabulary padded to the vocabulary size. Not for
accuracy: for speed and memory only.

    python3 tools/make_bench_gguf.py OUT.gguf [--layers 32 --hidden 4096 --ffn 14336 --heads 32 --kv-heads 8
                                               --vocab 128256 --type Q4_K_M|Q4_K|Q6_K]
"""
import argparse
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

from make_gguf_fixtures import add_gpt2_tokenizer


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def random_blocks(rng, qtype, rows, cols):
    """Random rows of `qtype` blocks, u8 [rows, row bytes], with sane f16 scale fields."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    data = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    if qtype == Q.Q4_K:  # d, dmin f16 first; 6-bit sub-block scales and mins up to 63
        d = (rng.uniform(0.002, 0.01, nb) / 32).astype(np.float16)
        data[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
        data[:, 2:4] = (d * 8).astype(np.float16).view(np.uint8).reshape(nb, 2)
    elif qtype == Q.Q6_K:  # i8 sub-block scales, d f16 last
        d = (rng.uniform(0.002, 0.01, nb) / 32).astype(np.float16)
        data[:, 208:210] = d.view(np.uint8).reshape(nb, 2)
    else:
        raise ValueError(f"no random blocks for {qtype.name}")
    return data.reshape(rows, cols // block * size)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--type", default="Q4_K_M", choices=["Q4_K_M", "Q4_K", "Q6_K"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    H, D = a.hidden, a.hidden // a.heads
    w = gguf.GGUFWriter(a.out, "llama")
    w.add_block_count(a.layers)
    w.add_context_length(131072)
    w.add_embedding_length(H)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(D)
    add_gpt2_tokenizer(w, a.vocab)
    w.add_vocab_size(a.vocab)
    base = Q.Q6_K if a.type == "Q6_K" else Q.Q4_K

    def lin(name, rows, cols, qtype=base):
        w.add_tensor(name, random_blocks(rng, qtype, rows, cols), raw_dtype=qtype)

    def norm(name):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(H)).astype(np.float32))

    lin("token_embd.weight", a.vocab, H)
    for i in range(a.layers):
        p = f"blk.{i}."
        more = Q.Q6_K if a.type == "Q4_K_M" and use_more_bits(i, a.layers) else base
        norm(p + "attn_norm.weight")
        lin(p + "attn_q.weight", a.heads * D, H)
        lin(p + "attn_k.weight", a.kv_heads * D, H)
        lin(p + "attn_v.weight", a.kv_heads * D, H, more)
        lin(p + "attn_output.weight", H, a.heads * D)
        norm(p + "ffn_norm.weight")
        lin(p + "ffn_gate.weight", a.ffn, H)
        lin(p + "ffn_up.weight", a.ffn, H)
        lin(p + "ffn_down.weight", H, a.ffn, more)
        print(f"\rlayer {i + 1}/{a.layers}", end="", file=sys.stderr, flush=True)
    norm("output_norm.weight")
    lin("output.weight", a.vocab, H, Q.Q6_K if a.type != "Q4_K" else Q.Q4_K)
    print(file=sys.stderr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=True)
    w.close()


if __name__ == "__main__":
    main()
