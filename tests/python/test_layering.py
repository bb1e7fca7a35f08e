"""The layering of ARCHITECTURE.md, enforced: a file under src/xinfer/<layer>/ includes only xinfer headers of
its own layer or of layers below it, and only the engine names the concrete backends (backend/cpu,
backend/cuda), which it links privately.

Layers, bottom-up (one line of ARCHITECTURE.md's table a rank; a layer may use those of lower rank and,
where listed in SAME_RANK_USES, one of its own rank):
  core < tokenizer, quant < kv_cache, scheduler < backend < model < compress, engine < server, cli
(compress/: calibration and quantization search run the model, so they sit above model/, beside the engine)
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "xinfer"

RANK = {"core": 0, "tokenizer": 1, "quant": 1, "kv_cache": 2, "scheduler": 2, "backend": 3, "model": 4,
        "compress": 5, "engine": 5, "server": 6, "cli": 6}
SAME_RANK_USES = {("scheduler", "kv_cache"), ("cli", "server")}
CONCRETE_BACKENDS = ("backend/cpu/", "backend/cuda/")
INCLUDE = re.compile(r'^\s*#\s*include\s+"xinfer/([^"]+)"', re.M)


def layer_of(rel: str) -> str:
    return rel.split("/", 1)[0]


def violations():
    out = []
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu", ".cuh"):
            continue
        rel = path.relative_to(SRC).as_posix()
        own = layer_of(rel)
        for inc in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            dep = layer_of(inc)
            if dep not in RANK:
                out.append(f"{rel}: includes xinfer/{inc}, whose folder is not a layer of ARCHITECTURE.md")
                continue
            if dep != own and not (RANK[dep] < RANK[own] or (own, dep) in SAME_RANK_USES):
                out.append(f"{rel}: layer '{own}' includes xinfer/{inc} of layer '{dep}' (not below it)")
            if inc.startswith(CONCRETE_BACKENDS) and own not in ("engine", "backend"):
                out.append(f"{rel}: names a concrete backend (xinfer/{inc}); only engine/ may")
            if own == "backend" and inc.startswith(CONCRETE_BACKENDS):
                this_backend = rel.split("/")[1] if rel.count("/") >= 2 else ""
                if not inc.startswith(f"backend/{this_backend}/"):
                    out.append(f"{rel}: one backend includes another's header xinfer/{inc}")
    return out


def test_every_include_respects_the_layers():
    assert len(list(SRC.rglob("*.cpp"))) > 50, f"no sources under {SRC}"
    bad = violations()
    assert not bad, "layering violations:\n" + "\n".join(bad)


def test_concrete_backends_are_private_to_the_engine():
    engine_cmake = (SRC / "engine" / "CMakeLists.txt").read_text()
    assert re.search(r"PRIVATE_DEPS[^)]*xinfer_backend_cpu", engine_cmake), engine_cmake
    assert "PUBLIC xinfer_backend_cuda" not in engine_cmake
    for layer in ("server", "cli"):
        cmake = (SRC / layer / "CMakeLists.txt").read_text()
        assert "xinfer_backend_cpu" not in cmake and "xinfer_backend_cuda" not in cmake, layer


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    # A test that cannot fail is worse than none: plant an upward include and see it reported.
    fake = tmp_path / "xinfer"
    (fake / "core").mkdir(parents=True)
    (fake / "core" / "bad.h").write_text('#include "xinfer/engine/engine.h"\n')
    (fake / "server").mkdir()
    (fake / "server" / "worse.cpp").write_text('#include "xinfer/backend/cpu/cpu_backend.h"\n')
    monkeypatch.setattr(__import__(__name__), "SRC", fake)
    bad = violations()
    assert any("core/bad.h" in b for b in bad) and any("server/worse.cpp" in b for b in bad), bad
