"""The commands the benchmark runs, each in a fresh child process."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

COPY_CODE = "import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2])"
IMPORT_CODE = "import time; t = time.perf_counter(); import quark.torch; print(time.perf_counter() - t)"
INSPECT_IMPORTS_CODE = ("import sys; from eagle3_quant.cli import main\n"
                        "try:\n    main(['inspect', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
                        "print({m: m in sys.modules for m in ('torch', 'quark.torch', 'transformers')})")

CONTENDERS = ("eagle3-quant", "bare Quark", "copy")


def eagle3_quant_bin() -> str:
    beside = Path(PYTHON).parent / "eagle3-quant"
    found = str(beside) if beside.exists() else shutil.which("eagle3-quant")
    if not found:
        raise SystemExit("eagle3-quant is not installed next to this python: run `make setup`")
    return found


def quark_exclude_list(src: Path) -> list[str]:
    """The exact exclude list eagle3-quant hands Quark (fc, lm_head, embeddings, ...), so both run one config."""
    from eagle3_quant.plan import make_plan
    from eagle3_quant.quantize.quark_file import quark_exclude_modules
    from eagle3_quant.reading.draft import read_draft
    from eagle3_quant.schemes import DEFAULT_SCHEME, get_scheme

    draft = read_draft(src)
    return quark_exclude_modules(draft, make_plan(draft, get_scheme(DEFAULT_SCHEME), None, False))


def contender_command(name: str, src: Path, out: Path, exclude: list[str]) -> list[str]:
    if name == "eagle3-quant":
        return [eagle3_quant_bin(), "quantize", str(src), str(out), "--device", "cpu"]
    if name == "bare Quark":
        return [PYTHON, str(REPO / "benchmarks" / "bare_quark.py"), str(src), str(out), *exclude]
    if name == "copy":
        return [PYTHON, "-c", COPY_CODE, str(src), str(out)]
    raise ValueError(f"unknown contender {name!r}; valid: {', '.join(CONTENDERS)}")


def breakdown_command(src: Path, out: Path) -> list[str]:
    return [PYTHON, "-m", "benchmarks.breakdown", str(src), str(out)]


def throughput_command(bf16: Path, fp8: Path) -> list[str]:
    return [PYTHON, "-m", "benchmarks.throughput", str(bf16), str(fp8)]


def parse_last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])
