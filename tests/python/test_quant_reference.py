"""quant/'s dequantization vs the `gguf` package (ggml's Python port) on fresh data and on the real SmolLM2
GGUF file, and the int / fp8 formats vs numpy written from their published definitions.

tools/make_quant_golden.py writes the cases (another seed and more elements than the committed
tests/golden/quant, plus the first rows of each quantized tensor type of the model file); the C++ gtest
QuantGolden.* (tests/unit/quant/quant_golden_test.cpp) dequantizes them with xinfer and compares.
"""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = pathlib.Path(os.path.expanduser("~/.cache/xinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.fixture(scope="module")
def quant_test(build_dir) -> pathlib.Path:
    path = build_dir / "tests" / "unit" / "quant" / "quant_test"
    if not path.exists():
        pytest.fail(f"{path} not built (target quant_test)")
    return path


def run_golden(quant_test, golden_dir):
    env = dict(os.environ, XINFER_QUANT_GOLDEN_DIR=str(golden_dir), XINFER_SOURCE_DIR=str(ROOT))
    r = subprocess.run([str(quant_test), "--gtest_filter=QuantGolden.*"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "[  PASSED  ] 1 test" in r.stdout, r.stdout[-2000:]


def make_golden(out, *extra):
    subprocess.run([sys.executable, str(ROOT / "tools/make_quant_golden.py"), "--out", str(out), *extra],
                   check=True, capture_output=True)


@pytest.mark.parametrize("seed", [7, 8])
def test_dequantize_matches_gguf_and_numpy_on_fresh_data(tmp_path, quant_test, seed):
    make_golden(tmp_path, "--seed", str(seed), "--elems", "4096")
    run_golden(quant_test, tmp_path)


def test_dequantize_matches_gguf_on_the_real_model_file(tmp_path, quant_test):
    if not MODEL.exists():
        pytest.skip(f"{MODEL} missing: scripts/fetch_smollm2.sh fetches it")
    make_golden(tmp_path, "--elems", "256", "--model", str(MODEL), "--model-rows", "64")
    manifest = (tmp_path / "manifest.txt").read_text()
    assert "real_q4_1" in manifest and "real_q8_0" in manifest, manifest
    run_golden(quant_test, tmp_path)


def test_a_corrupted_golden_is_caught(tmp_path, quant_test):
    """The comparison can fail: flip one quant byte of one case and the gtest must report it."""
    make_golden(tmp_path, "--elems", "256")
    raw = bytearray((tmp_path / "q4_1.bin").read_bytes())
    raw[10] ^= 0x11  # quants of block 0 (past d and m)
    (tmp_path / "q4_1.bin").write_bytes(bytes(raw))
    env = dict(os.environ, XINFER_QUANT_GOLDEN_DIR=str(tmp_path))
    r = subprocess.run([str(quant_test), "--gtest_filter=QuantGolden.*"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "q4_1" in r.stdout, r.stdout[-2000:]


def test_numpy_int_reference_is_self_consistent(tmp_path):
    """The numpy int4 reference packs element 2j in the low nibble (weight_format.h), checked by unpacking."""
    make_golden(tmp_path, "--elems", "256")
    packed = np.frombuffer((tmp_path / "int4_g32.weight").read_bytes(), np.uint8).reshape(5, 128)
    scales = np.frombuffer((tmp_path / "int4_g32.scales").read_bytes(), np.float32).reshape(5, 8)
    want = np.frombuffer((tmp_path / "int4_g32.f32").read_bytes(), np.float32).reshape(5, 256)
    q = np.empty((5, 256), np.float32)
    q[:, 0::2] = packed & 15
    q[:, 1::2] = packed >> 4
    np.testing.assert_array_equal(np.repeat(scales, 32, axis=1) * (q - 8), want)
