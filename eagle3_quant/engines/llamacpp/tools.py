"""Where llama.cpp's tools are, and which build they are.

One lookup order, for every verb that runs llama.cpp (`gguf`, `bench --engine llamacpp`, `validate` of a GGUF):

1. ``--llamacpp PATH``, else
2. the environment variable ``EAGLE3_QUANT_LLAMACPP``, else
3. the project's own environment, ``.venv-llamacpp`` in the checkout (``make setup-llamacpp``).

PATH is either such an environment (llama-cpp-python built with llama.cpp's tools, its ``llama.cpp-src`` folder
holding the converter and gguf-py from the same sdist) or a llama.cpp source checkout with a CMake build in
``build/`` (``build/bin/llama-server``; a ROCm, CUDA or Metal build works the same way).

The binaries of the pip build carry no RPATH: they run with ``LD_LIBRARY_PATH`` naming the libraries' folders
(`LlamaCppTools.env`). Every ``LLAMA_ARG_*`` variable is removed from a tool's environment: llama.cpp reads them
before its flags, and some (``LLAMA_ARG_DRAFT_MAX``) stop it starting (common/arg.cpp).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from eagle3_quant.errors import EngineNotFoundError

ENV_VAR = "EAGLE3_QUANT_LLAMACPP"
PROJECT_ENV = ".venv-llamacpp"
CHECKOUT = Path(__file__).resolve().parents[3]
SOURCE_DIR = "llama.cpp-src"                  # in the environment: the sdist's converter and gguf-py
STAMP_NAME = "eagle3-quant-llamacpp.json"     # in the environment: what was built, from which sdist
SETUP_HINT = f"run `make setup-llamacpp`, or pass --llamacpp PATH (or set {ENV_VAR})"
TOOLS = ("llama-server", "llama-quantize", "llama-bench")
# `llama-server --version` (common/arg.cpp, build-info.cpp.in): "version: 0.5.0-dev (build 1, commit 0c1e570)"
VERSION_LINE = re.compile(r"version:\s*(?P<version>\S+)\s*\(build (?P<build>\d+), commit (?P<commit>[^)\s]+)\)")
BUILT_LINE = re.compile(r"built with (?P<compiler>.+?) for (?P<target>.+)")
DROPPED_VARS = ("LLAMA_SERVER_ROUTER_PORT", "LLAMA_SERVER_CHILD_MODE", "LLAMA_TRACE")


@dataclass(frozen=True)
class LlamaCppBuild:
    """What `llama-server --version` says of itself."""

    version: str            # "0.5.0-dev"
    build: int              # LLAMA_BUILD_NUMBER
    commit: str             # LLAMA_COMMIT
    compiler: str
    target: str

    @property
    def build_info(self) -> str:
        """llama.cpp's own spelling (/props `build_info`): b<build>-<commit>."""
        return f"b{self.build}-{self.commit}"

    def to_dict(self) -> dict:
        return {"version": self.version, "build": self.build, "commit": self.commit, "build_info": self.build_info,
                "compiler": self.compiler, "target": self.target}


