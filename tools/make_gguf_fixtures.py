"""Small GGUF files written by the `gguf` package's GGUFWriter (a writer by others), for the GGUF tests.

write_tiny_llama(path, ...) writes a random llama-architecture model (hidden 64, 2 layers, heads 4/2, ffn 128,
vocab 96, a byte-level BPE vocabulary) with its linears quantized by gguf.quants.quantize to `qtype`, the
embedding to `embd_type`, norms f32; options make the bad inputs the tests need (another architecture,
a tensor of the wrong shape), other sizes (`hidden`, `ffn`: K-quants need rows of 256) and per-tensor types
(`tensor_types`: Q4_K_M's v / down in another type). The gguf package quantizes no K-quant, so Q4_K and Q6_K are
quantized here (quantize_q4_k / quantize_q6_k: a plain min / max fit per sub-block, not llama.cpp's search; the
layout is ggml's, and the tests read it back with the gguf package's dequantizer). Used by tests/python/test_gguf_model.py; run as a
script it writes one file per type into DIR, and tiny_llama_mixed.gguf and tiny_llama_mixed_q5_1.gguf (copied to
tests/unit/model/data):

    python3 tools/make_gguf_fixtures.py DIR
"""
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize

H, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, CTX = 64, 2, 4, 2, 128, 96, 256


def f16_round(x):
    return np.asarray(x, dtype=np.float16).astype(np.float32)


