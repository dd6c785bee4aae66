"""Build llama.cpp's tools from the package registry into their own environment (``make setup-llamacpp``).

``python -m eagle3_quant.engines.llamacpp.build ENV [SPEC]``: pip builds the pinned ``llama-cpp-python`` sdist, which
vendors llama.cpp, with llama.cpp's tools and server switched on (`CMAKE_ARGS`, after any the caller set: a
``-DGGML_HIP=ON`` or ``-DGGML_CUDA=ON`` of yours is kept). pip's wheel cache keeps the built wheel, so a second
environment installs in seconds; a cached wheel built without the tools is rebuilt once, bypassing the cache. The
converter and gguf-py come from the same sdist (``pip download``, pip's HTTP cache) into ``ENV/llama.cpp-src``.
Idempotent: an environment whose stamp names the same sdist and whose tools run is left as it is.

A missing compiler or CMake is one line naming what to install, exit status 2, before anything is built.
Without ``-DLLAVA_BUILD=OFF`` CMake stops: the bindings and llama.cpp's tools both add ``tools/mtmd``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from eagle3_quant.engines.llamacpp.tools import SOURCE_DIR, STAMP_NAME, TOOLS, tools_in_environment
from eagle3_quant.errors import Eagle3QuantError, EngineNotFoundError

SPEC = "llama-cpp-python==0.3.36"
CMAKE_ARGS = ("-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_TOOLS_INSTALL=ON "
              "-DLLAMA_USE_PREBUILT_UI=OFF")
# what the converter needs of the sdist: the script, its model classes, the gguf-py it imports, the license
SOURCE_PARTS = ("convert_hf_to_gguf.py", "conversion", "gguf-py", "LICENSE")


def missing_toolchain(environ: dict[str, str] | None = None) -> str | None:
    """What a build cannot start without (None: a C and a C++ compiler and CMake are on PATH)."""
    environ = os.environ if environ is None else environ
    missing = []
    for variable, names in (("CC", ("cc", "gcc", "clang")), ("CXX", ("c++", "g++", "clang++"))):
        wanted = [environ[variable].split()[0]] if environ.get(variable) else list(names)
        if not any(shutil.which(name, path=environ.get("PATH")) for name in wanted):
            missing.append(f"a {'C' if variable == 'CC' else 'C++'} compiler ({' or '.join(wanted)})")
    if not shutil.which("cmake", path=environ.get("PATH")):
        missing.append("CMake >= 3.21 (cmake)")
    if not missing:
        return None
    return (f"building llama.cpp needs {' and '.join(missing)} on PATH: install them (Debian/Ubuntu: apt install "
            "build-essential cmake; macOS: xcode-select --install and brew install cmake), then run make "
            "setup-llamacpp again")


def _pip(env: Path, *args: str, extra_env: dict[str, str] | None = None) -> None:
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", *args], check=True,
                   env={**os.environ, **(extra_env or {})})


def _stamp(env: Path) -> dict:
    try:
        return json.loads((env / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return {}


def _tools_run(env: Path) -> bool:
    tools = tools_in_environment(env, "build")
    if tools is None or not all(os.access(tools.binary(name), os.X_OK) for name in TOOLS):
        return False
    try:
        tools.build  # noqa: B018 - runs llama-server --version
    except Eagle3QuantError:
        return False
    return True


def build_env(spec: str = SPEC) -> dict[str, str]:
    args = " ".join(x for x in (os.environ.get("CMAKE_ARGS", ""), CMAKE_ARGS) if x)
    return {"CMAKE_ARGS": args, "CMAKE_BUILD_PARALLEL_LEVEL": os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL")
            or str(os.cpu_count() or 1)}


def _install(env: Path, spec: str) -> None:
    _pip(env, "install", "-q", spec, extra_env=build_env(spec))
    if not _tools_run(env):
        print(f"{spec}: the installed wheel holds no llama.cpp tools (a wheel cached from a build without them): "
              "building once more, past pip's cache", file=sys.stderr)
        _pip(env, "install", "-q", "--no-cache-dir", "--force-reinstall", "--no-deps", spec,
             extra_env=build_env(spec))


def _fetch_source(env: Path, spec: str) -> tuple[str, str]:
    """The sdist's converter and gguf-py into ENV/llama.cpp-src; (sdist file name, its sha256)."""
    with tempfile.TemporaryDirectory(prefix="e3q-llamacpp-") as tmp:
        _pip(env, "download", "-q", "--no-deps", "--no-binary", ":all:", spec, "-d", tmp)
        sdist = next(Path(tmp).glob("*.tar.gz"))
        digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
        target = env / SOURCE_DIR
        staging = env / f".{SOURCE_DIR}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        with tarfile.open(sdist) as archive:
            root = archive.getnames()[0].split("/")[0]
            prefix = f"{root}/vendor/llama.cpp/"
            members = [m for m in archive.getmembers() if m.name.startswith(prefix)
                       and m.name[len(prefix):].split("/")[0] in SOURCE_PARTS and (m.isfile() or m.isdir())]
            for member in members:
                member.name = member.name[len(prefix):]
            archive.extractall(staging, members=members, filter="data")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        return sdist.name, digest


def build(env: Path, spec: str = SPEC) -> dict:
    """Build (or keep) the environment; returns its stamp."""
    env = env.absolute()
    stamp = _stamp(env)
    if stamp.get("spec") == spec and _tools_run(env) and (env / SOURCE_DIR / "convert_hf_to_gguf.py").is_file():
        return stamp
    problem = missing_toolchain()
    if problem:
        raise EngineNotFoundError(problem)
    started = time.monotonic()
    if not (env / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    _install(env, spec)
    sdist, digest = _fetch_source(env, spec)
    tools = tools_in_environment(env, "build")
    stamp = {"spec": spec, "sdist": sdist, "sdist_sha256": digest, "cmake_args": build_env(spec)["CMAKE_ARGS"],
             "llama_cpp": tools.build.to_dict() if tools else None, "seconds": round(time.monotonic() - started, 1)}
    (env / STAMP_NAME).write_text(json.dumps(stamp, indent=2, allow_nan=False) + "\n")
    return stamp


def main(argv: list[str]) -> int:
    env, spec = Path(argv[0]), argv[1] if len(argv) > 1 else SPEC
    try:
        stamp = build(env, spec)
    except Eagle3QuantError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except subprocess.CalledProcessError as exc:
        print(f"error: {' '.join(map(str, exc.cmd[:4]))} ... failed (exit status {exc.returncode}); its output is "
              "above", file=sys.stderr)
        return 2
    built = stamp.get("llama_cpp") or {}
    print(f"llama.cpp {built.get('build_info', '?')} from {stamp['sdist']} in {env} "
          f"({stamp.get('seconds', 0):.0f} s when built)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
