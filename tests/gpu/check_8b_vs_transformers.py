#!/usr/bin/env python3
"""Whole model at full size: xinfer on CUDA against transformers (bf16) on a Llama-3.1-8B-shaped random model.

Steps (GPU machine: torch + transformers, no network):
1. Model: LlamaForCausalLM with the config of xinfer's built-in preset llama-3.1-8b (read from
   src/xinfer/model/preset_configs.cpp: 32 layers, hidden 4096, 32/8 heads, SwiGLU 14336, vocab 128256, rope
   theta 500000 with llama3 scaling x8), built on the GPU in bf16, seeded weights: matrices and embedding
   N(0, 0.02) (Llama's initializer_range), norm weights 1 + 0.1 N(0, 1). Saved with save_pretrained into a temp
   dir under /tmp (16 GB; removed at the end). `xinfer logits` needs no tokenizer.
2. Reference: transformers (sdpa) on 3 random-id prompts (lengths 7, 100, 700): 32 greedy tokens from
   model.generate(do_sample=False) in bf16, then one teacher-forced forward over prompt + those tokens in bf16
   and again with the same weights in f32 (TF32 off): logits of every position (lm_head output in f32 for both,
   as xinfer's).
3. xinfer: `xinfer-bench logits --backend cuda` on the saved directory (started while step 2's forwards run):
   prefill logits of every prompt position, 32 greedy tokens, and the logits of 32 decode steps fed the
   reference's greedy tokens (teacher forcing through the decode path, CUDA graphs on).
4. Compare against the f32 logits. Yardstick: transformers' own bf16 error |ref_bf16 - ref_f32| on the same
   rows (a correct bf16 implementation rounds at similar points, so its error is of the same size; xinfer
   rounds differently, so neither error is zero). Pass rule, per prompt and row set (prefill / decode):
   - max and mean |xinfer - f32| <= --tol (2.0) x max and mean |bf16 - f32| (no NaN/inf);
   - every position whose xinfer argmax differs from the f32 argmax is a near-tie: f32 margin between the two
     tokens <= 2 x that row's max |bf16 - f32| (a flip needs the gap to close from both sides, so this is the
     largest gap transformers' own bf16 rounding could flip); the table also shows how often transformers
     bf16 itself disagrees with f32;
   - greedy: xinfer's 32 tokens equal transformers', or the first divergence is a near-tie by the same rule
     (its f32 margin is printed).
Prints a compact table; writes it (check_8b.txt), the numbers (check_8b.json) and xinfer's log to --out
(default $OUT or /tmp/xinfer_check_8b). Exit 0 pass, 1 fail, 2 error.

Usage (repository root, GPU machine; --xinfer takes the plain or gzipped binary):
    python3 tests/gpu/check_8b_vs_transformers.py --xinfer .gpu-data/bin/xinfer-bench.gz
    python3 tests/gpu/check_8b_vs_transformers.py --xinfer ... --tiny          # 2-layer model, seconds
Without torch (tests): --reference numpy --backend cpu uses a numpy forward (f32 and bf16-rounded) instead.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRESET = "llama-3.1-8b"
# --tiny: the preset with these overrides (head_dim 128 and GQA 4 like the 8B: the same attention kernels).
TINY = dict(hidden_size=1024, intermediate_size=2048, num_hidden_layers=2, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=4096)
LINEAR_STD, NORM_STD = 0.02, 0.1


class CheckError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------------------------------
# Config


def preset_config(name: str = PRESET) -> dict:
    """The config.json text of xinfer's built-in preset, read from preset_configs.cpp (one source of truth)."""
    src = (ROOT / "src/xinfer/model/preset_configs.cpp").read_text()
    m = re.search(r'\{"' + re.escape(name) + r'",\s*R"\((\{.*?\})\)"\}', src, re.S)
    if not m:
        raise CheckError(f"preset {name} not found in preset_configs.cpp")
    return json.loads(m.group(1))


