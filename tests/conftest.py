"""Shared pytest fixtures: where the built binaries and the shared data live."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("XINFER_BUILD_DIR", ROOT / "build" / "cpu-release"))


@pytest.fixture(scope="session")
def xinfer_bin(build_dir) -> pathlib.Path:
    path = build_dir / "src" / "xinfer" / "cli" / "xinfer"
    if not path.exists():
        pytest.fail(f"{path} not built: run scripts/test.sh (or cmake --build --preset cpu-release)")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    if not SHARED.exists():
        pytest.fail(f"{SHARED} missing: tests need ../shared beside the checkout")
    return SHARED


@pytest.fixture(scope="session")
def stories260k_dir(tmp_path_factory, shared_dir) -> pathlib.Path:
    """../shared/models/stories260K converted to a Hugging Face directory by tools/convert_llama2c.py, once
    per test session. Tests that modify it must work on a copy."""
    out = tmp_path_factory.mktemp("stories") / "stories260K"
    src = shared_dir / "models/stories260K"
    subprocess.run([sys.executable, str(ROOT / "tools/convert_llama2c.py"), "--checkpoint", str(src / "stories260K.bin"),
                    "--tokenizer", str(src / "tok512.bin"), "--out", str(out)], check=True, capture_output=True)
    return out
