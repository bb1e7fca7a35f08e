"""A float32 numpy forward of a llama-architecture GGUF file: the reference xinfer's GGUF path is checked
against (tests/python/test_gguf_model.py). Weights come from the `gguf` package (GGUFReader +
gguf.quants.dequantize), so nothing here shares code with xinfer's reader, dequantization or kernels.

The q/k rows are un-permuted as llama.cpp's convert_hf_to_gguf.py permuted them (per head, rows [2, D/2]
were interleaved to [D/2, 2]), and RoPE is the rotate-half form of the Hugging Face model. Activations stay
float32 throughout, or with `forward(ids, act_blocks=True)` every linear's input is fake-quantized the way
llama.cpp's Q8_0 / Q8_1 activation blocks are (per 32 values: d = max|x| / 127, q = round(x / d), x ~ d q):
the algorithm of the integer kernels, written from ggml's block definitions.

    python3 tools/gguf_numpy_reference.py FILE.gguf --ids 1,2,3 --greedy 32
"""
import argparse
import json

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class GgufLlama:
    def __init__(self, path):
        r = GGUFReader(path)
        meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        assert meta["general.architecture"] == "llama", meta["general.architecture"]
        self.H = int(meta["llama.embedding_length"])
        self.L = int(meta["llama.block_count"])
        self.nh = int(meta["llama.attention.head_count"])
        self.nkv = int(meta.get("llama.attention.head_count_kv", self.nh))
        self.D = self.H // self.nh
        self.eps = float(meta["llama.attention.layer_norm_rms_epsilon"])
        self.theta = float(meta.get("llama.rope.freq_base", 10000.0))
        self.w = {t.name: dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
            [int(d) for d in reversed(t.shape)]) for t in r.tensors}
        for l in range(self.L):
            for name, heads in (("attn_q", self.nh), ("attn_k", self.nkv)):
                key = f"blk.{l}.{name}.weight"
                w = self.w[key]
                self.w[key] = w.reshape(heads, self.D // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)
        self.lm_head = self.w.get("output.weight", self.w["token_embd.weight"])

    @staticmethod
    def block_fake_quant(x):
        """x [T, K] (K % 32 == 0) rounded to 8-bit blocks of 32 as ggml's Q8_0/Q8_1 activations."""
        T, K = x.shape
        b = x.reshape(T, K // 32, 32)
        d = np.abs(b).max(-1, keepdims=True) / 127
        q = np.round(b / np.where(d > 0, d, 1))
        return (q * d).reshape(T, K).astype(np.float32)

    def linear(self, x, name, act_blocks):
        w = self.lm_head if name is None else self.w[name]
        return (self.block_fake_quant(x) if act_blocks else x) @ w.T

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):  # x: [T, heads, D]
        half = self.D // 2
        inv = 1.0 / (self.theta ** (np.arange(0, half, dtype=np.float32) * 2 / self.D))
        ang = pos[:, None].astype(np.float32) * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def forward(self, ids, act_blocks=False, kv=None, attn_round=None):
        """Logits [T, V] of every position of `ids` (one sequence, no cache). act_blocks: fake-quantize every
        linear's input to 8-bit blocks (block_fake_quant). kv(layer, k, v) -> (k, v, offset), when given, replaces
        what attention reads of the rotated k and of v ([T, kv_heads, D]; e.g. an FP8 KV cache), offset
        ([kv_heads, D] or None) being added to each head's attention output (tools/fp8_kv_study.py).
        attn_round(kind, x), when given, rounds the attention's tensor-core operands as an FP8 attention
        kernel would: kind "q" the rotated q [T, heads, D], kind "p" the unnormalized probabilities
        exp(s - row max) [heads, T, T] before P V, the row sums taken before the rounding (FlashAttention-3's
        FP8 path)."""
        T = len(ids)
        pos = np.arange(T)
        x = self.w["token_embd.weight"][np.array(ids)]
        mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
        g = self.nh // self.nkv
        for l in range(self.L):
            p = f"blk.{l}."
            h = self.rms(x, self.w[p + "attn_norm.weight"])
            q = self.linear(h, p + "attn_q.weight", act_blocks).reshape(T, self.nh, self.D)
            k = self.linear(h, p + "attn_k.weight", act_blocks).reshape(T, self.nkv, self.D)
            v = self.linear(h, p + "attn_v.weight", act_blocks).reshape(T, self.nkv, self.D)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if attn_round is not None:
                q = attn_round("q", q.astype(np.float32))
            offset = None
            if kv is not None:
                k, v, offset = kv(l, k.astype(np.float32), v.astype(np.float32))
            k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(self.D) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            if attn_round is None:
                s /= s.sum(-1, keepdims=True)
                a = np.einsum("hts,shd->thd", s, v)
            else:
                rows = s.sum(-1, keepdims=True).transpose(1, 0, 2)  # [T, heads, 1], of the unrounded p
                a = np.einsum("hts,shd->thd", attn_round("p", s.astype(np.float32)), v) / rows
            if offset is not None:
                a = a + np.repeat(offset, g, axis=0)[None]
            a = a.reshape(T, self.nh * self.D)
            x = x + self.linear(a, p + "attn_output.weight", act_blocks)
            h = self.rms(x, self.w[p + "ffn_norm.weight"])
            gate = self.linear(h, p + "ffn_gate.weight", act_blocks)
            up = self.linear(h, p + "ffn_up.weight", act_blocks)
            x = x + self.linear(gate / (1 + np.exp(-gate)) * up, p + "ffn_down.weight", act_blocks)
        return self.linear(self.rms(x, self.w["output_norm.weight"]), None, act_blocks)

    def greedy(self, ids, n):
        ids = list(ids)
        out = []
        for _ in range(n):
            t = int(np.argmax(self.forward(ids)[-1]))
            out.append(t)
            ids.append(t)
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--ids", required=True, help="comma-separated prompt ids")
    ap.add_argument("--greedy", type=int, default=0)
    a = ap.parse_args()
    m = GgufLlama(a.gguf)
    ids = [int(t) for t in a.ids.split(",")]
    logits = m.forward(ids)
    print(json.dumps({"argmax": logits.argmax(-1).tolist(), "greedy": m.greedy(ids, a.greedy)}))


if __name__ == "__main__":
    main()
