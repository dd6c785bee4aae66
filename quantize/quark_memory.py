"""Quark's in-memory path: static input scales (``--scheme fp8``, ``w_mxfp4_a_fp8``, NVFP4's global input scale,
calibrated on what the draft receives), ``--gptq`` (``quantize/gptq.py``) and INT4, whose layout only this path's
export writes as vLLM loads it (Quark's file-to-file path writes [out, groups] scales and no zero points).

The runtime draft wrapped as a transformers model (`Eagle3QuarkModel`), one calibration batch per sample of
the calibration set (the target's aux hidden states, aligned as vLLM feeds them), ``quantize_model`` with
min-max observers, GPTQ's rounding when asked, ``freeze``, ``export_safetensors(custom_mode="quark")``. Each
batch runs `CALIBRATION_STEPS` draft steps from every position, so the input scales (and GPTQ's Hessians) also
cover the steps that read the draft's own hidden state. Tensor names are the source's; config.json is the
source's plus ``quantization_config`` (export would rename ``architectures``; we never let it).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from safetensors import safe_open

from eagle3_quant.errors import QuantizationError
from eagle3_quant.plan import QuantPlan
from eagle3_quant.quantize.calibration import (
    CALIBRATION_STEPS,
    batch_positions,
    calibration_batches,
    calibration_embedding,
    check_calibration,
    counted_forwards,
)
from eagle3_quant.quantize.gptq import GptqRecord, round_with_gptq, rounding_order
from eagle3_quant.quantize.quark_file import quark_config, quark_exclude_modules
from eagle3_quant.quantize.quark_import import import_quark, quark_quiet
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.layout import fused_groups
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.records.public_names import public_name
from eagle3_quant.runtime.serving import serving_numerics
from eagle3_quant.util.progress import SILENT, Progress


@dataclass(frozen=True)
class StaticCalibration:
    calib_path: Path
    samples: int
    tokens: int                      # draft positions seen (each run for CALIBRATION_STEPS steps)
    steps: int
    input_scales: dict[str, float]   # module -> input_scale written
    prediction: dict | None = None   # the numerics the rollout ran in (runtime/serving.py)

    def to_dict(self) -> dict:
        return {**asdict(self), "calib_path": public_name(self.calib_path)}     # published: the name only


def _restore_config(out: Path, source_config: dict) -> None:
    written = json.loads((out / "config.json").read_text())
    config = {k: v for k, v in source_config.items() if k != "quantization_config"}
    config["quantization_config"] = written["quantization_config"]
    (out / "config.json").write_text(json.dumps(config, indent=2, allow_nan=False) + "\n")


def _input_scales(out: Path) -> dict[str, float]:
    scales = {}
    for file in sorted(out.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as fh:
            for name in fh.keys():
                for suffix in (".input_scale", ".input_scale_2"):      # NVFP4: the global input scale
                    if name.endswith(suffix):
                        scales[name.removesuffix(suffix)] = float(fh.get_tensor(name).float().max())
    return dict(sorted(scales.items()))


@dataclass(frozen=True)
class InMemoryResult:
    calibration: StaticCalibration | None    # static input scales (None for dynamic inputs)
    gptq: GptqRecord | None


def run_in_memory(draft: DraftCheckpoint, plan: QuantPlan, calib_path: Path | None, out_dir: Path, device: str,
                  verbose: bool = False, gptq: bool = False, taps: tuple[int, ...] | None = None,
                  progress: Progress = SILENT) -> InMemoryResult:
    """`calib_path` None: a weight-only scheme rounded to nearest (INT4), which runs no forward. Quark's static
    calibration and GPTQ's rollouts are counted on `progress` in samples."""
    from transformers import PretrainedConfig

    from eagle3_quant.quantize.quark_model import Eagle3QuarkModel
    from eagle3_quant.runtime.loading import load_draft

    # the layers the artifact is served with
    calib = check_calibration(draft, load_calibration(calib_path), taps) if calib_path is not None else None
    # the source's dtype (Quark writes the model's unquantized tensors in it): vLLM's bf16 for bf16 sources
    runtime = load_draft(draft.path, device=device,
                         embedding=calibration_embedding(draft, calib) if calib is not None else None)
    prediction = serving_numerics(draft.config.torch_dtype).record(runtime.dtype)
    batches = calibration_batches(calib, device) if calib is not None else []
    static = plan.scheme.static_input
    model = Eagle3QuarkModel(PretrainedConfig.from_dict(dict(draft.config.raw)), runtime, CALIBRATION_STEPS)
    quark = import_quark(verbose)
    # INT4 scales in the model's dtype: vLLM's QuarkW4A16Int4 holds them in it (float32 would be rounded at load)
    scale_type = None if plan.scheme.weight.kind == "int4" else "float32"
    shared = [list(roles) for roles in fused_groups(draft.config).values()]
    quantizer = quark.ModelQuantizer(quark_config(plan.scheme, quark_exclude_modules(draft, plan), scale_type, shared))
    rounding = None
    try:
        with quark_quiet(verbose):
            # dynamic inputs: the observers see the weights only, one batch runs the prepared model once; a
            # weight-only scheme runs none
            data = batches if static else batches[:1] if plan.scheme.input.quantized else None
            with counted_forwards(model, progress if static else SILENT, "Quark: static input scales", len(batches)):
                model = quantizer.quantize_model(model, data or None)
            if gptq:
                rounding = round_with_gptq(model, rounding_order(draft, plan), batches, CALIBRATION_STEPS,
                                           runtime.dtype if scale_type is None else None, progress)
            model = quantizer.freeze(model)
            quark.export_safetensors(model, str(out_dir), custom_mode="quark")
    except Exception as exc:  # Quark raises many types; surface one typed error naming the source
        what = "GPTQ" if gptq else plan.scheme.name
        raise QuantizationError(f"Quark {what} quantization failed: {exc}", path=draft.path) from exc
    _restore_config(out_dir, dict(draft.config.raw))
    calibration = None
    if static:
        calibration = StaticCalibration(Path(calib_path), len(batches), batch_positions(batches), CALIBRATION_STEPS,
                                        _input_scales(out_dir), prediction)
    return InMemoryResult(calibration, replace(rounding, prediction=prediction) if rounding is not None else None)
