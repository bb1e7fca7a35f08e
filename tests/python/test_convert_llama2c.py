"""tools/convert_llama2c.py: stories260K (llama2.c) -> Hugging Face directory.

References the converter is checked against, none of them written with it:
- tools/llama2c_reference.py: a numpy llama2.c forward on the ORIGINAL checkpoint (interleaved rotary
  with the checkpoint's freq_cis tables), compared with a Hugging Face-style numpy forward (rotate_half
  rotary from rope_theta) written here on the CONVERTED safetensors: logits and greedy tokens.
- the Python `tokenizers` package loading the converted tokenizer.json, compared with llama2.c's own
  encode algorithm (re-written below in a few lines) on Shakespeare text.
"""
import importlib.util
import json
import pathlib
import struct
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import convert_llama2c  # noqa: E402
from llama2c_reference import Llama2cModel  # noqa: E402

STORIES = ROOT.parent / "shared" / "models" / "stories260K"


@pytest.fixture(scope="module")
def converted(tmp_path_factory, shared_dir):
    out = tmp_path_factory.mktemp("stories260K_hf")
    convert_llama2c.main(["--checkpoint", str(STORIES / "stories260K.bin"),
                          "--tokenizer", str(STORIES / "tok512.bin"), "--out", str(out)])
    return out


@pytest.fixture(scope="module")
def reference(shared_dir):
    return Llama2cModel.load(STORIES / "stories260K.bin")


# --------------------------------------------------------------------------------------------------
# A Hugging Face-style forward (modeling_llama.py semantics) on converted weights.


