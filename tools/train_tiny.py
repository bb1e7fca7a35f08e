#!/usr/bin/env python3
"""Trains xinfer's bundled default model: a small Llama (transformers LlamaForCausalLM) with its own byte-level
BPE tokenizer and a Llama-3-style chat template, on tinyshakespeare (public-domain text).

Pipeline (all deterministic for a given --seed on a given device):
  1. Split the corpus 90/10 by position (at a line boundary): train / validation.
  2. Train a byte-level BPE tokenizer (Hugging Face `tokenizers`) on the train part only: Llama-3 Split regex
     + ByteLevel pre-tokenizer, ByteLevel decoder, TemplateProcessing post-processor adding
     <|begin_of_text|>. Special tokens take ids 0..4 (SPECIAL_TOKENS).
  3. Training rows are seq_len+1 tokens: a (1 - --chat-fraction) share are plain text windows that start
     with BOS at a line start; the rest pack chat conversations rendered with the chat template (user:
     "Continue: <speech>" -> assistant: <the next speech(es)>, or user: "Speak as <NAME>." -> assistant: a
     speech of NAME), each ending in <|eot_id|>, so chat completions sound like the play and stop.
  4. AdamW, linear warm-up then cosine decay, residual dropout (forward hooks on o_proj/down_proj, not
     saved), bf16 autocast on CUDA; validation loss every --eval-every steps; the best validation
     checkpoint is kept.
  5. Saves OUT/: config.json, generation_config.json, model.safetensors (bf16 by default), tokenizer.json,
     tokenizer_config.json (bos/eos, add_bos_token, chat_template), train_log.json (arguments, loss curve,
     final figures, samples).
  6. Verifies OUT/ and exits non-zero if anything is off: reloads it with transformers and recomputes the
     validation loss; greedy-generates and compares with the in-memory model; re-encodes validation text
     with tokenizer.json through `tokenizers` (ids identical, decode round-trips); renders the chat
     template through transformers' apply_chat_template and compares with a hand-written expected string;
     checks file sizes (model.safetensors <= --max-model-mb, directory <= --max-total-mb).

Usage (repo root):
  GPU (the bundled model):  python3 tools/train_tiny.py --data .gpu-data/tinyshakespeare/input.txt \\
                                --out $OUT/xinfer-tiny-shakespeare --device cuda
  CPU pipeline smoke test:  python3 tools/train_tiny.py --smoke --out /tmp/tiny_smoke
Needs torch, transformers, tokenizers, safetensors, jinja2, numpy (not in requirements-dev.txt: only this
tool and make_golden.py need torch/transformers).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import random
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "corpora" / "tinyshakespeare" / "input.txt"

BOS = "<|begin_of_text|>"
EOT_TEXT = "<|end_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOT = "<|eot_id|>"
SPECIAL_TOKENS = [BOS, EOT_TEXT, START_HEADER, END_HEADER, EOT]  # ids 0..4, in this order

# Llama-3's pre-tokenizer regex (contractions, letters with one leading non-letter, 1-3 digits, punctuation
# runs, newlines, spaces).
SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Llama-3-style template with standard Jinja only (set/for/if, loop, trim, `in`, raise_exception), so our
# C++ interpreter renders it as jinja2 does. BOS comes from the template: apply_chat_template tokenizes
# with add_special_tokens=False.
CHAT_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- for message in messages %}\n"
    "    {%- if message['role'] not in ['system', 'user', 'assistant'] %}\n"
    "        {{- raise_exception('Only system, user and assistant roles are supported.') }}\n"
    "    {%- endif %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n"
)

CONTINUE_PREFIXES = ["Continue: ", "Continue:\n", "Continue the scene:\n", "Continue this speech:\n", ""]
SPEAK_PROMPTS = ["Speak as {name}.", "Write a speech for {name}.", "What says {name}?", "{name}, speak."]
SYSTEM_PROMPTS = ["You are a player in Shakespeare's company.", "Answer in the style of Shakespeare.",
                  "You are a helpful assistant."]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", type=pathlib.Path, default=DEFAULT_DATA, help="tinyshakespeare input.txt")
    p.add_argument("--out", type=pathlib.Path, help="output model directory (created)")
    p.add_argument("--summary", type=pathlib.Path, metavar="TRAIN_LOG",
                   help="print a markdown summary of a train_log.json (for models/README.md) and exit")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cuda, cpu")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--smoke", action="store_true",
                   help="tiny CPU run to test the pipeline: small tokenizer/model, few steps, relaxed checks")
    # tokenizer
    p.add_argument("--vocab-size", type=int, default=4096)
    # model
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=704)
    p.add_argument("--max-positions", type=int, default=512)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    # training
    p.add_argument("--steps", type=int, default=800, help="optimizer steps (2000 overfits: best validation loss at step 400)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--dropout", type=float, default=0.3, help="residual dropout (and attention dropout)")
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--chat-fraction", type=float, default=0.25, help="share of rows packed with chat samples")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-windows", type=int, default=128, help="validation windows of seq_len tokens")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA only)")
    # output
    p.add_argument("--save-dtype", choices=["bfloat16", "float32", "float16"], default="bfloat16")
    p.add_argument("--max-model-mb", type=float, default=18.0)
    p.add_argument("--max-total-mb", type=float, default=20.0)
    args = p.parse_args(argv)
    if args.out is None and args.summary is None:
        p.error("--out is required")
    if args.smoke:
        args.vocab_size = 512
        args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate = 64, 2, 4, 2, 176
        args.max_positions = 128
        args.steps = min(args.steps, 40)
        args.batch_size, args.seq_len = 8, 64
        args.eval_every, args.eval_windows, args.warmup = 20, 16, 5
        args.lr = 3e-3
        if args.device == "auto":
            args.device = "cpu"
    return args


def log(msg: str) -> None:
    print(msg, flush=True)


class Failure(Exception):
    pass


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise Failure(msg)


# ----------------------------------------------------------------------------------------------- data


def split_corpus(text: str) -> tuple[str, str]:
    """90/10 by position, cut at the first blank line after 90% (speeches stay whole)."""
    cut = text.find("\n\n", int(len(text) * 0.9))
    check(cut > 0, "corpus has no blank line after 90%")
    return text[:cut + 2], text[cut + 2:]


def speeches(text: str) -> list[tuple[str, str]]:
    """(speaker, whole speech text including the 'NAME:' line) for each blank-line separated block."""
    out = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        if not block:
            continue
        first, _, rest = block.partition("\n")
        if first.endswith(":") and rest.strip() and len(first) < 40:
            out.append((first[:-1], block))
        else:
            out.append(("", block))
    return out


def make_conversations(blocks: list[tuple[str, str]], rng: random.Random, count: int) -> list[list[dict]]:
    """Chat samples from consecutive speeches (see module doc)."""
    convs = []
    n = len(blocks)
    for _ in range(count):
        msgs = []
        if rng.random() < 0.2:
            msgs.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        kind = rng.random()
        i = rng.randrange(n - 3)
        if kind < 0.65 or not blocks[i][0]:
            prompt = blocks[i][1]
            lines = prompt.split("\n")
            if len(lines) > 6:  # long speech: prompt with its start
                prompt = "\n".join(lines[:rng.randint(2, 6)])
            reply = "\n\n".join(b[1] for b in blocks[i + 1:i + 1 + rng.randint(1, 2)])
            msgs.append({"role": "user", "content": rng.choice(CONTINUE_PREFIXES) + prompt})
        else:
            name = blocks[i][0]
            shown = name if rng.random() < 0.5 else name.title()
            msgs.append({"role": "user", "content": rng.choice(SPEAK_PROMPTS).format(name=shown)})
            reply = blocks[i][1]
        msgs.append({"role": "assistant", "content": reply})
        convs.append(msgs)
    return convs


_COMPILED_TEMPLATE = None


def render_chat(messages: list[dict], add_generation_prompt: bool) -> str:
    """The template rendered as transformers does (sandboxed jinja2, trim_blocks, lstrip_blocks)."""
    global _COMPILED_TEMPLATE
    if _COMPILED_TEMPLATE is None:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(msg):
            raise jinja2.exceptions.TemplateError(msg)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        _COMPILED_TEMPLATE = env.from_string(CHAT_TEMPLATE)
    return _COMPILED_TEMPLATE.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                     bos_token=BOS, eos_token=EOT)


# ------------------------------------------------------------------------------------------ tokenizer


def train_tokenizer(train_text: str, vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(byte_fallback=False, fuse_unk=False))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    chunks = [c + "\n\n" for c in train_text.split("\n\n")]  # same pieces as the whole text (regex is line-local)
    tok.train_from_iterator(chunks, trainer=trainer, length=len(chunks))
    for i, s in enumerate(SPECIAL_TOKENS):
        check(tok.token_to_id(s) == i, f"special token {s} has id {tok.token_to_id(s)}, expected {i}")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B:1", special_tokens=[(BOS, 0)])
    return tok


def tokenizer_config(max_len: int) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOT,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_len,
        "model_input_names": ["input_ids", "attention_mask"],
        "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True}
                                 for i, s in enumerate(SPECIAL_TOKENS)},
        "chat_template": CHAT_TEMPLATE,
    }


# ---------------------------------------------------------------------------------------------- model


def build_model(args, vocab_size: int, torch, transformers):
    cfg = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads, max_position_embeddings=args.max_positions, rms_norm_eps=1e-5,
        rope_theta=args.rope_theta, tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
        mlp_bias=False, attention_dropout=args.dropout, initializer_range=0.02, use_cache=True,
        bos_token_id=0, eos_token_id=[SPECIAL_TOKENS.index(EOT), SPECIAL_TOKENS.index(EOT_TEXT)],
        pad_token_id=None)
    model = transformers.LlamaForCausalLM(cfg)
    # GPT-2-style scaled init of the residual projections.
    with torch.no_grad():
        for layer in model.model.layers:
            std = 0.02 / math.sqrt(2 * args.layers)
            layer.self_attn.o_proj.weight.normal_(0.0, std)
            layer.mlp.down_proj.weight.normal_(0.0, std)
    return model


def add_residual_dropout(model, p: float, torch) -> None:
    """Dropout on each block's attention and MLP output while training; hooks are not saved."""
    if p <= 0:
        return

    def hook(module, inputs, output):
        return torch.nn.functional.dropout(output, p=p, training=module.training)

    for layer in model.model.layers:
        layer.self_attn.o_proj.register_forward_hook(hook)
        layer.mlp.down_proj.register_forward_hook(hook)


