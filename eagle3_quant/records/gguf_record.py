"""The manifest's record of a GGUF draft (`eagle3-quant gguf`): its file, type, how it was made and with which
llama.cpp, the target layers written, every tensor's GGML type, what stayed BF16 and why, llama-quantize's
fallbacks, and for carried blocks the proof that they dequantize to the Quark artifact's values."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eagle3_quant.errors import ManifestError


@dataclass(frozen=True)
class GgufTensorRecord:
    type: str                             # ggml's name: bf16, q8_0, q4_K, mxfp4, f32, i64, ...
    shape: list[int]                      # [rows, cols] (numpy order)
    source: str | None                    # the checkpoint tensor it was made from (None: made by the converter)


@dataclass(frozen=True)
class GgufRecord:
    file: str                             # the GGUF file in OUT
    type: str                             # --type: bf16, q8_0, ...
    label: str                            # llama.cpp's spelling: Q8_0, ...
    made_by: str                          # in words: the converter, llama-quantize FILE_TYPE, carried from ...
    llama_cpp: dict[str, Any]             # build_info, version, commit, package
    target: str                           # the target its tokenizer and config came from (public name)
    taps: dict[str, Any]                  # taps/llamacpp.py LlamaCppTaps.to_dict()
    tensors: dict[str, GgufTensorRecord]  # GGUF name -> type, shape, source
    kept: dict[str, str]                  # GGUF name -> why it stayed BF16
    fallbacks: list[str] = field(default_factory=list)   # llama-quantize's fallbacks, one line each
    carried: dict[str, Any] | None = None  # {"scheme", "tensors", "equal", "max_abs_diff"}
    pre_tokenizer: str | None = None      # --pre-tokenizer, when given

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def type_of(self, name: str) -> str | None:
        row = self.tensors.get(name)
        return row.type if row else None

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> GgufRecord:
        if not isinstance(data, dict) or not isinstance(data.get("file"), str):
            raise ManifestError("not an object naming its GGUF file", path=path, field="gguf")
        try:
            tensors = {str(name): GgufTensorRecord(str(row["type"]), [int(x) for x in row["shape"]],
                                                   None if row.get("source") is None else str(row["source"]))
                       for name, row in (data.get("tensors") or {}).items()}
            values = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "tensors"}
            record = cls(**values, tensors=tensors)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ManifestError(f"incomplete ({exc!r})", path=path, field="gguf") from None
        for key in ("type", "label", "made_by", "target"):
            if not isinstance(getattr(record, key), str):
                raise ManifestError("is not text", path=path, field=f"gguf.{key}")
        for key in ("llama_cpp", "taps", "kept"):
            if not isinstance(getattr(record, key), dict):
                raise ManifestError("is not an object", path=path, field=f"gguf.{key}")
        if Path(record.file).name != record.file:
            raise ManifestError(f"{record.file!r} is not a file name", path=path, field="gguf.file")
        return record
