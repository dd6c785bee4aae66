"""`llama-quantize` on a BF16 GGUF: llama.cpp's own rounding to one of its file types, with per-tensor types.

Read in tools/quantize/quantize.cpp and src/llama-quant.cpp: ``--tensor-type NAME=TYPE`` is an ECMAScript regex
searched in the GGUF name (first match wins) and applies only when the file type's default is quantized;
``--output-tensor-type`` sets ``output.weight`` (the draft's lm_head) before any pattern. A row whose length the
type's block does not divide falls back (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, else F16) and says so on stderr:
``warning: NAME - ncols N not divisible by B (required for type T) -> falling back to U``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.engines.llamacpp.process import failure, run_tool
from eagle3_quant.engines.llamacpp.tools import LlamaCppTools
from eagle3_quant.errors import EngineError

TIMEOUT_S = 3600.0
FALLBACK = re.compile(r"warning:\s+(?P<name>\S+)\s+- ncols\s+(?P<ncols>\d+) not divisible by\s+(?P<block>\d+) "
                      r"\(required for type\s+(?P<wanted>\S+)\).*?-> falling back to\s+(?P<got>\S+)")
ERRORS = ("error", "failed", "disabled", "requires")


@dataclass(frozen=True)
class Fallback:
    tensor: str
    columns: int
    block: int
    wanted: str
    got: str

    def describe(self) -> str:
        return (f"{self.tensor}: rows of {self.columns} are no multiple of {self.wanted}'s block of {self.block}: "
                f"{self.got} (llama-quantize's fallback)")


def fallbacks(output: str) -> tuple[Fallback, ...]:
    found = {}
    for match in FALLBACK.finditer(output):
        found[match["name"]] = Fallback(match["name"], int(match["ncols"]), int(match["block"]), match["wanted"],
                                        match["got"])
    return tuple(found.values())


def quantize_gguf(tools: LlamaCppTools, source: Path, out: Path, file_type: str, *,
                  tensor_types: tuple[tuple[str, str], ...] = (), output_type: str | None = None,
                  threads: int | None = None, timeout_s: float = TIMEOUT_S) -> tuple[Fallback, ...]:
    """`source` (BF16) rounded by llama-quantize to `file_type` into `out`; `tensor_types`: (regex, type) pairs, in
    order; returns the fallbacks it reported. `EngineError` with its own error line when it fails."""
    argv: list[str | Path] = [tools.binary("llama-quantize")]
    if output_type:
        argv += ["--output-tensor-type", output_type]
    for pattern, kind in tensor_types:
        argv += ["--tensor-type", f"{pattern}={kind}"]
    argv += [source, out, file_type]
    if threads:
        argv.append(str(threads))
    run = run_tool(argv, tools.env(), timeout_s, "llama-quantize")
    if not run.ok or not out.is_file():
        out.unlink(missing_ok=True)
        raise EngineError(failure(run, "llama-quantize", timeout_s, ERRORS), path=source)
    return fallbacks(run.output)
