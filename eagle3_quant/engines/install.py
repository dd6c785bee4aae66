"""Install a serving engine's pure-Python wheel and its import-time deps into this venv, all ``--no-deps``.

``python -m eagle3_quant.engines.install ENGINE==VERSION DEP==VERSION ...``: the engine is installed at
exactly its version; a dep is installed only when no version of it is installed yet, so the torch and
transformers already here are never touched and a dep another engine's setup installed (``make setup-vllm``)
is kept. The versions chosen are ones both vLLM 0.33 and SGLang 0.5.23 import with (see the Makefile).
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

NEVER = {"torch", "transformers"}


def _name(spec: str) -> str:
    return spec.split("==")[0].strip().lower().replace("_", "-")


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def to_install(engine: str, deps: list[str]) -> list[str]:
    wanted = [] if _installed(_name(engine)) == engine.partition("==")[2] else [engine]
    return wanted + [d for d in deps if _name(d) not in NEVER and _installed(_name(d)) is None]


def main(argv: list[str]) -> int:
    engine, *deps = argv
    todo = to_install(engine, deps)
    if not todo:
        print(f"{engine} and its deps are installed")
        return 0
    print("installing (--no-deps): " + " ".join(todo))
    return subprocess.call([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *todo])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
