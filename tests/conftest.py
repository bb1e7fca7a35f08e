"""Shared pytest fixtures: where the built binaries and the shared data live."""
import os
import pathlib

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