def model_config(tiny: bool) -> dict:
    cfg = preset_config()
    if tiny:
        cfg.update(TINY)
    return cfg


def head_dim(cfg: dict) -> int:
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def llama3_inv_freq(cfg: dict) -> np.ndarray:
    """Meta's llama3 rope scaling, float64 [D / 2]; also checks all three frequency regimes occur."""
    D, s = head_dim(cfg), cfg["rope_scaling"]
    assert s["rope_type"] == "llama3"
    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, D, 2, dtype=np.float64) / D)
    factor, low, high, orig = s["factor"], s["low_freq_factor"], s["high_freq_factor"], \
        s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    out = np.where(wavelen > orig / low, inv / factor, inv)
    smooth = (orig / wavelen - low) / (high - low)
    medium = (wavelen <= orig / low) & (wavelen >= orig / high)
    out = np.where(medium, (1 - smooth) * inv / factor + smooth * inv, out)
    if not ((wavelen > orig / low).any() and medium.any() and (wavelen < orig / high).any()):
        raise CheckError("llama3 scaling: not every frequency regime occurs")
    return out


def make_prompts(vocab: int, lengths: list[int], seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=n).tolist() for n in lengths]


# ----------------------------------------------------------------------------------------------------
# Reference 1: transformers on the GPU


def transformers_reference(cfg: dict, model_dir: pathlib.Path, prompts: list[list[int]], steps: int, seed: int,
                           attn: str, start_xinfer) -> tuple[dict, object]:
    """Builds, randomizes and saves the model, then computes the reference. start_xinfer(greedy) is called
    once the greedy tokens are known (xinfer then runs while the teacher-forced forwards do) and its result
    is returned with the reference: {"greedy": [[S]], "bf16": [[n+S, V]], "f32": [[n+S, V]], "info": {}}."""
    import torch
    import transformers

    t0 = time.time()
    torch.set_float32_matmul_precision("highest")  # no TF32 in the f32 reference
    try:  # f32 accumulation everywhere in bf16 GEMMs (split-K included), as xinfer's cuBLASLt calls do
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    except (AttributeError, RuntimeError) as e:
        log(f"  note: bf16 reduced-precision reduction left at its default ({e})")
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

    kwargs = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype", "dtype",
                                                          "rope_theta", "rope_scaling")}
    kwargs["initializer_range"] = LINEAR_STD
    if "rope_parameters" in transformers.LlamaConfig().to_dict():  # transformers >= 5
        kwargs["rope_parameters"] = {"rope_theta": cfg["rope_theta"], **cfg["rope_scaling"]}
    else:
        kwargs["rope_theta"], kwargs["rope_scaling"] = cfg["rope_theta"], dict(cfg["rope_scaling"])
    config = transformers.LlamaConfig(**kwargs)
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = {"dtype": torch.bfloat16} if (major, minor) >= (4, 56) else {"torch_dtype": torch.bfloat16}
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn, **dtype_kw)
    model.eval()
    if next(model.parameters()).device.type != "cuda":
        model.to("cuda")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if p.dtype != torch.bfloat16:
                p.data = p.data.to(torch.bfloat16)
            if name.endswith("norm.weight"):
                p.normal_(1.0, NORM_STD, generator=gen)
            else:
                p.normal_(0.0, LINEAR_STD, generator=gen)
    torch.cuda.synchronize()
    rot = model.model.rotary_emb
    got = rot.inv_freq.detach().double().cpu().numpy()
    want = llama3_inv_freq(cfg)
    if rot.inv_freq.dtype != torch.float32 and got.shape == want.shape and np.allclose(got, want, rtol=1e-2):
        # Frequencies rounded to the model dtype would make the f32 reference a different model (the angle
        # error grows with the position): keep the formula, in f32.
        log(f"  note: transformers holds inv_freq in {rot.inv_freq.dtype}; set to the f32 values")
        rot.inv_freq = torch.tensor(want, dtype=torch.float32, device="cuda")
        got = rot.inv_freq.double().cpu().numpy()
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=0):
        raise CheckError(f"transformers inv_freq differs from llama3 scaling: {got[:4]}... vs {want[:4]}...")
    info = {"transformers": transformers.__version__, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(), "attn": model.config._attn_implementation,
            "inv_freq_dtype": str(rot.inv_freq.dtype),
            "params": sum(p.numel() for p in model.parameters()), "build_s": time.time() - t0}
    log(f"  model built on {info['device']} in {info['build_s']:.1f} s ({info['params'] / 1e9:.2f} B params, "
        f"transformers {info['transformers']}, torch {info['torch']}, attention {info['attn']})")

    t1 = time.time()
    model.save_pretrained(str(model_dir), safe_serialization=True)
    info["save_s"] = time.time() - t1
    size = sum(f.stat().st_size for f in model_dir.iterdir())
    saved = json.loads((model_dir / "config.json").read_text())
    rope_saved = saved.get("rope_parameters") or saved.get("rope_scaling")
    log(f"  saved {size / 1e9:.1f} GB in {info['save_s']:.1f} s; config.json rope: {json.dumps(rope_saved)}")

    # Greedy tokens from generate(): EOS removed from the model's own generation config (generate() merges
    # it into any config passed in).
    t2 = time.time()
    model.generation_config = transformers.GenerationConfig(
        do_sample=False, num_beams=1, max_new_tokens=steps, eos_token_id=None, pad_token_id=0,
        bos_token_id=cfg.get("bos_token_id"))
    greedy = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], dtype=torch.long, device="cuda")
            out = model.generate(ids, attention_mask=torch.ones_like(ids))
            g = out[0, len(p):].tolist()
            if len(g) != steps:
                raise CheckError(f"generate() returned {len(g)} tokens, wanted {steps}")
            greedy.append(g)
    info["generate_s"] = time.time() - t2
    handle = start_xinfer(greedy)

    def forward_logits(ids: list[int]) -> np.ndarray:
        """[T, V] f32: the decoder's final hidden states (model dtype) through lm_head in f32."""
        with torch.no_grad():
            x = torch.tensor([ids], dtype=torch.long, device="cuda")
            h = model.model(input_ids=x, use_cache=False).last_hidden_state[0]
            w = model.lm_head.weight
            return (h.float() @ w.float().T).cpu().numpy()

    t3 = time.time()
    ref = {"greedy": greedy, "bf16": [forward_logits(p + g) for p, g in zip(prompts, greedy)]}
    model.float()  # bf16 weights upcast exactly: the same model computed in f32
    ref["f32"] = [forward_logits(p + g) for p, g in zip(prompts, greedy)]
    info["forward_s"] = time.time() - t3
    del model
    torch.cuda.empty_cache()
    ref["info"] = info
    return ref, handle