def hf_forward(config: dict, w: dict, ids: list[int]) -> np.ndarray:
    """ids: [T] at positions 0..T-1 -> logits [T, vocab], float32 like transformers."""
    d, nh, nkv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    hd = config.get("head_dim") or d // nh
    eps, T = config["rms_norm_eps"], len(ids)

    def rms(x, weight):
        return weight * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))

    def rotate_half(x):
        return np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)

    inv_freq = 1.0 / (config["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    ang = np.arange(T, dtype=np.float32)[:, None] * inv_freq[None, :]
    emb = np.concatenate([ang, ang], axis=-1)  # [T, hd]
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]  # [T, 1, hd]
    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), k=1)

    x = w["model.embed_tokens.weight"][ids]  # [T, d]
    for l in range(config["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)  # [T, nh, hd]
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", s, v).reshape(T, nh * hd)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    lm_head = w["model.embed_tokens.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ lm_head.T


def hf_greedy(config, w, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(np.argmax(hf_forward(config, w, ids)[-1])))
    return ids[len(prompt):]


# --------------------------------------------------------------------------------------------------
# Model


def test_config_and_shapes(converted):
    config = json.loads((converted / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"],
            config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"],
            config["max_position_embeddings"]) == (64, 172, 5, 8, 4, 512, 512)
    assert config["rope_theta"] == 10000.0 and config["rms_norm_eps"] == 1e-5
    assert config["tie_word_embeddings"] is True and config["hidden_act"] == "silu"
    assert config["bos_token_id"] == 1 and config["eos_token_id"] == 2
    gen = json.loads((converted / "generation_config.json").read_text())
    assert gen["bos_token_id"] == 1 and gen["eos_token_id"] == 2

    w = load_file(str(converted / "model.safetensors"))
    expected = {"model.embed_tokens.weight": (512, 64), "model.norm.weight": (64,)}
    for l in range(5):
        p = f"model.layers.{l}."
        expected.update({p + "input_layernorm.weight": (64,), p + "post_attention_layernorm.weight": (64,),
                         p + "self_attn.q_proj.weight": (64, 64), p + "self_attn.k_proj.weight": (32, 64),
                         p + "self_attn.v_proj.weight": (32, 64), p + "self_attn.o_proj.weight": (64, 64),
                         p + "mlp.gate_proj.weight": (172, 64), p + "mlp.up_proj.weight": (172, 64),
                         p + "mlp.down_proj.weight": (64, 172)})
    assert {k: v.shape for k, v in w.items()} == expected  # tied: no lm_head.weight
    assert all(v.dtype == np.float32 for v in w.values())


def test_rope_theta_recovered_from_freq_cis_tables(reference):
    hs = reference.head_size
    inv_freq = 10000.0 ** (-np.arange(0, hs, 2) / hs)
    ang = np.arange(reference.seq_len)[:, None] * inv_freq
    np.testing.assert_allclose(reference.w["freq_cis_real"], np.cos(ang), atol=1e-4)
    np.testing.assert_allclose(reference.w["freq_cis_imag"], np.sin(ang), atol=1e-4)


def test_first_layer_attention_scores_match(converted, reference):
    """Pre-softmax attention scores of layer 0, llama2.c-style vs HF-style: q.k is invariant under the
    q/k row permutation only if the rotary layouts agree."""
    config = json.loads((converted / "config.json").read_text())
    w = load_file(str(converted / "model.safetensors"))
    ids = [1, 403, 407, 261, 378, 432, 383]
    T, hs, nh, nkv = len(ids), 8, 8, 4
    x = reference.w["token_embedding"][ids]
    h = np.stack([reference._rmsnorm(r, reference.w["rms_att"][0]) for r in x])
    q_ref = np.stack([reference._rope(reference.w["wq"][0] @ h[t], t) for t in range(T)]).reshape(T, nh, hs)
    k_ref = np.stack([reference._rope(reference.w["wk"][0] @ h[t], t) for t in range(T)]).reshape(T, nkv, hs)
    k_ref = np.repeat(k_ref, nh // nkv, axis=1)
    scores_ref = np.einsum("qhd,khd->hqk", q_ref, k_ref)

    inv_freq = 1.0 / (config["rope_theta"] ** (np.arange(0, hs, 2) / hs))
    emb = np.concatenate([np.arange(T)[:, None] * inv_freq] * 2, axis=-1)[:, None, :]

    def rope_hf(v):
        return v * np.cos(emb) + np.concatenate([-v[..., hs // 2:], v[..., :hs // 2]], axis=-1) * np.sin(emb)

    q = rope_hf((h @ w["model.layers.0.self_attn.q_proj.weight"].T).reshape(T, nh, hs))
    k = np.repeat(rope_hf((h @ w["model.layers.0.self_attn.k_proj.weight"].T).reshape(T, nkv, hs)), 2, axis=1)
    np.testing.assert_allclose(np.einsum("qhd,khd->hqk", q, k), scores_ref, atol=1e-5)


def test_logits_and_greedy_match_llama2c_reference(converted, reference):
    config = json.loads((converted / "config.json").read_text())
    w = load_file(str(converted / "model.safetensors"))
    rng = np.random.default_rng(0)
    ids = [1] + rng.integers(3, 512, size=19).tolist()
    ref = reference.forward(ids)
    hf = hf_forward(config, w, ids)
    assert np.abs(hf - ref).max() <= 1e-4
    assert ref.std() > 1.0  # real logits, not a degenerate all-equal case

    greedy_ref = reference.greedy([1], 30)
    assert hf_greedy(config, w, [1], 30) == greedy_ref

    # The check has teeth: without the q/k permutation, HF-style rotary gives different logits.
    unpermuted = dict(w)
    for l in range(config["num_hidden_layers"]):
        unpermuted[f"model.layers.{l}.self_attn.q_proj.weight"] = reference.w["wq"][l].astype(np.float32)
        unpermuted[f"model.layers.{l}.self_attn.k_proj.weight"] = reference.w["wk"][l].astype(np.float32)
    assert np.abs(hf_forward(config, unpermuted, ids) - ref).max() > 1e-2


def write_synthetic_checkpoint(path, rng, dim=32, hidden=48, layers=2, heads=4, kv_heads=1, vocab=512, seq=64):
    """A random llama2.c checkpoint with an UNSHARED classifier (negative vocab) and MQA."""
    hs = dim // heads
    parts = [rng.normal(0, 0.5, (vocab, dim)), 1 + 0.1 * rng.normal(size=(layers, dim)),
             rng.normal(0, 0.3, (layers, dim, dim)), rng.normal(0, 0.3, (layers, kv_heads * hs, dim)),
             rng.normal(0, 0.3, (layers, kv_heads * hs, dim)), rng.normal(0, 0.3, (layers, dim, dim)),
             1 + 0.1 * rng.normal(size=(layers, dim)), rng.normal(0, 0.3, (layers, hidden, dim)),
             rng.normal(0, 0.3, (layers, dim, hidden)), rng.normal(0, 0.3, (layers, hidden, dim)),
             1 + 0.1 * rng.normal(size=dim)]
    ang = np.arange(seq)[:, None] * 10000.0 ** (-np.arange(0, hs, 2) / hs)
    parts += [np.cos(ang), np.sin(ang), rng.normal(0, 0.5, (vocab, dim))]
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads, -vocab, seq))
        for p in parts:
            f.write(np.asarray(p, dtype="<f4").tobytes())


def test_unshared_classifier_and_mqa(tmp_path, shared_dir):
    rng = np.random.default_rng(1)
    ckpt = tmp_path / "synthetic.bin"
    write_synthetic_checkpoint(ckpt, rng)
    out = tmp_path / "hf"
    convert_llama2c.convert(ckpt, STORIES / "tok512.bin", out)
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is False and config["num_key_value_heads"] == 1
    w = load_file(str(out / "model.safetensors"))
    assert w["lm_head.weight"].shape == (512, 32)
    ref = Llama2cModel.load(ckpt)
    ids = rng.integers(0, 512, size=12).tolist()
    np.testing.assert_allclose(hf_forward(config, w, ids), ref.forward(ids), atol=1e-4)


def test_truncated_checkpoint_is_rejected(tmp_path, shared_dir):
    data = (STORIES / "stories260K.bin").read_bytes()
    bad = tmp_path / "truncated.bin"
    bad.write_bytes(data[:-4])
    with pytest.raises(ValueError, match="expected 1056540"):
        convert_llama2c.read_checkpoint(bad)


# --------------------------------------------------------------------------------------------------
# Tokenizer


def read_llama2c_vocab():
    data = (STORIES / "tok512.bin").read_bytes()
    off, pieces, scores = 4, [], []
    for _ in range(512):
        score, n = struct.unpack_from("<fi", data, off)
        pieces.append(data[off + 8:off + 8 + n])
        scores.append(score)
        off += 8 + n
    return pieces, scores


def llama2c_encode(text: str, pieces: list[bytes], scores: list[float]) -> list[int]:
    """llama2.c's encode(): BOS, dummy-prefix space, code points (byte fallback +3), then repeatedly
    merge the adjacent pair whose concatenation is the highest-scoring piece (leftmost on ties)."""
    lookup = {p: i for i, p in enumerate(pieces)}
    tokens = [lookup[b" "]] if text else []
    for ch in text:
        b = ch.encode("utf-8")
        tokens += [lookup[b]] if b in lookup else [byte + 3 for byte in b]
    while True:
        best_score, best_id, best_idx = -1e10, -1, -1
        for i in range(len(tokens) - 1):
            j = lookup.get(pieces[tokens[i]] + pieces[tokens[i + 1]])
            if j is not None and scores[j] > best_score:
                best_score, best_id, best_idx = scores[j], j, i
        if best_idx < 0:
            return [1] + tokens
        tokens[best_idx:best_idx + 2] = [best_id]


def shakespeare_samples(shared_dir, n_lines=4000):
    lines = (shared_dir / "corpora" / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8").splitlines()
    picked = [l for l in lines if l.strip()][:n_lines]
    paragraphs = ["\n".join(lines[i:i + 6]) for i in range(1000, 4000, 300)]
    odd = ["", " ", "  leading spaces", "trailing  ", "tabs\tand\nnewlines\n", "é ñ “quotes” — 日本語 🙂",
           "a < b > c", "Lily's mom said, \"Let's go!\""]
    return picked + paragraphs + odd


def test_vocab_pieces(converted):
    tok = json.loads((converted / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    assert len(vocab) == 512 and sorted(vocab.values()) == list(range(512))
    assert vocab["<unk>"] == 0 and vocab["<s>"] == 1 and vocab["</s>"] == 2
    assert vocab["<0x00>"] == 3 and vocab["<0x0A>"] == 13 and vocab["<0xFF>"] == 258
    assert vocab["\u2581t"] == 259 and vocab["\u2581"] == 410 and vocab["e"] == 411
    assert not any(" " in p for p in vocab)
    assert tok["model"]["byte_fallback"] is True and tok["model"]["fuse_unk"] is True
    cfg = json.loads((converted / "tokenizer_config.json").read_text())
    assert (cfg["bos_token"], cfg["eos_token"], cfg["add_bos_token"]) == ("<s>", "</s>", True)


def test_tokenizer_matches_llama2c_encode(converted, shared_dir):
    tokenizer = Tokenizer.from_file(str(converted / "tokenizer.json"))
    pieces, scores = read_llama2c_vocab()
    samples = shakespeare_samples(shared_dir)
    mismatches = []
    for text in samples:
        ids = tokenizer.encode(text).ids
        if ids != llama2c_encode(text, pieces, scores):
            mismatches.append(text)
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert not mismatches, f"{len(mismatches)}/{len(samples)} differ, e.g. {mismatches[:3]}"


def test_tokenizer_roundtrips_reference_story(converted, reference):
    """The story the reference model writes decodes to text that re-encodes to the same ids."""
    tokenizer = Tokenizer.from_file(str(converted / "tokenizer.json"))
    ids = reference.greedy([1], 80)
    text = tokenizer.decode([1] + ids, skip_special_tokens=True)
    assert text.startswith("Once upon a time")
    pieces, scores = read_llama2c_vocab()
    assert tokenizer.encode(text).ids == llama2c_encode(text, pieces, scores)
