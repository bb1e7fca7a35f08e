#!/usr/bin/env python3
"""Converts a llama2.c "legacy" checkpoint and its tokenizer to a Hugging Face Llama directory.

Output (in --out): config.json, generation_config.json, model.safetensors (float32),
tokenizer.json, tokenizer_config.json.

Checkpoint layout (all little-endian): 7 x int32 header
  (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len)
where vocab_size < 0 means an unshared classifier (wcls, stored last). Then float32 tensors:
  token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim],
  wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim], w2 [L, dim, hidden],
  w3 [L, hidden, dim], rms_final [dim], freq_cis_real [seq_len, head_size/2],
  freq_cis_imag [seq_len, head_size/2], (wcls [vocab, dim]).
Linear weights are [out, in] like torch.nn.Linear.

Rotary layouts: llama2.c (Meta) rotates interleaved pairs (2i, 2i+1) of each head; Hugging Face rotates
halves (i, i + head_dim/2). So the rows of wq (per head) and wk (per KV head) are permuted so that row
2i goes to i and row 2i+1 goes to i + head_dim/2, which is what Meta->HF conversion does
(view(n_heads, head_dim/2, 2, in).transpose(1, 2)). Attention scores are unchanged since q and k get
the same permutation; v and o are untouched.

Tokenizer (tok512.bin): int32 max_token_length, then per token: f32 score, int32 byte length, bytes.
Ids 0..2 are <unk>, <s>, </s> (stored as "\\n<s>\\n" etc.), ids 3..258 the byte-fallback tokens <0x00>..
<0xFF>, then the BPE pieces, with a plain ' ' where SentencePiece writes U+2581. The result is a
Llama-2 style tokenizer.json: BPE with byte fallback, merges derived from the piece scores.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import struct
import sys
from dataclasses import dataclass

import numpy as np
from safetensors.numpy import save_file

SPIECE_SPACE = "\u2581"
UNK, BOS, EOS = 0, 1, 2
NUM_BYTE_TOKENS = 256
FIRST_BYTE_TOKEN = 3


@dataclass(frozen=True)
class Llama2cConfig:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int
    shared_classifier: bool

    @property
    def head_size(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_size


def read_checkpoint(path: str | pathlib.Path) -> tuple[Llama2cConfig, dict[str, np.ndarray]]:
    """Reads a legacy llama2.c checkpoint. Returns its config and its tensors (llama2.c names, float32).

    Tensor names and shapes: token_embedding [V, D], rms_att [L, D], wq [L, D, D], wk [L, KV, D],
    wv [L, KV, D], wo [L, D, D], rms_ffn [L, D], w1 [L, H, D], w2 [L, D, H], w3 [L, H, D],
    rms_final [D], freq_cis_real [S, hs/2], freq_cis_imag [S, hs/2], wcls [V, D] (== token_embedding
    when shared).
    """
    data = pathlib.Path(path).read_bytes()
    if len(data) < 28:
        raise ValueError(f"{path}: {len(data)} bytes, too short for the 28-byte llama2.c header")
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack("<7i", data[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    if min(dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len) <= 0 or dim % n_heads or \
            n_heads % n_kv_heads or (dim // n_heads) % 2:
        raise ValueError(f"{path}: implausible header {(dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len)}")
    cfg = Llama2cConfig(dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len, shared)
    hs, kv, L = cfg.head_size, cfg.kv_dim, n_layers
    layout = [
        ("token_embedding", (vocab, dim)),
        ("rms_att", (L, dim)),
        ("wq", (L, dim, dim)),
        ("wk", (L, kv, dim)),
        ("wv", (L, kv, dim)),
        ("wo", (L, dim, dim)),
        ("rms_ffn", (L, dim)),
        ("w1", (L, hidden, dim)),
        ("w2", (L, dim, hidden)),
        ("w3", (L, hidden, dim)),
        ("rms_final", (dim,)),
        ("freq_cis_real", (seq_len, hs // 2)),
        ("freq_cis_imag", (seq_len, hs // 2)),
    ]
    if not shared:
        layout.append(("wcls", (vocab, dim)))
    expected = 28 + 4 * sum(int(np.prod(s)) for _, s in layout)
    if len(data) != expected:
        raise ValueError(f"{path}: {len(data)} bytes, expected {expected} for header "
                         f"{(dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len)} (shared={shared})")
    flat = np.frombuffer(data, dtype="<f4", offset=28)
    tensors: dict[str, np.ndarray] = {}
    offset = 0
    for name, shape in layout:
        n = int(np.prod(shape))
        tensors[name] = flat[offset:offset + n].reshape(shape).astype(np.float32)
        offset += n
    if shared:
        tensors["wcls"] = tensors["token_embedding"]
    return cfg, tensors


def rope_theta_from_tables(cfg: Llama2cConfig, tensors: dict[str, np.ndarray]) -> float:
    """Recovers theta from the checkpoint's freq_cis tables and checks that they are standard rotary
    tables (cos/sin of pos * theta^(-2i/head_size)). Raises ValueError otherwise."""
    real, imag = tensors["freq_cis_real"], tensors["freq_cis_imag"]  # [S, hs/2]
    hs = cfg.head_size
    # Position 1 holds cos/sin of the frequencies themselves; frequency 1 (i = 1) gives theta.
    freqs = np.arctan2(imag[1].astype(np.float64), real[1].astype(np.float64))
    theta = float(freqs[1] ** (-hs / 2.0)) if hs >= 4 else 10000.0
    theta = float(round(theta))  # tables are float32: theta is recovered to a few ppm
    inv_freq = theta ** (-np.arange(0, hs, 2, dtype=np.float64) / hs)
    ang = np.arange(cfg.seq_len, dtype=np.float64)[:, None] * inv_freq[None, :]
    err = max(np.abs(np.cos(ang) - real).max(), np.abs(np.sin(ang) - imag).max())
    if err > 1e-3:
        raise ValueError(f"freq_cis tables are not standard rotary tables for theta={theta} (max err {err})")
    return theta


def permute_for_hf_rotary(w: np.ndarray, n_heads: int) -> np.ndarray:
    """w: [n_heads * head_dim, in] with interleaved rotary pairs -> same shape, half-split layout."""
    out_dim, in_dim = w.shape
    head_dim = out_dim // n_heads
    return np.ascontiguousarray(
        w.reshape(n_heads, head_dim // 2, 2, in_dim).transpose(0, 2, 1, 3).reshape(out_dim, in_dim))


def hf_state_dict(cfg: Llama2cConfig, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {"model.embed_tokens.weight": t["token_embedding"]}
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = t["rms_att"][i]
        out[p + "self_attn.q_proj.weight"] = permute_for_hf_rotary(t["wq"][i], cfg.n_heads)
        out[p + "self_attn.k_proj.weight"] = permute_for_hf_rotary(t["wk"][i], cfg.n_kv_heads)
        out[p + "self_attn.v_proj.weight"] = t["wv"][i]
        out[p + "self_attn.o_proj.weight"] = t["wo"][i]
        out[p + "post_attention_layernorm.weight"] = t["rms_ffn"][i]
        out[p + "mlp.gate_proj.weight"] = t["w1"][i]
        out[p + "mlp.down_proj.weight"] = t["w2"][i]
        out[p + "mlp.up_proj.weight"] = t["w3"][i]
    out["model.norm.weight"] = t["rms_final"]
    if not cfg.shared_classifier:
        out["lm_head.weight"] = t["wcls"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def hf_config(cfg: Llama2cConfig, rope_theta: float) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.hidden_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_size,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.seq_len,
        "rms_norm_eps": 1e-5,
        "rope_theta": rope_theta,
        "rope_scaling": None,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": cfg.shared_classifier,
        "torch_dtype": "float32",
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": None,
        "use_cache": True,
    }


# ----------------------------------------------------------------------------------------------------
# Tokenizer


def read_tokenizer(path: str | pathlib.Path, vocab_size: int) -> tuple[list[bytes], list[float]]:
    """Reads tok512.bin-style files: returns (pieces as raw bytes, scores), vocab_size entries."""
    data = pathlib.Path(path).read_bytes()
    (max_len,) = struct.unpack_from("<i", data, 0)
    off = 4
    pieces, scores = [], []
    for i in range(vocab_size):
        if off + 8 > len(data):
            raise ValueError(f"{path}: truncated at token {i} of {vocab_size}")
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        if n < 0 or n > max_len or off + n > len(data):
            raise ValueError(f"{path}: token {i} has length {n} (max {max_len})")
        pieces.append(data[off:off + n])
        scores.append(score)
        off += n
    if off != len(data):
        raise ValueError(f"{path}: {len(data) - off} trailing bytes after {vocab_size} tokens")
    return pieces, scores


def hf_tokenizer(pieces: list[bytes], scores: list[float]) -> tuple[dict, dict]:
    """Builds (tokenizer.json, tokenizer_config.json) dicts from llama2.c pieces and scores."""
    specials = {UNK: "<unk>", BOS: "<s>", EOS: "</s>"}
    vocab: dict[str, int] = {}
    normal: list[int] = []  # ids of ordinary BPE pieces (candidates for merges)
    for i, raw in enumerate(pieces):
        if i in specials:
            stripped = raw.strip(b"\n").decode("utf-8")
            if stripped != specials[i]:
                raise ValueError(f"token {i} is {raw!r}, expected {specials[i]!r}")
            piece = specials[i]
        elif FIRST_BYTE_TOKEN <= i < FIRST_BYTE_TOKEN + NUM_BYTE_TOKENS:
            piece = raw.decode("ascii")
            if piece != f"<0x{i - FIRST_BYTE_TOKEN:02X}>":
                raise ValueError(f"token {i} is {raw!r}, expected byte token <0x{i - FIRST_BYTE_TOKEN:02X}>")
        else:
            text = raw.decode("utf-8")
            if SPIECE_SPACE in text:
                raise ValueError(f"token {i} {raw!r} already holds U+2581; expected plain spaces")
            piece = text.replace(" ", SPIECE_SPACE)
            normal.append(i)
        if piece in vocab:
            raise ValueError(f"duplicate piece {piece!r} (ids {vocab[piece]} and {i})")
        vocab[piece] = i

    # Merges, as SentencePiece BPE applies them: every split (a, b) of a piece into two pieces, ranked by
    # the merged piece's score (higher first); ties (same merged piece) ordered by (id(a), id(b)).
    normal_set = {pieces_i for pieces_i in normal}
    id_to_piece = {i: p for p, i in vocab.items()}
    merges: list[tuple[float, int, int, int, str, str]] = []
    for i in normal:
        piece = id_to_piece[i]
        for cut in range(1, len(piece)):
            a, b = piece[:cut], piece[cut:]
            ia, ib = vocab.get(a), vocab.get(b)
            if ia in normal_set and ib in normal_set:
                merges.append((-scores[i], i, ia, ib, a, b))
    merges.sort()

    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in sorted(specials.items())]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPIECE_SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPIECE_SPACE},
        ]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [BOS], "tokens": ["<s>"]}},
        },
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPIECE_SPACE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ]},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[a, b] for *_, a, b in merges],
        },
    }
    tokenizer_config = {
        "tokenizer_class": "LlamaTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": None,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 1000000000000000019884624838656,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
    }
    return tokenizer, tokenizer_config


def convert(checkpoint: str | pathlib.Path, tokenizer: str | pathlib.Path, out: str | pathlib.Path) -> dict:
    """Converts and writes the HF directory. Returns the config.json dict."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg, tensors = read_checkpoint(checkpoint)
    theta = rope_theta_from_tables(cfg, tensors)
    config = hf_config(cfg, theta)
    save_file(hf_state_dict(cfg, tensors), str(out / "model.safetensors"), metadata={"format": "pt"})
    pieces, scores = read_tokenizer(tokenizer, cfg.vocab_size)
    tok, tok_cfg = hf_tokenizer(pieces, scores)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    gen = {"bos_token_id": BOS, "eos_token_id": EOS, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    (out / "tokenizer.json").write_text(json.dumps(tok, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    return config


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="llama2.c legacy .bin checkpoint")
    ap.add_argument("--tokenizer", required=True, help="llama2.c tokenizer .bin (e.g. tok512.bin)")
    ap.add_argument("--out", required=True, help="output Hugging Face model directory")
    args = ap.parse_args(argv)
    config = convert(args.checkpoint, args.tokenizer, args.out)
    print(f"wrote {args.out}: {config['num_hidden_layers']} layers, dim {config['hidden_size']}, "
          f"heads {config['num_attention_heads']}/{config['num_key_value_heads']}, vocab {config['vocab_size']}, "
          f"rope_theta {config['rope_theta']:g}, tied {config['tie_word_embeddings']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
