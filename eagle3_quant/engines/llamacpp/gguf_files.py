"""GGUF files read and written through llama.cpp's own gguf-py (`gguf_child.py`, in a child process: the gguf-py of
the pinned llama.cpp, which knows ``eagle3`` and every GGML block, never meets the registry's older ``gguf`` that
transformers imports here)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_quant.engines.llamacpp.tools import LlamaCppTools, require_converter
from eagle3_quant.engines.runner import ChildCommand, run_child
from eagle3_quant.errors import DraftFormatError, EngineError

CHILD = Path(__file__).resolve().parent / "gguf_child.py"
TIMEOUT_S = 3600.0
MAGIC = b"GGUF"


@dataclass(frozen=True)
class GgufTensor:
    name: str
    type: str                      # ggml's type name: bf16, q8_0, q4_K, mxfp4, ...
    shape: tuple[int, ...]         # numpy order: [rows, cols] for a weight
    bytes: int


@dataclass(frozen=True)
class GgufFile:
    path: Path
    architecture: str | None
    fields: dict[str, Any]         # metadata; the tokenizer's long lists as {"length", "sha256"}
    tensors: tuple[GgufTensor, ...]

    def field(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def arch_field(self, key: str, default: Any = None) -> Any:
        """``ARCH.key`` (eagle3.target_layers, llama.block_count, ...)."""
        return self.fields.get(f"{self.architecture}.{key}", default)

    def tensor(self, name: str) -> GgufTensor | None:
        return next((t for t in self.tensors if t.name == name), None)

    @property
    def types(self) -> dict[str, str]:
        return {t.name: t.type for t in self.tensors}

    @property
    def vocabulary(self) -> dict | None:
        """The tokenizer's token list, by length and sha256 (two GGUFs of one tokenizer hold the same)."""
        found = self.fields.get("tokenizer.ggml.tokens")
        return found if isinstance(found, dict) else None


def _command(tools: LlamaCppTools) -> ChildCommand:
    require_converter(tools)
    return ChildCommand(sys.executable, CHILD, name="llama.cpp's gguf-py", env={"PYTHONPATH": str(tools.gguf_py)})


def _run(tools: LlamaCppTools, request: dict, path: Path) -> dict:
    run = run_child(_command(tools), request, TIMEOUT_S)
    if not run.ok:
        raise EngineError(run.error or "failed", path=path)
    return run.result or {}


def is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


def describe_gguf(tools: LlamaCppTools, path: str | Path) -> GgufFile:
    """The file's metadata and tensors; `DraftFormatError` naming it when it is no GGUF."""
    path = Path(path)
    if not path.is_file():
        raise DraftFormatError("no such file", path=path)
    if not is_gguf(path):
        raise DraftFormatError("not a GGUF file (its first bytes are not 'GGUF')", path=path)
    found = _run(tools, {"op": "describe", "path": str(path)}, path)
    tensors = tuple(GgufTensor(t["name"], t["type"], tuple(t["shape"]), t["bytes"]) for t in found["tensors"])
    return GgufFile(path, found.get("architecture"), found.get("fields") or {}, tensors)


def dequantize_gguf(tools: LlamaCppTools, path: Path, out: Path, names: list[str] | None = None) -> list[str]:
    """The named tensors (None: all) dequantized by ggml's block formulas into the safetensors file `out`."""
    return _run(tools, {"op": "dequantize", "path": str(path), "names": names, "out": str(out)}, path)["written"]


def replace_tensors(tools: LlamaCppTools, path: Path, out: Path, blocks: Path, types: dict[str, str]) -> dict:
    """`path` copied to `out` with the tensors of `blocks` (raw GGML bytes, [rows, bytes a row]) as `types`; what
    each replaced tensor's dequantized values are next to those it replaced."""
    return _run(tools, {"op": "replace", "path": str(path), "out": str(out), "blocks": str(blocks),
                        "types": types}, path)["compared"]
