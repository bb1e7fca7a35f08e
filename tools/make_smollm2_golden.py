#!/usr/bin/env python3
"""Makes tests/golden/smollm2/ with llama.cpp (llama-cpp-python) as the reference, on the SmolLM2 GGUF.

Writes:
  tokenizer_ids.json.gz  for every item of tests/python/tokenizer_corpus.py (the tokenizer conformance corpus,
                         >= 10,000 lines built from ../shared's corpora plus generated hard cases, made valid
                         UTF-8 as the reference tokenizers see it): the first 16 hex digits of the sha256 of
                         llama.cpp's ids (no BOS, special tokens parsed), and the ids themselves for the
                         generated hard cases (no corpus text is stored, only hashes of its ids).
  logits.json            prompt logits of llama.cpp (f32 compute) for a few prompts: for every position the
                         top-8 (id, logit) and the logits of a fixed set of 64 ids, plus 32 greedy tokens.

llama-cpp-python is built from source by pip (minutes on 2 cores); it is a tool for making this golden and a
benchmark peer, not a test dependency:
    python3 -m pip install llama-cpp-python
    python3 tools/make_smollm2_golden.py --gguf "$(scripts/fetch_smollm2.sh)"
"""
import argparse
import gzip
import hashlib
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))
import tokenizer_corpus  # noqa: E402

PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, there was a little robot who",
    "The quick brown fox jumps over the lazy dog. In 1492, Columbus",
]
PROBE_IDS = list(range(0, 49152, 768))  # 64 fixed ids spread over the vocabulary


def ids_hash(ids):
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def specials_of(path):
    """The control tokens (token_type 3) of the file, as the gguf package reads them."""
    import gguf

    fields = gguf.GGUFReader(path).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    types = fields["tokenizer.ggml.token_type"].contents()
    return [t for t, ty in zip(tokens, types) if ty == 3]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "golden" / "smollm2"))
    args = ap.parse_args()
    from llama_cpp import Llama

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    vocab = Llama(model_path=args.gguf, vocab_only=True, verbose=False)
    specials = specials_of(args.gguf)
    items = tokenizer_corpus.build_corpus(pathlib.Path(args.shared), specials)
    n_real = 5500  # build_corpus puts the 5,500 lines of shared text first, then the generated ones
    rows = []
    for i, b in enumerate(items):
        text = tokenizer_corpus.as_text(b)
        ids = vocab.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        row = {"hash": ids_hash(ids), "n": len(ids)}
        if i >= n_real and len(ids) <= 64:
            row["ids"] = ids
        rows.append(row)
    with gzip.open(out / "tokenizer_ids.json.gz", "wt") as f:
        json.dump({"source": "llama-cpp-python tokenize(add_bos=False, special=True)", "specials": specials,
                   "items": rows}, f, separators=(",", ":"))
    print(f"tokenizer: {len(rows)} items, {len(specials)} special tokens")

    llm = Llama(model_path=args.gguf, n_ctx=512, logits_all=True, n_threads=2, verbose=False, seed=0)
    cases = []
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
        top = np.argsort(-logits, axis=1)[:, :8]
        greedy = []
        for _ in range(32):
            nxt = int(np.argmax(np.array(llm.scores[llm.n_tokens - 1])))
            greedy.append(nxt)
            llm.eval([nxt])
        cases.append({
            "prompt": prompt,
            "ids": ids,
            "top_ids": top.tolist(),
            "top_logits": np.take_along_axis(logits, top, axis=1).round(4).tolist(),
            "probe_logits": logits[:, PROBE_IDS].round(4).tolist(),
            "greedy": greedy,
            "greedy_text": llm.detokenize(greedy).decode("utf-8", errors="replace"),
        })
        print(f"{prompt[:40]!r}: {len(ids)} ids, greedy {cases[-1]['greedy_text'][:60]!r}")
    (out / "logits.json").write_text(json.dumps({"source": "llama-cpp-python eval, logits_all", "probe_ids":
                                                 PROBE_IDS, "cases": cases}, indent=None) + "\n")


if __name__ == "__main__":
    main()
