"""Quark 0.13's file-to-file path (dynamic-activation schemes) and the Quark configs of every scheme."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from eagle3_quant.errors import QuantizationError
from eagle3_quant.plan import QuantPlan
from eagle3_quant.quantize.quark_import import import_quark, quark_quiet
from eagle3_quant.quantize.quark_mxfp8 import mxfp8_export
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.schemes import Scheme, TensorQuantSpec
from eagle3_quant.util.outdir import scratch_beside

MX_SPEC_CLASSES = {"fp4": "OCP_MXFP4Spec", "fp6_e2m3": "OCP_MXFP6E2M3Spec", "fp6_e3m2": "OCP_MXFP6E3M2Spec",
                   "fp8_e4m3": "OCP_MXFP8E4M3Spec"}


def _nvfp4_spec(spec: TensorQuantSpec):
    """Quark's NVFP4 (its ``nvfp4`` template, ``FP4Block16ScaleE4M3Scheme``): FP4 per group of 16 with float32
    scales, those scales quantized to FP8 E4M3 with one static per-tensor scale (the global scale)."""
    from quark.torch.quantization.config.config import FP4PerGroupSpec, FP8E4M3PerTensorSpec, ScaleQuantSpec

    return ScaleQuantSpec(
        first_stage=FP4PerGroupSpec(ch_axis=-1, group_size=spec.group_size, is_dynamic=spec.dynamic,
                                    scale_type="float32"),
        second_stage=FP8E4M3PerTensorSpec(observer_method="min_max", is_dynamic=False, scale_type="float32"),
    ).to_quantization_spec()


def _spec(spec: TensorQuantSpec, scale_type: str | None):
    from quark.torch.quantization.config import config as quark_specs
    from quark.torch.quantization.config.config import (
        FP8E4M3PerChannelSpec,
        FP8E4M3PerTensorSpec,
        Int8PerChannelSpec,
        Uint4PerGroupSpec,
    )

    if not spec.quantized:
        return None
    if spec.mx:   # Quark's own OCP MX spec: group 32 along the input dim, E8M0 scales, half-even rounding
        mx_class = getattr(quark_specs, MX_SPEC_CLASSES[spec.dtype])
        return mx_class(ch_axis=-1, is_dynamic=spec.dynamic).to_quantization_spec()
    if spec.nvfp4:
        return _nvfp4_spec(spec)
    extra = {"scale_type": scale_type} if scale_type else {}
    if spec.dtype == "uint4":
        return Uint4PerGroupSpec(ch_axis=-1, group_size=spec.group_size, symmetric=spec.symmetric,
                                 is_dynamic=False).to_quantization_spec()
    if spec.dtype == "int8":
        return Int8PerChannelSpec(ch_axis=spec.ch_axis, symmetric=True, is_dynamic=spec.dynamic,
                                  **extra).to_quantization_spec()
    if spec.granularity == "per_channel":
        return FP8E4M3PerChannelSpec(ch_axis=spec.ch_axis, is_dynamic=spec.dynamic, **extra).to_quantization_spec()
    return FP8E4M3PerTensorSpec(observer_method="min_max", is_dynamic=spec.dynamic, **extra).to_quantization_spec()


def quark_config(scheme: Scheme, exclude_modules: list[str], scale_type: str | None = None,
                 shared_scales: list[list[str]] | None = None):
    """`scale_type` None keeps Quark's default (file-to-file writes fp32 scales; in-memory, the model dtype).
    `shared_scales`: NVFP4's fused shards (vLLM keeps one global scale a fused layer), as Quark's nvfp4 template
    shares them (``shared_scale_groups``)."""
    from quark.torch.quantization.config.config import QConfig, QLayerConfig

    layer = QLayerConfig(weight=_spec(scheme.weight, scale_type), input_tensors=_spec(scheme.input, scale_type))
    shared = {"shared_scale_groups": shared_scales} if scheme.weight.nvfp4 and shared_scales else {}
    return QConfig(global_quant_config=layer, exclude=exclude_modules, **shared)


def quark_exclude_modules(draft: DraftCheckpoint, plan: QuantPlan) -> list[str]:
    """Every 2-D `.weight` module Quark must leave alone: excluded linears, embeddings, unknown extras.

    Quark's file-to-file path quantizes any 2-D weight not excluded by name, so we name them all.
    """
    keep = {d.module for d in plan.quantized}
    return sorted(name.removesuffix(".weight") for name, info in draft.checkpoint.tensors.items()
                  if name.endswith(".weight") and len(info.shape) >= 2 and name.removesuffix(".weight") not in keep)


def link_checked_files(draft: DraftCheckpoint, folder: Path) -> Path:
    """Fill `folder` with links to the checked config, shards and index only.

    Quark's file-to-file walks its input recursively for `*.safetensors` and copies every other file and
    subfolder (pickles included) into the output; given this folder it sees only what was checked.
    """
    files = [draft.path / "config.json", *draft.checkpoint.weight_files]
    for path in files:
        (folder / path.name).symlink_to(path.resolve())
    if draft.checkpoint.index_file is not None:
        (folder / "model.safetensors.index.json").symlink_to(draft.checkpoint.index_file.resolve())
    return folder


def sort_index(out: Path) -> None:
    """Quark lists the weight map in the order the filesystem lists shards: sort it (byte-identical reruns)."""
    path = out / "model.safetensors.index.json"
    if path.exists():
        index = json.loads(path.read_text())
        index["weight_map"] = dict(sorted(index["weight_map"].items()))
        path.write_text(json.dumps(index, indent=4, allow_nan=False) + "\n")


def run_file_to_file(draft: DraftCheckpoint, plan: QuantPlan, out: Path, device: str, verbose: bool = False) -> None:
    ModelQuantizer = import_quark(verbose).ModelQuantizer
    config = quark_config(plan.scheme, quark_exclude_modules(draft, plan))
    quantizer = ModelQuantizer(config)
    mxfp8 = mxfp8_export() if plan.scheme.mx and plan.scheme.weight.dtype == "fp8_e4m3" else contextlib.nullcontext()
    try:
        with quark_quiet(verbose), scratch_beside(out, "input") as view, mxfp8:
            quantizer.direct_quantize_checkpoint(pretrained_model_path=str(link_checked_files(draft, view)),
                                                 save_path=str(out), device=device)
    except Exception as exc:  # Quark raises many types; surface one typed error naming the source
        raise QuantizationError(f"Quark file-to-file quantization failed: {exc}", path=draft.path) from exc
    sort_index(out)