# --------------------------------------------------------------------------------------------- batches


class Batcher:
    """Rows of seq_len+1 tokens: plain text windows (BOS + text from a line start) or packed chats."""

    def __init__(self, ids: np.ndarray, line_starts: np.ndarray, chats: list[np.ndarray], seq_len: int,
                 chat_fraction: float, seed: int):
        self.ids, self.seq_len, self.chats, self.chat_fraction = ids, seq_len, chats, chat_fraction
        self.starts = line_starts[line_starts + seq_len <= len(ids)]
        check(len(self.starts) > 0, "text too short for seq_len")
        self.rng = np.random.default_rng(seed)

    def text_row(self, start: int) -> np.ndarray:
        return np.concatenate([[0], self.ids[start:start + self.seq_len]])

    def chat_row(self) -> np.ndarray:
        parts, n = [], 0
        while n < self.seq_len + 1:
            c = self.chats[self.rng.integers(len(self.chats))]
            parts.append(c)
            n += len(c)
        return np.concatenate(parts)[:self.seq_len + 1]

    def batch(self, size: int) -> np.ndarray:
        rows = []
        for _ in range(size):
            if self.chats and self.rng.random() < self.chat_fraction:
                rows.append(self.chat_row())
            else:
                rows.append(self.text_row(int(self.starts[self.rng.integers(len(self.starts))])))
        return np.stack(rows).astype(np.int64)


