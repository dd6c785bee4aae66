"""The same FP8 artifact bytes from every device: Quark's weights and scales as its CPU run computes them.

Quark's FP8 weight rule (its observer and ``quant_fp8_e4m3_with_scale``, float32 scales)::

    weight_scale = amax(|w|) as fp32 / 448          # per output channel (PTPC) or per tensor
    weight_fp8   = clamp(w / weight_scale in w's dtype, -448, 448) -> float8_e4m3fn

On a CPU ``/ 448`` is a true division. CUDA divides a tensor by a Python scalar by multiplying with its reciprocal,
one fp32 ulp off in about 60% of the rows; the FP8 codes move only where that ulp survives the scale's rounding to
the weight's dtype. After a run on a GPU, :func:`match_cpu_bits` recomputes both tensors on the CPU from the
source and rewrites the files where they differ, after checking that the difference is only that ulp.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from eagle3_quant.errors import QuantizationError
from eagle3_quant.plan import QuantPlan
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.runtime.fp8 import FP8_DTYPE, FP8_MAX

ZERO_SCALE = torch.finfo(torch.float32).eps        # Quark's observer eps: the scale of an all-zero row


def cpu_fp8_weight(weight: torch.Tensor, per_channel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight_fp8 [N, K], weight_scale fp32 [N] or [1]) of a float weight, as Quark computes them on a CPU."""
    weight = weight.cpu()
    amax = weight.abs().amax(dim=1) if per_channel else weight.abs().amax().reshape(1)
    scale = amax.to(torch.float32) / FP8_MAX
    scale = scale.masked_fill(scale == 0.0, ZERO_SCALE)
    codes = (weight / scale.to(weight.dtype).reshape(-1, 1)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return codes, scale


def match_cpu_bits(draft: DraftCheckpoint, out: Path, plan: QuantPlan) -> list[str]:
    """Rewrite OUT's FP8 weights and scales that differ from the CPU rule; the names of the tensors rewritten.

    Raises QuantizationError when a written scale is more than one fp32 ulp from the rule, or FP8 codes differ in a
    row whose scale agrees: that is not the device's rounding but another computation."""
    per_channel = plan.scheme.weight.granularity == "per_channel"
    changed: dict[Path, dict[str, torch.Tensor]] = {}
    for decision in plan.quantized:
        module = decision.module
        info = draft.checkpoint.tensors[module + ".weight"]
        with safe_open(str(info.file), framework="pt") as fh:
            codes, scale = cpu_fp8_weight(fh.get_tensor(info.name), per_channel)
        file = _file_holding(out, module + ".weight")
        with safe_open(str(file), framework="pt") as fh:
            written_codes, written_scale = fh.get_tensor(module + ".weight"), fh.get_tensor(module + ".weight_scale")
        scale = scale.reshape(written_scale.shape).to(written_scale.dtype)
        _check_rounding_only(module, written_scale, scale, written_codes, codes, out)
        if not torch.equal(written_scale, scale):
            changed.setdefault(file, {})[module + ".weight_scale"] = scale
        if not torch.equal(written_codes.view(torch.uint8), codes.view(torch.uint8)):
            changed.setdefault(file, {})[module + ".weight"] = codes
    for file, tensors in changed.items():
        _rewrite(file, tensors)
    return sorted(name for tensors in changed.values() for name in tensors)


def _check_rounding_only(module: str, written_scale: torch.Tensor, scale: torch.Tensor, written_codes: torch.Tensor,
                         codes: torch.Tensor, out: Path) -> None:
    up, down = torch.nextafter(scale, torch.full_like(scale, float("inf"))), \
        torch.nextafter(scale, torch.zeros_like(scale))
    if not bool(((written_scale >= down) & (written_scale <= up)).all()):
        raise QuantizationError("Quark's scale is more than one fp32 ulp from amax / 448", path=out,
                                tensor=module + ".weight_scale")
    rows_moved = (written_codes.view(torch.uint8) != codes.view(torch.uint8)).any(dim=1)
    scale_moved = (written_scale != scale).reshape(-1).expand(rows_moved.shape[0])
    if bool((rows_moved & ~scale_moved).any()):
        raise QuantizationError("Quark's FP8 codes differ from the CPU rule in rows whose scale agrees", path=out,
                                tensor=module + ".weight")


def _file_holding(out: Path, name: str) -> Path:
    for file in sorted(out.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as fh:
            if name in fh.keys():
                return file
    raise QuantizationError("missing from the output", path=out, tensor=name)


def _rewrite(file: Path, replaced: dict[str, torch.Tensor]) -> None:
    with safe_open(str(file), framework="pt") as fh:
        metadata = fh.metadata()
        tensors = {name: replaced.get(name, fh.get_tensor(name)) for name in fh.keys()}
    partial = file.with_name(file.name + ".partial")
    save_file(tensors, str(partial), metadata=metadata)
    os.replace(partial, file)
