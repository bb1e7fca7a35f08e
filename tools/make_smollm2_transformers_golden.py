#!/usr/bin/env python3
"""Makes tests/golden/smollm2/transformers_logits.json: transformers' own GGUF loader as the reference.

transformers reads the GGUF file itself (`from_pretrained(dir, gguf_file=...)`: its gguf integration
dequantizes every tensor with the `gguf` package and undoes the q/k row permutation of llama.cpp's converter),
and runs LlamaForCausalLM in float32 on the CPU. So this is an independent reference for the whole
GGUF -> model path: metadata -> config, tensor names, permutation, dequantization, the forward pass.

For the prompts of tools/make_smollm2_golden.py (token ids taken from tests/golden/smollm2/logits.json, i.e.
llama.cpp's tokenization, which xinfer's tokenizer matches on every corpus item), it writes per position the
top-8 (id, logit) and the logits of the same 64 probe ids, and 32 greedy tokens; plus the ids transformers'
own GGUF tokenizer gives for each prompt text (the Hugging Face tokenizer of this file).

Needs torch, transformers and the `gguf` package (on the GPU machine: carry the gguf wheel):
    python3 tools/make_smollm2_transformers_golden.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --out DIR
"""
import argparse
import json
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama-cpp-golden", default=str(ROOT / "tests" / "golden" / "smollm2" / "logits.json"))
    ap.add_argument("--out", default=str(ROOT / "tests" / "golden" / "smollm2"))
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    gguf_path = pathlib.Path(args.gguf).resolve()
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                 torch_dtype=torch.float32)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)

    golden = json.load(open(args.llama_cpp_golden))
    probe = golden["probe_ids"]
    cases = []
    with torch.no_grad():
        for c in golden["cases"]:
            ids = list(c["ids"])
            hf_ids = tokenizer(c["prompt"], add_special_tokens=False)["input_ids"]
            logits = model(torch.tensor([ids])).logits[0].float().numpy()
            top = np.argsort(-logits, axis=1)[:, :8]
            seq = list(ids)
            greedy = []
            for _ in range(32):
                nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
                greedy.append(nxt)
                seq.append(nxt)
            cases.append({
                "prompt": c["prompt"],
                "ids": ids,
                "hf_tokenizer_ids": hf_ids,
                "top_ids": top.tolist(),
                "top_logits": np.take_along_axis(logits, top, axis=1).round(5).tolist(),
                "probe_logits": logits[:, probe].round(5).tolist(),
                "greedy": greedy,
                "greedy_text": tokenizer.decode(greedy),
            })
            print(f"{c['prompt'][:40]!r}: {len(ids)} ids (hf tokenizer equal: {hf_ids == ids}), "
                  f"greedy {cases[-1]['greedy_text'][:60]!r}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "transformers_logits.json").write_text(json.dumps({
        "source": f"transformers {transformers.__version__} GGUF loader, LlamaForCausalLM float32 on the CPU, "
                  f"torch {torch.__version__}",
        "probe_ids": probe, "cases": cases}) + "\n")


if __name__ == "__main__":
    main()