def line_starts_of(enc, text: str) -> np.ndarray:
    """Token indices whose first character starts a line."""
    starts = [i for i, (a, _) in enumerate(enc.offsets) if a == 0 or text[a - 1] == "\n"]
    return np.asarray(starts, dtype=np.int64)


def eval_rows(ids: np.ndarray, line_starts: np.ndarray, seq_len: int, count: int) -> np.ndarray:
    """Fixed validation rows: BOS + seq_len tokens from evenly spaced line starts."""
    starts = line_starts[line_starts + seq_len <= len(ids)]
    check(len(starts) > 0, "validation text too short for seq_len")
    pick = starts[np.linspace(0, len(starts) - 1, min(count, len(starts))).round().astype(np.int64)]
    return np.stack([np.concatenate([[0], ids[s:s + seq_len]]) for s in pick]).astype(np.int64)


def mean_loss(model, rows: np.ndarray, device, torch, autocast, batch: int = 32) -> float:
    """Mean next-token cross-entropy (nats) over all predicted positions of `rows` [N, seq_len+1]."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(rows), batch):
            x = torch.from_numpy(rows[i:i + batch]).to(device)
            with autocast():
                logits = model(input_ids=x[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                     x[:, 1:].reshape(-1), reduction="sum")
            total += loss.item()
            count += x[:, 1:].numel()
    model.train(was_training)
    return total / count


def generate(model, prompt_ids: list[int], n: int, device, torch, eos: set[int], temperature: float = 0.0,
             seed: int = 0, gaps: list | None = None) -> list[int]:
    """Greedy (temperature 0) or sampled decoding, a full forward (no KV cache) each step. With `gaps`,
    appends each greedy step's top-1 minus top-2 logit."""
    model.eval()
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = list(prompt_ids)
    max_pos = model.config.max_position_embeddings
    with torch.no_grad():
        for _ in range(n):
            x = torch.tensor([ids[-max_pos:]], device=device)
            logits = model(input_ids=x).logits[0, -1].float().cpu()
            if temperature <= 0:
                t = int(torch.argmax(logits))
                if gaps is not None:
                    top = torch.topk(logits, 2).values
                    gaps.append(float(top[0] - top[1]))
            else:
                t = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=g))
            ids.append(t)
            if t in eos:
                break
    return ids[len(prompt_ids):]


