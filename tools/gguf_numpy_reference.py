"""A float32 numpy forward of a llama-architecture GGUF file: the reference xinfer's GGUF path is checked
against (tests/python/test_gguf_model.py). Weights come from the `gguf` package (GGUFReader +
gguf.quants.dequantize), so nothing here shares code with xinfer's reader, dequantization or kernels.

The q/k rows are un-permuted as llama.cpp's convert_hf_to_gguf.py permuted them (per head, rows [2, D/2]
were interleaved to [D/2, 2]), and RoPE is the rotate-half form of the Hugging Face model. Activations stay
float32 throughout (llama.cpp quantizes them to 8-bit blocks for its dot products; this does not).

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

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):  # x: [T, heads, D]
        half = self.D // 2
        inv = 1.0 / (self.theta ** (np.arange(0, half, dtype=np.float32) * 2 / self.D))
        ang = pos[:, None].astype(np.float32) * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def forward(self, ids):
        """Logits [T, V] of every position of `ids` (one sequence, no cache)."""
        T = len(ids)
        pos = np.arange(T)
        x = self.w["token_embd.weight"][np.array(ids)]
        mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
        g = self.nh // self.nkv
        for l in range(self.L):
            p = f"blk.{l}."
            h = self.rms(x, self.w[p + "attn_norm.weight"])
            q = (h @ self.w[p + "attn_q.weight"].T).reshape(T, self.nh, self.D)
            k = (h @ self.w[p + "attn_k.weight"].T).reshape(T, self.nkv, self.D)
            v = (h @ self.w[p + "attn_v.weight"].T).reshape(T, self.nkv, self.D)
            q, k = self.rope(q, pos), self.rope(k, pos)
            k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(self.D) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = np.einsum("hts,shd->thd", s, v).reshape(T, self.nh * self.D)
            x = x + a @ self.w[p + "attn_output.weight"].T
            h = self.rms(x, self.w[p + "ffn_norm.weight"])
            gate, up = h @ self.w[p + "ffn_gate.weight"].T, h @ self.w[p + "ffn_up.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ self.w[p + "ffn_down.weight"].T
        return self.rms(x, self.w["output_norm.weight"]) @ self.lm_head.T

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