# ----------------------------------------------------------------------------------------------------
# Reference 2: numpy (no torch; tests of this script on a tiny model with the CPU backend)


def bf16_round(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def numpy_weights(cfg: dict, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    H, I, V, D = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], head_dim(cfg)
    q, kv = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                       p + "self_attn.q_proj.weight": (q, H), p + "self_attn.k_proj.weight": (kv, H),
                       p + "self_attn.v_proj.weight": (kv, H), p + "self_attn.o_proj.weight": (H, q),
                       p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                       p + "mlp.down_proj.weight": (H, I)})
    w = {}
    for name, shape in sorted(shapes.items()):
        mean, std = (1.0, NORM_STD) if name.endswith("norm.weight") else (0.0, LINEAR_STD)
        w[name] = bf16_round(mean + std * rng.standard_normal(shape, dtype=np.float32))  # bf16 values
    return w


def numpy_forward(cfg: dict, w: dict, ids: list[int], bf16: bool) -> np.ndarray:
    """Logits [T, V] (f32) of a Llama forward; bf16=True rounds every activation to bf16 (residual too)."""
    R = bf16_round if bf16 else (lambda x: np.asarray(x, np.float32))
    H, nh, nkv, D = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    eps, T = cfg["rms_norm_eps"], len(ids)
    ang = np.arange(T)[:, None] * llama3_inv_freq(cfg)[None]
    cos, sin = np.cos(ang).astype(np.float32)[:, None], np.sin(ang).astype(np.float32)[:, None]

    def norm(x, g):
        x32 = x.astype(np.float32)
        return R(x32 / np.sqrt((x32 * x32).mean(-1, keepdims=True) + eps) * g)

    def rope(v):
        a, b = v[..., :D // 2], v[..., D // 2:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)

    x = R(w["model.embed_tokens.weight"][ids])
    mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = norm(x, w[p + "input_layernorm.weight"])
        q = R(rope(R(h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, nh, D)))
        k = R(rope(R(h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, D)))
        v = R(h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, D)
        k, v = np.repeat(k, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
        s = np.einsum("thd,shd->hts", q, k) / np.float32(math.sqrt(D)) + mask
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        a = R(np.einsum("hts,shd->thd", pr, v).reshape(T, nh * D))
        x = R(x + R(a @ w[p + "self_attn.o_proj.weight"].T))
        h = norm(x, w[p + "post_attention_layernorm.weight"])
        g, u = R(h @ w[p + "mlp.gate_proj.weight"].T), R(h @ w[p + "mlp.up_proj.weight"].T)
        x = R(x + R(R(g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T))
    return (norm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T).astype(np.float32)


def numpy_reference(cfg: dict, model_dir: pathlib.Path, prompts: list[list[int]], steps: int, seed: int,
                    start_xinfer) -> tuple[dict, object]:
    from safetensors.numpy import save_file

    w = numpy_weights(cfg, seed)
    save_file(w, str(model_dir / "model.safetensors"))
    (model_dir / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "float32"}, indent=1))
    greedy = []
    for p in prompts:  # bf16 greedy by full recompute
        ids = list(p)
        for _ in range(steps):
            ids.append(int(np.argmax(numpy_forward(cfg, w, ids, True)[-1])))
        greedy.append(ids[len(p):])
    handle = start_xinfer(greedy)
    ref = {"greedy": greedy,
           "bf16": [numpy_forward(cfg, w, p + g, True) for p, g in zip(prompts, greedy)],
           "f32": [numpy_forward(cfg, w, p + g, False) for p, g in zip(prompts, greedy)],
           "info": {"reference": "numpy"}}
    return ref, handle


# ----------------------------------------------------------------------------------------------------
# xinfer


def cublaslt_env() -> dict:
    """LD_LIBRARY_PATH with libcublasLt.so.13 (the CUDA toolkit or PyTorch's nvidia wheels), as
    run_gpu_checks.sh finds it."""
    env = dict(os.environ)
    dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/lib"]
    try:
        import nvidia  # noqa: F401 (PyTorch's CUDA wheels)
        for p in nvidia.__path__:
            dirs += [os.path.join(p, "cu13", "lib"), os.path.join(p, "cublas", "lib")]
    except ImportError:
        pass
    for d in dirs:
        if os.path.exists(os.path.join(d, "libcublasLt.so.13")):
            env["LD_LIBRARY_PATH"] = d + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
            break
    return env


def unpack_binary(path: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    if not path.is_file():
        raise CheckError(f"no xinfer binary at {path} (--xinfer)")
    if path.suffix != ".gz":
        return path
    out = work / path.stem
    with gzip.open(path, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    out.chmod(0o755)
    return out


class XinferRun:
    """`xinfer logits` in the background: prompts with the reference's greedy tokens as forced ids."""

    def __init__(self, binary: pathlib.Path, model_dir: pathlib.Path, prompts, forced, steps: int, backend: str,
                 work: pathlib.Path, log_path: pathlib.Path, timeout: float):
        req = work / "requests.json"
        req.write_text(json.dumps([{"prompt_ids": p, "forced_ids": f} for p, f in zip(prompts, forced)]))
        self.output = work / "xinfer_logits.safetensors"
        self.cmd = [str(binary), "logits", "--model", str(model_dir), "--backend", backend, "--input", str(req),
                    "--greedy-steps", str(steps), "--output", str(self.output), "--no-progress"]
        self.log_path, self.timeout, self.t0 = log_path, timeout, time.time()
        self.log_file = open(log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log_file, stderr=subprocess.STDOUT, env=cublaslt_env())

    def wait(self) -> dict:
        try:
            rc = self.proc.wait(timeout=max(1.0, self.timeout - (time.time() - self.t0)))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise CheckError(f"xinfer logits timed out after {self.timeout:.0f} s (log {self.log_path})")
        finally:
            self.log_file.close()
        self.seconds = time.time() - self.t0
        if rc != 0:
            tail = "".join(open(self.log_path).readlines()[-15:])
            raise CheckError(f"xinfer logits exited with {rc}: {' '.join(self.cmd)}\n{tail}")
        from safetensors.numpy import load_file
        return load_file(str(self.output))


# ----------------------------------------------------------------------------------------------------
# Comparison


def row_stats(x: np.ndarray, b: np.ndarray, f: np.ndarray) -> dict:
    """x: xinfer, b: reference bf16, f: reference f32 logits of the same rows [R, V]."""
    dx, db = np.abs(x - f), np.abs(b - f)
    floor_row = db.max(1)  # [R]
    rows = np.arange(f.shape[0])
    af, ax, ab = f.argmax(1), x.argmax(1), b.argmax(1)
    flips = np.nonzero(ax != af)[0]
    margin = f[flips, af[flips]] - f[flips, ax[flips]]  # >= 0: f32 prefers its own argmax
    thr = 2 * floor_row[flips]
    worst = int(np.argmax(margin / np.maximum(thr, 1e-30))) if len(flips) else None
    s = {"rows": int(f.shape[0]),
         "nonfinite": int((~np.isfinite(x)).sum()),
         "xi_max": float(dx.max()), "xi_mean": float(dx.mean()),
         "ref_max": float(db.max()), "ref_mean": float(db.mean()),
         "xb_max": float(np.abs(x - b).max()), "xb_mean": float(np.abs(x - b).mean()),
         "f32_logit_std": float(f.std()),
         "argmax_xi": int((ax == af).sum()), "argmax_ref": int((ab == af).sum()),
         "flips_over_tie": int((margin > thr).sum()),
         "worst_flip": None if worst is None else {"row": int(rows[flips[worst]]), "margin": float(margin[worst]),
                                                   "threshold": float(thr[worst])}}
    s["ratio_max"] = s["xi_max"] / max(s["ref_max"], 1e-30)
    s["ratio_mean"] = s["xi_mean"] / max(s["ref_mean"], 1e-30)
    return s


def greedy_stats(xi: list[int], ref: list[int], b: np.ndarray, f: np.ndarray, n: int) -> dict:
    """xi, ref: greedy tokens [S]; b, f: reference logits of prompt + ref [n + S, V] (row n - 1 + k chose
    ref[k])."""
    S = len(ref)
    ref_self = int(sum(int(f[n - 1 + k].argmax()) == ref[k] for k in range(S)))  # transformers bf16 vs f32 argmax
    k = next((i for i in range(S) if xi[i] != ref[i]), None)
    g = {"steps": S, "equal_prefix": S if k is None else k, "ref_matches_f32_argmax": ref_self, "ok": True}
    if k is not None:
        row = n - 1 + k
        margin = float(f[row, ref[k]] - f[row, xi[k]])
        thr = 2 * float(np.abs(b[row] - f[row]).max())
        g.update({"first_divergence": k, "ref_token": ref[k], "xi_token": xi[k], "f32_margin": margin,
                  "threshold": thr, "ok": margin <= thr})
    return g


def compare(ref: dict, xi: dict, prompts: list[list[int]], tol: float) -> dict:
    results = []
    for i, p in enumerate(prompts):
        n, b, f = len(p), ref["bf16"][i], ref["f32"][i]
        S = len(ref["greedy"][i])
        if not np.array_equal(xi[f"positions_{i}"], np.arange(n)) or not np.array_equal(xi[f"prompt_{i}"], p):
            raise CheckError(f"prompt {i}: xinfer output holds other positions or prompt ids")
        V = f.shape[1]
        shapes = [a.shape for a in (xi[f"logits_{i}"], xi[f"forced_logits_{i}"], xi[f"greedy_{i}"], b, f)]
        if shapes != [(n, V), (S, V), (S,), (n + S, V), (n + S, V)]:
            raise CheckError(f"prompt {i}: unexpected shapes {shapes} (n {n}, steps {S})")
        sets = {"prefill": row_stats(xi[f"logits_{i}"], b[:n], f[:n]),
                "decode": row_stats(xi[f"forced_logits_{i}"], b[n:n + S], f[n:n + S])}
        for s in sets.values():
            s["ok"] = bool(s["nonfinite"] == 0 and s["ratio_max"] <= tol and s["ratio_mean"] <= tol
                           and s["flips_over_tie"] == 0)
        g = greedy_stats(xi[f"greedy_{i}"].tolist(), ref["greedy"][i], b, f, n)
        results.append({"prompt": i, "length": n, "sets": sets, "greedy": g})
    ok = all(s["ok"] for r in results for s in r["sets"].values()) and all(r["greedy"]["ok"] for r in results)
    return {"ok": ok, "tol": tol, "prompts": results}


def format_table(res: dict, title: str) -> str:
    lines = [title,
             f"{'prompt':<10}{'rows':>12}  {'|xi-f32| max / mean':>22}  {'|bf16-f32| max / mean':>22}  "
             f"{'ratio':>11}  {'|xi-bf16| max/mean':>19}  {'argmax=f32 xi/bf16':>18}  {'flips>tie':>9}  ok"]
    for r in res["prompts"]:
        for name, s in r["sets"].items():
            lines.append(
                f"{'p%d n=%d' % (r['prompt'], r['length']):<10}{name + ' ' + str(s['rows']):>12}  "
                f"{s['xi_max']:>9.4f} / {s['xi_mean']:<10.5f}  {s['ref_max']:>9.4f} / {s['ref_mean']:<10.5f}  "
                f"{s['ratio_max']:>4.2f}/{s['ratio_mean']:<4.2f}  {s['xb_max']:>7.4f}/{s['xb_mean']:<9.5f}  "
                f"{'%d/%d of %d' % (s['argmax_xi'], s['argmax_ref'], s['rows']):>18}  {s['flips_over_tie']:>9d}  "
                f"{'yes' if s['ok'] else 'NO'}" + (" (NaN/inf)" if s["nonfinite"] else ""))
    for r in res["prompts"]:
        g = r["greedy"]
        line = (f"greedy p{r['prompt']}: xinfer == ref bf16 for {g['equal_prefix']}/{g['steps']} steps "
                f"(ref bf16 == f32 argmax on {g['ref_matches_f32_argmax']}/{g['steps']})")
        if "first_divergence" in g:
            verdict = ("f32 prefers xinfer's token, ok" if g["f32_margin"] < 0 else
                       "near-tie, ok" if g["ok"] else "NOT a near-tie")
            line += (f"; step {g['first_divergence']}: xinfer {g['xi_token']} vs ref {g['ref_token']}, f32 margin "
                     f"{g['f32_margin']:.4f} (near-tie bound {g['threshold']:.4f}): {verdict}")
        lines.append(line)
    stds = [s["f32_logit_std"] for r in res["prompts"] for s in r["sets"].values()]
    lines.append(f"logit scale: f32 logits std {min(stds):.3f}..{max(stds):.3f} per row set")
    lines.append(f"rule: max and mean |xi-f32| <= {res['tol']:g}x the reference's own |bf16-f32| per row set; argmax "
                 f"flips and the first greedy divergence only where the f32 margin <= 2x the row's max |bf16-f32|")
    lines.append("RESULT: " + ("PASS" if res["ok"] else "FAIL"))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xinfer", type=pathlib.Path, default=ROOT / ".gpu-data/bin/xinfer-bench.gz",
                    help="xinfer or xinfer-bench binary (plain or .gz) with the logits command")
    ap.add_argument("--tiny", action="store_true", help="2-layer model (hidden 1024, vocab 4096): a smoke test")
    ap.add_argument("--reference", choices=["transformers", "numpy"], default="transformers")
    ap.add_argument("--backend", default="cuda", help="xinfer backend (cpu for tests without a GPU)")
    ap.add_argument("--lengths", default="7,100,700", help="prompt lengths (random ids)")
    ap.add_argument("--steps", type=int, default=32, help="greedy steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--attn", default="sdpa", help="transformers attention implementation (sdpa or eager)")
    ap.add_argument("--tol", type=float, default=2.0, help="allowed ratio to transformers' own bf16 error")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path(os.environ.get("OUT") or "/tmp/xinfer_check_8b"))
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp"), help="where the temp model dir goes")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (model, logits)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds for the xinfer run")
    args = ap.parse_args(argv)

    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = model_config(args.tiny)
    lengths = [int(x) for x in args.lengths.split(",") if x]
    prompts = make_prompts(cfg["vocab_size"], lengths, args.seed)
    work = pathlib.Path(tempfile.mkdtemp(prefix="xinfer_check_8b_", dir=args.work))
    model_dir = work / "model"
    model_dir.mkdir()
    shape = "tiny" if args.tiny else "Llama-3.1-8B"
    log(f"check_8b: {shape}-shaped random model in {work}; prompts {lengths}, {args.steps} greedy steps, "
        f"reference {args.reference}, xinfer backend {args.backend}")
    runs = []
    try:
        binary = unpack_binary(args.xinfer.resolve(), work)

        def start(greedy):
            runs.append(XinferRun(binary, model_dir, prompts, greedy, args.steps, args.backend, work,
                                  args.out / "check_8b_xinfer.log", args.timeout))
            return runs[-1]

        if args.reference == "transformers":
            ref, run = transformers_reference(cfg, model_dir, prompts, args.steps, args.seed, args.attn, start)
        else:
            ref, run = numpy_reference(cfg, model_dir, prompts, args.steps, args.seed, start)
        t_ref = time.time()
        xi = run.wait()
        t_xi = time.time()
        res = compare(ref, xi, prompts, args.tol)
        info = ref["info"]
        title = (f"check_8b: {shape} shape ({cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, vocab "
                 f"{cfg['vocab_size']}, llama3 rope), random N(0,{LINEAR_STD}) bf16 weights; xinfer {args.backend} vs "
                 + (f"transformers {info['transformers']} ({info['attn']}, {info['device']})"
                    if "transformers" in info else "numpy reference")
                 + "; errors against the same model in f32")
        table = format_table(res, title)
        t_end = time.time()
        phases = ", ".join(f"{k[:-2]} {v:.0f} s" for k, v in info.items() if k.endswith("_s"))
        timing = (f"time: total {t_end - t0:.0f} s (reference {t_ref - t0:.0f} s{': ' + phases if phases else ''}; "
                  f"xinfer run {run.seconds:.0f} s, {t_xi - t_ref:.0f} s of it after the reference; compare "
                  f"{t_end - t_xi:.0f} s)")
        log(table + "\n" + timing)
        (args.out / "check_8b.txt").write_text(table + "\n" + timing + "\n")
        res.update({"config": cfg, "lengths": lengths, "steps": args.steps, "seed": args.seed, "info": info,
                    "backend": args.backend, "seconds": t_end - t0})
        (args.out / "check_8b.json").write_text(json.dumps(res, indent=1) + "\n")
        return 0 if res["ok"] else 1
    except CheckError as e:
        log(f"check_8b: ERROR: {e}")
        return 2
    finally:
        for r in runs:  # still running after an error elsewhere
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