# ------------------------------------------------------------------------------------------------ main


def summary(log_path: pathlib.Path) -> str:
    """Markdown: figures, loss curve (about 10 rows), samples."""
    t = json.loads(log_path.read_text())
    a, v = t["args"], t["versions"]
    lines = [f"- Trained on {v['device']} (torch {v['torch']}, transformers {v['transformers']}) in "
             f"{t['train_seconds']} s: {a['steps']} steps x {a['batch_size']} x {a['seq_len']} tokens; "
             f"{t['parameters'] / 1e6:.2f} M parameters; corpus {t['corpus']['train_tokens']} train / "
             f"{t['corpus']['val_tokens']} validation tokens.",
             f"- Best validation loss {t['best_val_loss']} nats/token at step {t['best_step']}; saved "
             f"({a['save_dtype']}) weights: validation loss {t['saved_val_loss']}, perplexity "
             f"{t['saved_val_perplexity']}, chat-sample loss {t['saved_val_chat_loss']}.", "",
             "| step | train loss | val loss | val chat loss | elapsed s |", "|---:|---:|---:|---:|---:|"]
    curve = t["curve"]
    stride = max(1, len(curve) // 10)
    for i, c in enumerate(curve):
        if i % stride == 0 or i == len(curve) - 1:
            lines.append(f"| {c['step']} | {c['train_loss'] if c['train_loss'] is not None else '-'} | "
                         f"{c['val_loss']} | {c['val_chat_loss']} | {c['elapsed_s']} |")
    for s in t["samples"]:
        if s["kind"] == "completion":
            head = f"completion, temperature {s['temperature']}, prompt {s['prompt']!r}"
        else:
            head = (f"chat, temperature {s['temperature']}, user {s['messages'][-1]['content']!r}, "
                    f"stopped at EOS: {s['stopped_at_eos']}")
        body = (s["prompt"] if s["kind"] == "completion" else "") + s["text"]
        lines += ["", f"{head}:", "```", body.rstrip("\n"), "```"]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.summary is not None:
        print(summary(args.summary))
        return 0
    import torch
    import transformers
    from tokenizers import Tokenizer

    t_start = time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    on_cuda = device.type == "cuda"
    torch.set_float32_matmul_precision("high")  # TF32 for training; "highest" again for the checks

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if on_cuda else torch.autocast("cpu", enabled=False)

    log(f"train_tiny: torch {torch.__version__}, transformers {transformers.__version__}, device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if on_cuda else ""))

    # ---- data + tokenizer
    text = args.data.read_text(encoding="utf-8")
    train_text, val_text = split_corpus(text)
    log(f"corpus {args.data}: {len(text)} chars; train {len(train_text)}, validation {len(val_text)}")
    tok = train_tokenizer(train_text, args.vocab_size)
    vocab_size = tok.get_vocab_size()
    train_enc = tok.encode(train_text, add_special_tokens=False)
    val_enc = tok.encode(val_text, add_special_tokens=False)
    train_ids = np.asarray(train_enc.ids, dtype=np.int64)
    val_ids = np.asarray(val_enc.ids, dtype=np.int64)
    log(f"tokenizer: vocab {vocab_size}; train {len(train_ids)} tokens ({len(train_text) / len(train_ids):.2f} "
        f"chars/token), validation {len(val_ids)} tokens")

    rng = random.Random(args.seed)
    train_blocks, val_blocks = speeches(train_text), speeches(val_text)
    n_conv = 20000 if not args.smoke else 500
    train_convs = make_conversations(train_blocks, rng, n_conv)
    val_convs = make_conversations(val_blocks, rng, 256 if not args.smoke else 32)
    train_chats = [np.asarray(e.ids, dtype=np.int64) for e in
                   tok.encode_batch([render_chat(c, False) for c in train_convs], add_special_tokens=False)]
    val_chat_list = [np.asarray(e.ids, dtype=np.int64) for e in
                     tok.encode_batch([render_chat(c, False) for c in val_convs], add_special_tokens=False)]
    check(all(c[0] == 0 and c[-1] == SPECIAL_TOKENS.index(EOT) for c in train_chats), "chat sample framing")
    log(f"chat samples: {len(train_chats)} train (mean {np.mean([len(c) for c in train_chats]):.0f} tokens), "
        f"{len(val_chat_list)} validation")

    batcher = Batcher(train_ids, line_starts_of(train_enc, train_text), train_chats, args.seq_len,
                      args.chat_fraction, args.seed)
    val_rows = eval_rows(val_ids, line_starts_of(val_enc, val_text), args.seq_len, args.eval_windows)
    val_chat_rows = Batcher(val_ids, np.zeros(1, np.int64), val_chat_list, args.seq_len, 1.0,
                            args.seed + 1).batch(min(args.eval_windows, 64))

    # ---- model
    check(args.seq_len + 1 <= args.max_positions + 1, "seq_len exceeds max_positions")
    model = build_model(args, vocab_size, torch, transformers).to(device)
    add_residual_dropout(model, args.dropout, torch)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: LlamaForCausalLM hidden {args.hidden}, layers {args.layers}, heads {args.heads}/{args.kv_heads} "
        f"kv, intermediate {args.intermediate}, vocab {vocab_size}, tied; {n_params / 1e6:.2f} M parameters")
    fwd = torch.compile(model) if (args.compile and on_cuda) else model

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95),
                            eps=1e-8, **({"fused": True} if on_cuda else {}))

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1 + math.cos(math.pi * min(1.0, frac)))

    # ---- train
    curve = []
    best = {"val_loss": float("inf"), "step": -1, "state": None}
    tokens_per_step = args.batch_size * args.seq_len
    model.train()
    t_train = time.time()
    t_last, train_acc, train_n = time.time(), 0.0, 0
    for step in range(args.steps + 1):
        if step % args.eval_every == 0 or step == args.steps:
            val_loss = mean_loss(model, val_rows, device, torch, autocast)
            val_chat = mean_loss(model, val_chat_rows, device, torch, autocast)
            dt = time.time() - t_last
            tps = tokens_per_step * train_n / dt if train_n else 0.0
            tr = float(train_acc) / train_n if train_n else float("nan")
            curve.append({"step": step, "train_loss": None if math.isnan(tr) else round(tr, 4),
                          "val_loss": round(val_loss, 4), "val_chat_loss": round(val_chat, 4),
                          "lr": lr_at(step), "elapsed_s": round(time.time() - t_train, 1)})
            log(f"step {step:5d}/{args.steps}  train {tr:.4f}  val {val_loss:.4f}  val_chat {val_chat:.4f}  "
                f"lr {lr_at(step):.2e}  {tps:,.0f} tok/s  {time.time() - t_train:.0f}s")
            if val_loss < best["val_loss"]:
                best = {"val_loss": val_loss, "step": step,
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
            t_last, train_acc, train_n = time.time(), 0.0, 0
        if step == args.steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        x = torch.from_numpy(batcher.batch(args.batch_size)).to(device, non_blocking=True)
        with autocast():
            logits = fwd(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        train_acc = train_acc + loss.detach()  # stays on the device: no sync per step
        train_n += 1
    train_seconds = time.time() - t_train
    model.load_state_dict(best["state"])
    log(f"trained {args.steps} steps in {train_seconds:.1f}s; best validation loss {best['val_loss']:.4f} at step "
        f"{best['step']} (perplexity {math.exp(best['val_loss']):.2f})")

    # ---- save
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("chat_template.jinja", "special_tokens_map.json", "pytorch_model.bin"):
        (out / stale).unlink(missing_ok=True)
    model.config.attention_dropout = 0.0  # inference config
    save_dtype = getattr(torch, args.save_dtype)
    model.to(save_dtype)
    model.save_pretrained(out, safe_serialization=True)
    eos_ids = [SPECIAL_TOKENS.index(EOT), SPECIAL_TOKENS.index(EOT_TEXT)]
    gen = transformers.GenerationConfig(bos_token_id=0, eos_token_id=eos_ids, do_sample=True, temperature=0.8,
                                        top_p=0.95)
    gen.save_pretrained(out)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(args.max_positions), indent=2,
                                                          ensure_ascii=False) + "\n")
    model.to(torch.float32)  # in-memory reference = the saved (rounded) weights, computed in float32
    torch.set_float32_matmul_precision("highest")
    with torch.autocast(device.type, enabled=False):
        saved_val = mean_loss(model, val_rows, device, torch, lambda: torch.autocast(device.type, enabled=False))
        saved_val_chat = mean_loss(model, val_chat_rows, device, torch,
                                   lambda: torch.autocast(device.type, enabled=False))
    log(f"saved {out} ({args.save_dtype}); float32 validation loss of the saved weights {saved_val:.4f} "
        f"(perplexity {math.exp(saved_val):.2f}), chat {saved_val_chat:.4f}")

    # ---- samples
    eos = set(eos_ids)
    samples = []
    raw_prompts = ["ROMEO:\n", "First Citizen:\nWhat say you to the king?\n\n"]
    chat_prompts = [[{"role": "user", "content": "Continue: To be, or not to be, that is the question."}],
                    [{"role": "user", "content": "Speak as JULIET."}]]

    def sample(ids: list[int], n: int, temp: float) -> list[int]:  # transformers generate(), KV cache
        x = torch.tensor([ids], device=device)
        torch.manual_seed(args.seed)
        kw = dict(do_sample=True, temperature=temp, top_p=0.95, top_k=50) if temp > 0 else dict(do_sample=False)
        return model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, eos_token_id=sorted(eos),
                              pad_token_id=SPECIAL_TOKENS.index(EOT_TEXT), **kw)[0, len(ids):].tolist()

    for p in raw_prompts:
        ids = tok.encode(p).ids
        for temp in (0.0, 0.8):
            out_ids = sample(ids, 24 if args.smoke else 120, temp)
            samples.append({"kind": "completion", "prompt": p, "temperature": temp,
                            "text": tok.decode(out_ids, skip_special_tokens=False)})
    for msgs in chat_prompts:
        ids = tok.encode(render_chat(msgs, True), add_special_tokens=False).ids
        for temp in (0.0, 0.8):
            out_ids = sample(ids, 24 if args.smoke else 200, temp)
            samples.append({"kind": "chat", "messages": msgs, "temperature": temp,
                            "stopped_at_eos": bool(out_ids) and out_ids[-1] in eos,
                            "text": tok.decode(out_ids, skip_special_tokens=True)})
    for s in samples:
        head = s["prompt"] if s["kind"] == "completion" else s["messages"][-1]["content"]
        log(f"--- sample ({s['kind']}, T={s['temperature']}) prompt {head!r}"
            + (f", stopped at EOS: {s['stopped_at_eos']}" if s["kind"] == "chat" else "") + "\n" + s["text"])

    train_log = {
        "args": {k: (str(v) if isinstance(v, pathlib.Path) else v) for k, v in vars(args).items()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "device": torch.cuda.get_device_name(device) if on_cuda else "cpu"},
        "corpus": {"chars": len(text), "train_chars": len(train_text), "val_chars": len(val_text),
                   "train_tokens": int(len(train_ids)), "val_tokens": int(len(val_ids))},
        "parameters": n_params, "train_seconds": round(train_seconds, 1),
        "best_step": best["step"], "best_val_loss": round(best["val_loss"], 4),
        "saved_val_loss": round(saved_val, 4), "saved_val_perplexity": round(math.exp(saved_val), 3),
        "saved_val_chat_loss": round(saved_val_chat, 4),
        "curve": curve, "samples": samples,
    }
    (out / "train_log.json").write_text(json.dumps(train_log, indent=1, ensure_ascii=False) + "\n")

    # ---- verify
    try:
        verify(args, out, model, tok, val_text, val_rows, saved_val, device, torch, transformers, Tokenizer)
    except Failure as e:
        log(f"VERIFY FAILED: {e}")
        return 1
    log(f"OK: validation loss {saved_val:.4f}, perplexity {math.exp(saved_val):.2f}; total {time.time() - t_start:.0f}s")
    return 0


