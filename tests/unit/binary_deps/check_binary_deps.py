#!/usr/bin/env python3
"""Fails when an executable of the build needs a shared library that a bare GPU machine lacks (issue 19).

A GPU machine has the NVIDIA driver and the CUDA runtime libraries and nothing else we can count on: not
ICU, PCRE2, OpenBLAS, gfortran or a matching libstdc++. With XINFER_STATIC_DEPS=ON (the cuda-release preset)
every executable the build produces (the `xinfer` and `xinfer-bench` binaries, the benchmarks, the unit and
GPU test binaries) must list in its dynamic section (`readelf -d`, binutils) only libraries of the allowlist
below. libstdc++ and libgcc_s are not on it: -static-libstdc++ -static-libgcc link them in, so a binary
built with a newer GCC than the GPU machine's runs there too.

usage: check_binary_deps.py BUILD_DIR   (walks BUILD_DIR for ELF executables, skipping CMakeFiles/)
"""
import os
import re
import subprocess
import sys

# glibc's own libraries (present on every Linux machine, backward compatible) and NVIDIA's.
ALLOWED = [
    r"libc\.so\.6",
    r"libm\.so\.6",
    r"libpthread\.so\.0",
    r"libdl\.so\.2",
    r"librt\.so\.1",
    r"ld-linux-x86-64\.so\.2",
    r"libcuda\.so(\.\d+)*",
    r"libcudart\.so(\.\d+)*",
    r"libcublas\.so(\.\d+)*",
    r"libcublasLt\.so(\.\d+)*",
    r"libnccl\.so(\.\d+)*",
    r"libnvidia-ml\.so(\.\d+)*",
]
ALLOWED_RE = re.compile("^(" + "|".join(ALLOWED) + ")$")
# The binaries users run: the check fails if the walk did not find them (a wrong build dir would pass).
REQUIRED = ["src/xinfer/cli/xinfer"]


def is_elf_executable(path):
    if not os.path.isfile(path) or os.path.islink(path) or not os.access(path, os.X_OK):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def needed_libraries(path):
    out = subprocess.run(["readelf", "-d", "-W", path], check=True, capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def find_executables(build_dir):
    found = []
    for root, dirs, files in os.walk(build_dir):
        dirs[:] = sorted(d for d in dirs if d != "CMakeFiles" and not d.startswith("."))
        for name in sorted(files):
            path = os.path.join(root, name)
            if name.endswith((".so", ".a", ".o")) or ".so." in name:
                continue
            if is_elf_executable(path):
                found.append(path)
    return found


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    build_dir = os.path.abspath(argv[1])
    executables = find_executables(build_dir)
    relative = {os.path.relpath(p, build_dir) for p in executables}
    missing = [r for r in REQUIRED if r not in relative]
    if missing:
        print(f"FAIL: not built under {build_dir}: {missing}")
        return 1
    bad = 0
    for path in executables:
        libs = needed_libraries(path)
        outside = [lib for lib in libs if not ALLOWED_RE.match(lib)]
        rel = os.path.relpath(path, build_dir)
        if outside:
            bad += 1
            print(f"FAIL {rel}: needs {', '.join(outside)} (all NEEDED: {', '.join(libs)})")
        else:
            print(f"ok   {rel}: {', '.join(libs)}")
    print(f"{len(executables)} executables checked, {bad} with libraries outside the allowlist")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