@dataclass(frozen=True)
class LlamaCppTools:
    root: Path                      # the environment or checkout given
    bin_dir: Path
    lib_dirs: tuple[Path, ...]
    source: Path                    # holds convert_hf_to_gguf.py, conversion/ and gguf-py/
    origin: str                     # where the choice came from, in words
    package: str | None = None      # "llama-cpp-python 0.3.36" for the project's build

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    @property
    def converter(self) -> Path:
        return self.source / "convert_hf_to_gguf.py"

    @property
    def gguf_py(self) -> Path:
        return self.source / "gguf-py"

    def env(self) -> dict[str, str]:
        """The environment every llama.cpp tool runs with: its libraries found, no LLAMA_ARG_* settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_") and k not in DROPPED_VARS}
        libraries = [str(d) for d in self.lib_dirs] + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
        env["LD_LIBRARY_PATH"] = ":".join(libraries)
        return env

    @cached_property
    def build(self) -> LlamaCppBuild:
        try:
            done = subprocess.run([str(self.binary("llama-server")), "--version"], capture_output=True, text=True,
                                  env=self.env(), timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineNotFoundError(f"llama-server does not run: {exc}", path=self.binary("llama-server"),
                                      hint=SETUP_HINT) from None
        text = done.stderr + done.stdout
        found, built = VERSION_LINE.search(text), BUILT_LINE.search(text)
        if done.returncode != 0 or found is None:
            last = (text.strip().splitlines() or ["no output"])[-1]
            raise EngineNotFoundError(f"llama-server --version failed: {last}", path=self.binary("llama-server"),
                                      hint=SETUP_HINT)
        return LlamaCppBuild(found["version"], int(found["build"]), found["commit"],
                             built["compiler"].strip() if built else "unknown",
                             built["target"].strip() if built else "unknown")

    def describe(self) -> str:
        made = f" ({self.package})" if self.package else ""
        return f"llama.cpp {self.build.build_info}{made}"


def project_root() -> Path:
    return CHECKOUT / PROJECT_ENV


def _site_packages(env: Path) -> Path | None:
    found = sorted((env / "lib").glob("python3*/site-packages"))
    return found[-1] if found else None


def _package_version(site: Path) -> str | None:
    found = sorted(site.glob("llama_cpp_python-*.dist-info"))
    return found[-1].name.removeprefix("llama_cpp_python-").removesuffix(".dist-info") if found else None


def tools_in_environment(root: Path, origin: str) -> LlamaCppTools | None:
    site = _site_packages(root)
    if site is None or not (site / "bin" / "llama-server").is_file():
        return None
    version = _package_version(site)
    return LlamaCppTools(root, site / "bin", (site / "lib", site / "llama_cpp" / "lib"), root / SOURCE_DIR, origin,
                         f"llama-cpp-python {version}" if version else None)


def _from_checkout(root: Path, origin: str) -> LlamaCppTools | None:
    for build in ("build/bin", "bin"):
        if (root / build / "llama-server").is_file():
            return LlamaCppTools(root, root / build, (root / build,), root, origin)
    return None


def _usable(root: Path, origin: str) -> LlamaCppTools:
    root = root.expanduser().absolute()
    tools = tools_in_environment(root, origin) or _from_checkout(root, origin)
    if tools is None:
        raise EngineNotFoundError(f"no llama.cpp tools in the folder from {origin} (neither an environment made by "
                                  "`make setup-llamacpp` nor a llama.cpp checkout with build/bin/llama-server)",
                                  path=root, hint=SETUP_HINT)
    missing = [name for name in TOOLS if not os.access(tools.binary(name), os.X_OK)]
    if missing:
        raise EngineNotFoundError(f"llama.cpp's {', '.join(missing)} missing from {tools.bin_dir}", path=root,
                                  hint=SETUP_HINT)
    return tools


def find_tools(flag: str | Path | None = None) -> LlamaCppTools:
    """llama.cpp's tools in the order of the module docstring; `EngineNotFoundError` (one line naming
    `make setup-llamacpp` and `--llamacpp`) when there are none."""
    if flag:
        return _usable(Path(flag), "--llamacpp")
    if os.environ.get(ENV_VAR):
        return _usable(Path(os.environ[ENV_VAR]), ENV_VAR)
    own = project_root()
    if own.exists():
        return _usable(own, f"the project's {PROJECT_ENV} (make setup-llamacpp)")
    raise EngineNotFoundError(f"no llama.cpp tools: {PROJECT_ENV} does not exist and neither --llamacpp nor "
                              f"{ENV_VAR} is set", hint=SETUP_HINT)


def require_converter(tools: LlamaCppTools) -> Path:
    """llama.cpp's converter beside its gguf-py; refused, naming the folder, when the tools came without it."""
    if not tools.converter.is_file() or not (tools.gguf_py / "gguf").is_dir():
        raise EngineNotFoundError("llama.cpp's converter (convert_hf_to_gguf.py with gguf-py beside it) is not "
                                  "there", path=tools.source, hint=SETUP_HINT)
    return tools.converter