def verify(args, out, model, tok, val_text, val_rows, saved_val, device, torch, transformers, Tokenizer) -> None:
    # Files and sizes.
    names = sorted(p.name for p in out.iterdir())
    for need in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json"):
        check(need in names, f"{need} missing from {out}")
    sizes = {n: (out / n).stat().st_size for n in names}
    total = sum(sizes.values())
    log("files: " + ", ".join(f"{n} {s / 1e6:.2f} MB" for n, s in sizes.items()) + f"; total {total / 1e6:.2f} MB")
    check(sizes["model.safetensors"] <= args.max_model_mb * 1e6, f"model.safetensors over {args.max_model_mb} MB")
    check(total <= args.max_total_mb * 1e6, f"directory over {args.max_total_mb} MB")

    # Config and tensors as our loader expects them.
    cfg = json.loads((out / "config.json").read_text())
    check(cfg["architectures"] == ["LlamaForCausalLM"] and cfg["tie_word_embeddings"] is True, "config.json")
    from safetensors import safe_open
    with safe_open(str(out / "model.safetensors"), "np" if args.save_dtype != "bfloat16" else "pt") as f:
        keys = set(f.keys())
    check("lm_head.weight" not in keys and "model.embed_tokens.weight" in keys, f"tensor names: {sorted(keys)[:5]}")
    check(len(keys) == 2 + 9 * args.layers, f"{len(keys)} tensors, expected {2 + 9 * args.layers}")

    # Reload with transformers (float32): same validation loss and same greedy tokens as in memory.
    re = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).to(device)
    no_ac = lambda: torch.autocast(device.type, enabled=False)  # noqa: E731
    re_val = mean_loss(re, val_rows, device, torch, no_ac)
    check(abs(re_val - saved_val) < 1e-3, f"reloaded validation loss {re_val} != {saved_val}")
    eos = {SPECIAL_TOKENS.index(EOT), SPECIAL_TOKENS.index(EOT_TEXT)}
    prompt = tok.encode("KING RICHARD III:\n").ids
    gaps: list[float] = []
    a = generate(model, prompt, 32, device, torch, eos, gaps=gaps)
    b = generate(re, prompt, 32, device, torch, eos)
    check(a == b, f"greedy tokens differ after reload: {a} vs {b}")
    # generate() (KV cache) rounds differently from full recomputation: compare up to the first near-tie.
    x = torch.tensor([prompt], device=device)  # explicit mask: BOS (id 0) must not be taken for padding
    hf = re.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=len(a), do_sample=False,
                     eos_token_id=sorted(eos), pad_token_id=SPECIAL_TOKENS.index(EOT_TEXT))[0, len(prompt):].tolist()
    clear = next((i for i, gap in enumerate(gaps) if gap < 1e-3), len(a))
    check(hf[:clear] == a[:clear], f"model.generate greedy {hf} != step-by-step greedy {a} (first {clear})")
    log(f"reload: validation loss {re_val:.4f}; greedy {len(a)} tokens identical, generate() agrees on the "
        f"first {clear} (no near-tie before): {tok.decode(a)!r}")

    # Tokenizer file through `tokenizers`: same ids as the trained object, BOS added, lossless decode.
    t2 = Tokenizer.from_file(str(out / "tokenizer.json"))
    sample = val_text[:20000] + " café – naïve 日本語 🙂 \t\r\n  x"
    ids = t2.encode(sample).ids
    check(ids[0] == 0 and ids[1:] == tok.encode(sample, add_special_tokens=False).ids, "tokenizer.json ids differ")
    check(t2.decode(ids, skip_special_tokens=True) == sample, "tokenizer.json decode is not lossless")
    check(t2.get_vocab_size() == cfg["vocab_size"], "vocab size differs from config.json")
    log(f"tokenizer.json: {len(ids)} ids for {len(sample)} chars, lossless round trip")

    # transformers' tokenizer + chat template, against a hand-written expectation.
    ht = transformers.AutoTokenizer.from_pretrained(out)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hello \n"},
            {"role": "assistant", "content": "Good morrow."}, {"role": "user", "content": "Speak as ROMEO."}]
    want = (BOS + START_HEADER + "system" + END_HEADER + "\n\nBe brief." + EOT
            + START_HEADER + "user" + END_HEADER + "\n\nHello" + EOT
            + START_HEADER + "assistant" + END_HEADER + "\n\nGood morrow." + EOT
            + START_HEADER + "user" + END_HEADER + "\n\nSpeak as ROMEO." + EOT
            + START_HEADER + "assistant" + END_HEADER + "\n\n")
    got = ht.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    check(got == want, f"apply_chat_template:\n{got!r}\nexpected\n{want!r}")
    check(render_chat(msgs, True) == want, "render_chat differs from apply_chat_template")
    check(ht.apply_chat_template(msgs[:3], tokenize=False) == want[:want.index(START_HEADER + "user" + END_HEADER
                                                                                 + "\n\nSpeak")],
          "apply_chat_template without generation prompt")
    chat_ids = ht.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
    if isinstance(chat_ids, dict) or hasattr(chat_ids, "keys"):
        chat_ids = chat_ids["input_ids"]
    check(list(chat_ids) == t2.encode(want, add_special_tokens=False).ids and chat_ids[0] == 0
          and chat_ids.count(0) == 1, "chat template tokenization (one BOS, specials as single ids)")
    check(ht.bos_token == BOS and ht.eos_token == EOT and ht("x")["input_ids"][0] == 0, "tokenizer_config tokens")
    log("chat template: transformers apply_chat_template == expected; one BOS; special tokens atomic")


if __name__ == "__main__":
    sys.exit(main())
