"""Self-verifying export: reload what was written and compare it with the source and the plan."""

from __future__ import annotations

from pathlib import Path

import torch
from eagle3_quant.quantize.plan import QuantPlan
from safetensors import safe_open

from eagle3_quant.checkpoint import read_checkpoint
from eagle3_quant.draft import DraftCheckpoint
from eagle3_quant.errors import QuantizationError
from eagle3_quant.safetensors_header import TensorInfo, read_header

CHUNK = 8 * 1024 * 1024


def same_bytes(a: TensorInfo, b: TensorInfo) -> bool:
    if a.nbytes != b.nbytes:
        return False
    start_a, start_b = read_header(a.file).data_start, read_header(b.file).data_start
    with a.file.open("rb") as fa, b.file.open("rb") as fb:
        fa.seek(start_a + a.data_offsets[0])
        fb.seek(start_b + b.data_offsets[0])
        left = a.nbytes
        while left:
            n = min(CHUNK, left)
            if fa.read(n) != fb.read(n):
                return False
            left -= n
    return True


def _load(info: TensorInfo) -> torch.Tensor:
    with safe_open(str(info.file), framework="pt") as fh:
        return fh.get_tensor(info.name)


def _check_scale(info: TensorInfo | None, name: str, shape: tuple[int, ...], where: Path) -> None:
    if info is None:
        raise QuantizationError("missing from the output", path=where, tensor=name)
    if info.dtype != "F32" or info.shape not in (shape, ()):
        raise QuantizationError(f"expected F32 {list(shape)}, got {info.dtype} {list(info.shape)}", path=where,
                                tensor=name)
    scale = _load(info)
    if not bool(torch.isfinite(scale).all()) or not bool((scale > 0).all()):
        raise QuantizationError("scale is not finite and positive everywhere", path=where, tensor=name)


def verify_export(draft: DraftCheckpoint, out: Path, plan: QuantPlan) -> int:
    """Raise QuantizationError on any difference from the plan; returns the number of tensors checked."""
    written = read_checkpoint(out).tensors
    quantized = {d.module: d for d in plan.quantized}
    expected_new = set()
    for name, src_info in draft.checkpoint.tensors.items():
        out_info = written.get(name)
        if out_info is None:
            raise QuantizationError("dropped from the output", path=out, tensor=name)
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module in quantized:
            if out_info.dtype != "F8_E4M3" or out_info.shape != src_info.shape:
                raise QuantizationError(f"expected F8_E4M3 {list(src_info.shape)}, got {out_info.dtype} "
                                        f"{list(out_info.shape)}", path=out, tensor=name)
            per_channel = plan.scheme.weight.granularity == "per_channel"
            _check_scale(written.get(module + ".weight_scale"), module + ".weight_scale",
                         (src_info.shape[0],) if per_channel else (1,), out)
            expected_new.add(module + ".weight_scale")
            if not plan.scheme.input.dynamic:
                _check_scale(written.get(module + ".input_scale"), module + ".input_scale", (1,), out)
                expected_new.add(module + ".input_scale")
        elif out_info.dtype != src_info.dtype or out_info.shape != src_info.shape or not same_bytes(src_info,
                                                                                                     out_info):
            raise QuantizationError("should be copied unchanged but differs from the source", path=out,
                                    tensor=name)
    unexpected = sorted(set(written) - set(draft.checkpoint.tensors) - expected_new)
    if unexpected:
        raise QuantizationError(f"unexpected tensors in the output: {', '.join(unexpected[:5])}", path=out)
    return len(written)
