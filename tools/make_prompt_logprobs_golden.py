#!/usr/bin/env python3
"""Makes tests/golden/smollm2/prompt_logprobs.json: llama.cpp's prompt log-probabilities on the SmolLM2 GGUF.

For a few lm-eval-style (context, continuation) texts, llama-cpp-python evaluates the whole text once with
logits_all=True; for every prompt position p >= 1 the golden holds log_softmax(logits[p - 1])[ids[p]] (float64
log-sum-exp over the full vocabulary of llama.cpp's f32 logits), the rank of ids[p] (1 + ids with a larger
logit) and the top-5 (id, logprob). The ids are llama.cpp's tokenization of the text (no BOS: SmolLM2's
tokenizer adds none; special tokens parsed), equal to xinfer's (tests/golden/smollm2/tokenizer_ids.json.gz).
`ctx_len` is the token count of the context alone (lm-eval's split: encode(context + continuation) past
encode(context)).

llama-cpp-python is a tool for making goldens, not a test dependency:
    python3 -m pip install llama-cpp-python
    python3 tools/make_prompt_logprobs_golden.py --gguf "$(scripts/fetch_smollm2.sh)"
"""
import argparse
import json
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (context, continuation) as lm-eval's loglikelihood tasks send them (multiple-choice style and cloze style).
PAIRS = [
    ("Question: What is the capital of France?\nAnswer:", " Paris"),
    ("Question: What is the capital of France?\nAnswer:", " Berlin"),
    ("The quick brown fox jumps over the lazy", " dog."),
    ("Once upon a time, there was a little robot who loved to", " paint pictures of the sea."),
    ("<|im_start|>user\nName a primary colour.<|im_end|>\n<|im_start|>assistant\n", "Red"),
]
TOP = 5


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch_smollm2.sh)")
    ap.add_argument("--out", default=str(ROOT / "tests/golden/smollm2/prompt_logprobs.json"))
    args = ap.parse_args()
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=args.gguf, n_ctx=512, logits_all=True, n_threads=2, verbose=False, seed=0)
    cases = []
    for context, continuation in PAIRS:
        ids = llm.tokenize((context + continuation).encode(), add_bos=False, special=True)
        ctx_ids = llm.tokenize(context.encode(), add_bos=False, special=True)
        assert ids[:len(ctx_ids)] == ctx_ids, (context, continuation)
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[: len(ids)], dtype=np.float64)
        m = logits.max(axis=1, keepdims=True)
        logprobs = logits - (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))
        rows = []
        for p in range(1, len(ids)):
            row = logprobs[p - 1]
            top = np.argsort(-logits[p - 1], kind="stable")[:TOP]
            rows.append({"logprob": round(float(row[ids[p]]), 6),
                         "rank": int((logits[p - 1] > logits[p - 1][ids[p]]).sum()) + 1,
                         "top_ids": top.tolist(), "top_logprobs": [round(float(row[t]), 6) for t in top]})
        cases.append({"context": context, "continuation": continuation, "ids": ids, "ctx_len": len(ctx_ids),
                      "positions": rows})
        cont = sum(r["logprob"] for r in rows[len(ctx_ids) - 1:])
        print(f"{context[:40]!r} + {continuation!r}: {len(ids)} ids, continuation logprob {cont:.4f}")
    out = {"source": f"llama-cpp-python {llama_cpp.__version__} eval, logits_all (f32 logits, f64 log-softmax)",
           "gguf": pathlib.Path(args.gguf).name, "top": TOP, "cases": cases}
    pathlib.Path(args.out).write_text(json.dumps(out, indent=None) + "\n")


if __name__ == "__main__":
    main()
