"""The compressed-tensors package decompresses what `xinfer quantize` writes to the weights our numpy reader
(tools/quantize_numpy_reference.py, written from the format's definitions) gets: for every directory given,
transformers' compressed-tensors integration (CompressedTensorsConfig(run_compressed=False): the package's
ModelCompressor.decompress_model) decompresses the checkpoint into a float LlamaForCausalLM, and every decompressed linear weight must equal numpy's within
float32 rounding of scale * (q - zero). Needs torch and the compressed-tensors wheel (GPU machine; runs on
its CPU). With a kv_cache_scheme (--kv-cache-scheme fp8), the package must also have loaded every
self_attn.k_scale / v_scale with our values (what vLLM reads). Prints one JSON line per directory and exits 1 on
any mismatch.

    python3 tests/gpu/check_compressed_tensors.py DIR [DIR ...]
"""
import json
import pathlib
import sys

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import quantize_numpy_reference as ref  # noqa: E402


def decompress_with_package(d: pathlib.Path):
    """The package's decompression as transformers drives it (compressed-tensors 0.20: ModelCompressor built
    from a CompressedTensorsConfig, decompress_model() after loading the compressed parameters)."""
    import compressed_tensors
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    try:
        model = AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32, quantization_config=CompressedTensorsConfig(run_compressed=False))
    except Exception:  # older transformers: no run_compressed; decompress by hand
        from compressed_tensors.compressors import ModelCompressor
        from compressed_tensors.quantization import QuantizationConfig

        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        cfg = json.loads((d / "config.json").read_text())["quantization_config"]
        ModelCompressor(quantization_config=QuantizationConfig.model_validate(cfg)).decompress_model(model)
    return {k: v.detach().to(torch.float64).numpy() for k, v in model.state_dict().items()}, compressed_tensors.__version__


def main() -> int:
    bad = 0
    for arg in sys.argv[1:]:
        d = pathlib.Path(arg)
        ck = ref.Checkpoint(d)
        try:
            got, version = decompress_with_package(d)
        except Exception as e:  # report and go on with the other directories
            print(json.dumps({"dir": d.name, "error": f"{type(e).__name__}: {e}"}))
            bad += 1
            continue
        worst, worst_name = 0.0, ""
        for module in sorted(ck.quantized):
            key = module + ".weight"
            want = ck.w[key]
            diff = float(np.abs(got[key] - want).max() / max(np.abs(want).max(), 1e-30))
            if diff > worst:
                worst, worst_name = diff, key
        kv = {k: v for k, v in ck.w.items() if k.endswith(("self_attn.k_scale", "self_attn.v_scale"))}
        kv_diff = max((float(np.abs(np.ravel(got[k]) - np.ravel(v)).max() / np.abs(v).max()) if k in got else float("inf")
                       for k, v in kv.items()), default=0.0)
        ok = worst <= 1e-6 and (len(ck.quantized) > 0 or len(kv) > 0) and kv_diff <= 1e-6
        bad += not ok
        print(json.dumps({"dir": d.name, "format": ck.q["format"], "modules": len(ck.quantized),
                          "max_rel_diff": worst, "worst": worst_name, "kv_scales": len(kv), "kv_max_rel_diff": kv_diff,
                          "ok": ok, "compressed_tensors": version}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