def quantize_q4_k(x):
    """x [N, K] (K % 256 == 0) -> uint8 [N, K / 256 * 144], ggml's block_q4_K: f16 d, f16 dmin, 12 bytes of
    6-bit sub-block scales and mins, 128 bytes of nibbles; sub-block j of 32 is x = d sc_j q - dmin m_j."""
    n, k = x.shape
    b = x.reshape(n, k // 256, 8, 32).astype(np.float32)
    lo = np.minimum(b.min(-1), 0.0)
    scale = (b.max(-1) - lo) / 15.0  # per sub-block, before the 6-bit step
    mins = -lo
    d = f16_round(scale.max(-1) / 63.0)
    dmin = f16_round(mins.max(-1) / 63.0)
    sc = np.clip(np.round(scale / np.where(d > 0, d, 1)[..., None]), 0, 63).astype(np.uint8)
    mq = np.clip(np.round(mins / np.where(dmin > 0, dmin, 1)[..., None]), 0, 63).astype(np.uint8)
    eff_s = d[..., None] * sc
    eff_m = dmin[..., None] * mq
    q = np.round((b + eff_m[..., None]) / np.where(eff_s > 0, eff_s, 1)[..., None])
    q = np.clip(q, 0, 15).astype(np.uint8)  # [n, blocks, 8, 32]
    out = np.zeros((n, k // 256, 144), dtype=np.uint8)
    out[..., 0:2] = d.astype(np.float16)[..., None].view(np.uint8)
    out[..., 2:4] = dmin.astype(np.float16)[..., None].view(np.uint8)
    for i in range(4):  # the inverse of ggml's get_scale_min_k4
        out[..., 4 + i] = sc[..., i] | ((sc[..., i + 4] >> 4) << 6)
        out[..., 8 + i] = mq[..., i] | ((mq[..., i + 4] >> 4) << 6)
        out[..., 12 + i] = (sc[..., i + 4] & 15) | ((mq[..., i + 4] & 15) << 4)
    for c in range(4):  # 64 elements per 32 bytes: sub-block 2c in the low nibbles, 2c + 1 in the high
        out[..., 16 + 32 * c:16 + 32 * (c + 1)] = q[..., 2 * c, :] | (q[..., 2 * c + 1, :] << 4)
    return out.reshape(n, -1)


def quantize_q6_k(x):
    """x [N, K] (K % 256 == 0) -> uint8 [N, K / 256 * 210], ggml's block_q6_K: ql[128] (low nibbles), qh[64]
    (high 2 bits), i8 scales[16], f16 d; element e of each 128-half is x = d sc[e / 16] (q - 32), q 0..63."""
    n, k = x.shape
    b = x.reshape(n, k // 256, 16, 16).astype(np.float32)
    s = np.abs(b).max(-1) / 31.0  # per sub-block of 16, before the 8-bit step
    d = f16_round(s.max(-1) / 127.0)
    sc = np.clip(np.round(s / np.where(d > 0, d, 1)[..., None]), -128, 127).astype(np.int8)
    eff = d[..., None] * sc
    q = np.clip(np.round(b / np.where(eff != 0, eff, 1)[..., None]) + 32, 0, 63).astype(np.uint8)
    q = q.reshape(n, k // 256, 2, 128)  # [.., half, element]
    out = np.zeros((n, k // 256, 210), dtype=np.uint8)
    for h in range(2):  # the inverse of ggml's dequantize_row_q6_K
        q1, q2, q3, q4 = (q[..., h, 32 * i:32 * (i + 1)] for i in range(4))
        out[..., 64 * h:64 * h + 32] = (q1 & 15) | ((q3 & 15) << 4)
        out[..., 64 * h + 32:64 * h + 64] = (q2 & 15) | ((q4 & 15) << 4)
        out[..., 128 + 32 * h:128 + 32 * (h + 1)] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    out[..., 192:208] = sc.view(np.uint8)
    out[..., 208:210] = d.astype(np.float16)[..., None].view(np.uint8)
    return out.reshape(n, -1)


def quantize_any(x, t):
    if t == Q.Q4_K:
        return quantize_q4_k(x)
    if t == Q.Q6_K:
        return quantize_q6_k(x)
    return quantize(x, t)


def gpt2_vocab(size=VOCAB):
    tokens = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    tokens += ["Ġ", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ".", ",", "!", "?", "Ċ"]
    merges = ["t h", "th e", "Ġ th", "Ġth e", "a n", "i n", "e r", "o n", "r e", "a t"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + tokens
    while len(tokens) < size:
        tokens.append(f"<unused{len(tokens)}>")
    types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    return tokens[:size], types[:size], merges


def add_gpt2_tokenizer(w, size=VOCAB):
    """The byte-level BPE vocabulary of gpt2_vocab(size) into GGUFWriter w (bos 0, eos 2, no bos added)."""
    tokens, types, merges = gpt2_vocab(size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)


def spm_vocab(model_path):
    """tokens, scores, token types of a sentencepiece tokenizer.model, as llama.cpp's converter stores them
    (gguf.TokenType: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6)."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(model_path))
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_unused(i):
            types.append(5)
        elif sp.is_byte(i):
            types.append(6)
        else:
            types.append(1)
    return tokens, scores, types, sp


def write_tiny_llama(path, qtype=Q.Q8_0, embd_type=Q.Q8_0, arch="llama", bad_shape=None, seed=0, tied=True,
                     spm_model=None, hidden=H, ffn=FFN, tensor_types=None):
    """spm_model: a sentencepiece tokenizer.model whose vocabulary (tokenizer.ggml.model "llama") replaces the
    byte-level BPE one; the vocab size then follows it. tensor_types: {tensor name suffix: type} overriding `qtype`
    (e.g. {"attn_v.weight": Q.Q8_0})."""
    rng = np.random.default_rng(seed)
    vocab_size = VOCAB
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(LAYERS)
    w.add_context_length(CTX)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hidden // HEADS)
    if spm_model is not None:
        tokens, scores, types, sp = spm_vocab(spm_model)
        vocab_size = len(tokens)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(sp.bos_id())
        w.add_eos_token_id(sp.eos_id())
        w.add_unk_token_id(sp.unk_id())
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
    else:
        add_gpt2_tokenizer(w, vocab_size)
    w.add_vocab_size(vocab_size)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}")
    # metadata of every value type (read back by the reader tests)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_uint64("test.u64", 2 ** 63 + 5)
    w.add_int64("test.i64", -(2 ** 62))
    w.add_float32("test.f32", 0.15625)
    w.add_float64("test.f64", 1e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo")
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.floats", [0.5, -1.5])
    w.add_array("test.strings", ["a", "", "ccc"])

    def tensor(name, shape, kind):
        if name == bad_shape:
            shape = (shape[0] + 32,) + tuple(shape[1:])
        if kind == "norm":
            x = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
            w.add_tensor(name, x)
            return
        x = (0.1 * rng.standard_normal(shape)).astype(np.float32)
        t = embd_type if kind == "embd" else next(
            (v for suffix, v in (tensor_types or {}).items() if name.endswith(suffix)), qtype)
        if t == Q.F32:
            w.add_tensor(name, x)
        else:
            w.add_tensor(name, quantize_any(x, t), raw_dtype=t)

    H, FFN = hidden, ffn
    D = H // HEADS
    tensor("token_embd.weight", (vocab_size, H), "embd")
    for l in range(LAYERS):
        p = f"blk.{l}."
        tensor(p + "attn_norm.weight", (H,), "norm")
        tensor(p + "attn_q.weight", (HEADS * D, H), "lin")
        tensor(p + "attn_k.weight", (KV_HEADS * D, H), "lin")
        tensor(p + "attn_v.weight", (KV_HEADS * D, H), "lin")
        tensor(p + "attn_output.weight", (H, HEADS * D), "lin")
        tensor(p + "ffn_norm.weight", (H,), "norm")
        tensor(p + "ffn_gate.weight", (FFN, H), "lin")
        tensor(p + "ffn_up.weight", (FFN, H), "lin")
        tensor(p + "ffn_down.weight", (H, FFN), "lin")
    tensor("output_norm.weight", (H,), "norm")
    if not tied:
        tensor("output.weight", (vocab_size, H), "lin")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    import pathlib
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for t in (Q.F32, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        write_tiny_llama(out / f"tiny_{t.name.lower()}.gguf", qtype=t)
    # tests/unit/model/data/tiny_llama_mixed.gguf: the types of one concatenated weight differ (v beside q / k),
    # as in llama.cpp's Q4_K_M, in the tiny model's sizes.
    write_tiny_llama(out / "tiny_llama_mixed.gguf", qtype=Q.Q4_1,
                     tensor_types={"attn_v.weight": Q.Q8_0, "ffn_down.weight": Q.Q5_0})
    # tests/unit/model/data/tiny_llama_mixed_q5_1.gguf: v in Q5_1, which a backend without GGUF kernels cannot
    # repack (the qkv then loads dense, not as segments).
    write_tiny_llama(out / "tiny_llama_mixed_q5_1.gguf", qtype=Q.Q4_1, tensor_types={"attn_v.weight": Q.Q5_1})
