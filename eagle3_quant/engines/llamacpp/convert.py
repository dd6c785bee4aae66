"""llama.cpp's converter on a staged draft folder or a target folder: one GGUF file, or one line saying why not.

The converter runs in this Python (it imports torch and transformers) through `convert_entry.py`; its lines that
explain a refusal (a ``ValueError``, "Can not map tensor", an unrecognised pre-tokenizer) become the error.
"""

from __future__ import annotations

import sys
from pathlib import Path

from eagle3_quant.engines.llamacpp.process import failure, run_tool
from eagle3_quant.engines.llamacpp.tools import LlamaCppTools, require_converter
from eagle3_quant.errors import EngineError

ENTRY = Path(__file__).resolve().parent / "convert_entry.py"
TIMEOUT_S = 3600.0
REFUSALS = ("Error:", "Error(", "Can not map tensor", "not recognized", "not supported", "requires",
            "out of range", "duplicate")
OUTTYPES = ("bf16", "f16", "f32")


def convert(tools: LlamaCppTools, model: Path, out_file: Path, *, target_dir: Path | None = None,
            outtype: str = "bf16", pre_tokenizer: str | None = None, timeout_s: float = TIMEOUT_S,
            where: Path | None = None) -> float:
    """Convert `model` (a draft, with `target_dir` for its tokenizer and target config; or a target) into
    `out_file`; returns the seconds it took. `EngineError` naming the converter's own reason when it refuses (and
    `where`, the folder the user gave, else `model`)."""
    converter = require_converter(tools)
    if outtype not in OUTTYPES:
        raise ValueError(f"outtype {outtype!r} is not one of {OUTTYPES}")
    args = [str(model), "--outtype", outtype, "--outfile", str(out_file)]
    if target_dir is not None:
        args += ["--target-model-dir", str(target_dir)]
    env = {**tools.env(), "PYTHONUNBUFFERED": "1"}
    env.pop("NO_LOCAL_GGUF", None)
    run = run_tool([sys.executable, ENTRY, converter.parent, pre_tokenizer or "-", "--", *args], env, timeout_s,
                   "llama.cpp's converter")
    if not run.ok or not out_file.is_file():
        out_file.unlink(missing_ok=True)
        hint = ("pass --pre-tokenizer with the pre-tokenizer llama.cpp should use for this tokenizer (e.g. gpt-2)"
                if "pre-tokenizer was not recognized" in run.output else None)
        raise EngineError(failure(run, "llama.cpp's converter", timeout_s, REFUSALS), path=where or model, hint=hint)
    return run.seconds
