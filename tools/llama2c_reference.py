#!/usr/bin/env python3
"""A plain numpy llama2.c forward pass: the reference for stories260K-style checkpoints.

Written straight from llama2.c's algorithm (run.c, legacy checkpoint version), token by token with a
KV cache, on the ORIGINAL checkpoint layout: rotary embedding on interleaved pairs (2i, 2i+1) of each
head using the checkpoint's own freq_cis tables, RMSNorm eps 1e-5, SwiGLU FFN, GQA with
kv_head = head // (n_heads / n_kv_heads), classifier = token embedding when shared.
It depends on nothing in xinfer (not even on the converter), so it is an independent reference for
both the converter (tools/convert_llama2c.py) and the C++ engine. Computes in float64 by default.

Usage as a library:
    model = Llama2cModel.load("../shared/models/stories260K/stories260K.bin")
    logits = model.forward([1, 403, 407])          # [3, vocab] float64
    ids = model.greedy([1], max_new_tokens=200)    # list of new token ids
As a program: python3 tools/llama2c_reference.py CHECKPOINT [--prompt-ids 1,403] [--steps N]
"""
from __future__ import annotations

import argparse
import pathlib
import struct
import sys

import numpy as np

RMS_EPS = 1e-5


class Llama2cModel:
    def __init__(self, header: tuple[int, ...], w: dict[str, np.ndarray]):
        self.dim, self.hidden_dim, self.n_layers, self.n_heads, self.n_kv_heads, self.vocab_size, \
            self.seq_len = header
        self.head_size = self.dim // self.n_heads
        self.kv_dim = self.n_kv_heads * self.head_size
        self.w = w

    @classmethod
    def load(cls, path: str | pathlib.Path, dtype=np.float64) -> "Llama2cModel":
        data = pathlib.Path(path).read_bytes()
        dim, hid, L, nh, nkv, vocab, seq = struct.unpack("<7i", data[:28])
        shared = vocab > 0
        vocab = abs(vocab)
        hs = dim // nh
        kv = nkv * hs
        shapes = [("token_embedding", (vocab, dim)), ("rms_att", (L, dim)), ("wq", (L, dim, dim)),
                  ("wk", (L, kv, dim)), ("wv", (L, kv, dim)), ("wo", (L, dim, dim)), ("rms_ffn", (L, dim)),
                  ("w1", (L, hid, dim)), ("w2", (L, dim, hid)), ("w3", (L, hid, dim)), ("rms_final", (dim,)),
                  ("freq_cis_real", (seq, hs // 2)), ("freq_cis_imag", (seq, hs // 2))]
        if not shared:
            shapes.append(("wcls", (vocab, dim)))
        flat = np.frombuffer(data, dtype="<f4", offset=28)
        w, off = {}, 0
        for name, shape in shapes:
            n = int(np.prod(shape))
            w[name] = flat[off:off + n].reshape(shape).astype(dtype)
            off += n
        if off != flat.size:
            raise ValueError(f"{path}: {flat.size - off} floats left over after the tensors")
        if shared:
            w["wcls"] = w["token_embedding"]
        return cls((dim, hid, L, nh, nkv, vocab, seq), w)

    @staticmethod
    def _rmsnorm(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return weight * (x / np.sqrt(np.mean(x * x) + RMS_EPS))

    def _rope(self, v: np.ndarray, pos: int) -> np.ndarray:
        """v: [n * head_size]; each pair (2i, 2i+1) of each head is rotated by angle pos * freq_(i % hs/2),
        as llama2.c does, with the checkpoint's cos (freq_cis_real) and sin (freq_cis_imag) tables."""
        pairs = v.reshape(-1, self.head_size // 2, 2)  # [n, hs/2, 2]
        fcr, fci = self.w["freq_cis_real"][pos], self.w["freq_cis_imag"][pos]  # [hs/2]
        v0, v1 = pairs[..., 0], pairs[..., 1]
        return np.stack([v0 * fcr - v1 * fci, v0 * fci + v1 * fcr], axis=-1).reshape(v.shape)

    def new_cache(self, max_len: int) -> dict[str, np.ndarray]:
        """KV cache for up to max_len positions: key/value [n_layers, max_len, kv_dim]."""
        shape = (self.n_layers, max_len, self.kv_dim)
        return {"key": np.zeros(shape, self.w["wq"].dtype), "value": np.zeros(shape, self.w["wq"].dtype),
                "len": 0}

    def step(self, cache: dict, token: int) -> np.ndarray:
        """Runs one token at position cache["len"], appends its K/V. Returns logits [vocab]."""
        w, hs = self.w, self.head_size
        pos = cache["len"]
        kv_mul = self.n_heads // self.n_kv_heads
        x = w["token_embedding"][token].copy()
        for l in range(self.n_layers):
            xb = self._rmsnorm(x, w["rms_att"][l])
            q = self._rope(w["wq"][l] @ xb, pos)
            cache["key"][l, pos] = self._rope(w["wk"][l] @ xb, pos)
            cache["value"][l, pos] = w["wv"][l] @ xb
            att_out = np.zeros(self.dim, dtype=x.dtype)
            for h in range(self.n_heads):
                kvh = h // kv_mul
                k = cache["key"][l, :pos + 1, kvh * hs:(kvh + 1) * hs]  # [pos+1, hs]
                v = cache["value"][l, :pos + 1, kvh * hs:(kvh + 1) * hs]  # [pos+1, hs]
                scores = (k @ q[h * hs:(h + 1) * hs]) / np.sqrt(hs)
                scores = np.exp(scores - scores.max())
                scores /= scores.sum()
                att_out[h * hs:(h + 1) * hs] = scores @ v
            x = x + w["wo"][l] @ att_out
            xb = self._rmsnorm(x, w["rms_ffn"][l])
            h1 = w["w1"][l] @ xb
            h3 = w["w3"][l] @ xb
            x = x + w["w2"][l] @ ((h1 / (1.0 + np.exp(-h1))) * h3)
        cache["len"] = pos + 1
        return w["wcls"] @ self._rmsnorm(x, w["rms_final"])

    def forward(self, tokens: list[int]) -> np.ndarray:
        """tokens: [T] ids at positions 0..T-1. Returns logits [T, vocab]."""
        cache = self.new_cache(len(tokens))
        return np.stack([self.step(cache, t) for t in tokens])

    def greedy(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        """Greedy decoding (argmax, lowest id on ties), never stopping early. Returns the new ids."""
        cache = self.new_cache(len(prompt) + max_new_tokens)
        for t in prompt:
            logits = self.step(cache, t)
        out = []
        for i in range(max_new_tokens):
            out.append(int(np.argmax(logits)))
            if i + 1 < max_new_tokens:
                logits = self.step(cache, out[-1])
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="numpy llama2.c reference forward / greedy decoding")
    ap.add_argument("checkpoint")
    ap.add_argument("--prompt-ids", default="1", help="comma-separated prompt token ids (default: BOS)")
    ap.add_argument("--steps", type=int, default=32, help="greedy tokens to generate")
    args = ap.parse_args(argv)
    model = Llama2cModel.load(args.checkpoint)
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    print(" ".join(str(t) for t in model.greedy(prompt, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
