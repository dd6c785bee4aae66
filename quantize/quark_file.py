"""Quark 0.13's file-to-file path (PTPC, MX with dynamic MX activations) and the Quark configs of every scheme."""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_quant.errors import QuantizationError
from eagle3_quant.plan import QuantPlan
from eagle3_quant.quantize.quark_import import import_quark, quark_quiet
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.schemes import Scheme, TensorQuantSpec
from eagle3_quant.util.outdir import scratch_beside

MX_SPEC_CLASSES = {"fp4": "OCP_MXFP4Spec", "fp6_e2m3": "OCP_MXFP6E2M3Spec", "fp6_e3m2": "OCP_MXFP6E3M2Spec"}


def _spec(spec: TensorQuantSpec, scale_type: str | None):
    from quark.torch.quantization.config import config as quark_specs
    from quark.torch.quantization.config.config import FP8E4M3PerChannelSpec, FP8E4M3PerTensorSpec

    if spec.mx:   # Quark's own OCP MX spec: group 32 along the input dim, E8M0 scales, half-even rounding
        mx_class = getattr(quark_specs, MX_SPEC_CLASSES[spec.dtype])
        return mx_class(ch_axis=-1, is_dynamic=spec.dynamic).to_quantization_spec()
    extra = {"scale_type": scale_type} if scale_type else {}
    if spec.granularity == "per_channel":
        return FP8E4M3PerChannelSpec(ch_axis=spec.ch_axis, is_dynamic=spec.dynamic, **extra).to_quantization_spec()
    return FP8E4M3PerTensorSpec(observer_method="min_max", is_dynamic=spec.dynamic, **extra).to_quantization_spec()


def quark_config(scheme: Scheme, exclude_modules: list[str], scale_type: str | None = None):
    """`scale_type` None keeps Quark's default (file-to-file writes fp32 scales; in-memory, the model dtype)."""
    from quark.torch.quantization.config.config import QConfig, QLayerConfig

    layer = QLayerConfig(weight=_spec(scheme.weight, scale_type), input_tensors=_spec(scheme.input, scale_type))
    return QConfig(global_quant_config=layer, exclude=exclude_modules)


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
    try:
        with quark_quiet(verbose), scratch_beside(out, "input") as view:
            quantizer.direct_quantize_checkpoint(pretrained_model_path=str(link_checked_files(draft, view)),
                                                 save_path=str(out), device=device)
    except Exception as exc:  # Quark raises many types; surface one typed error naming the source
        raise QuantizationError(f"Quark file-to-file quantization failed: {exc}", path=draft.path) from exc
    sort_index(out)
