"""Static FP8 (``--scheme fp8``): per-tensor weight and input scales calibrated on what the draft receives.

Quark's in-memory path: the runtime draft wrapped as a transformers model (`Eagle3QuarkModel`), one
calibration batch per sample of the calibration set (the target's aux hidden states, aligned as vLLM
feeds them), ``quantize_model`` with min-max observers, ``freeze``, ``export_safetensors(custom_mode=
"quark")``. Each batch runs `CALIBRATION_STEPS` draft steps from every position, so the input scales also
cover the steps that read the draft's own hidden state. Tensor names are the source's; config.json is the
source's plus ``quantization_config`` (export would rename ``architectures``; we never let it).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from eagle3_quant.calib.format import load_calibration
from eagle3_quant.quantize.calibration import (
    CALIBRATION_STEPS,
    calibration_batches,
    calibration_embedding,
    check_calibration,
)
from eagle3_quant.quantize.quark_file import quark_config, quark_exclude_modules
from eagle3_quant.quantize.quark_import import import_quark, quark_quiet
from safetensors import safe_open

from eagle3_quant.errors import QuantizationError
from eagle3_quant.plan import QuantPlan
from eagle3_quant.reading.draft import DraftCheckpoint


@dataclass(frozen=True)
class StaticCalibration:
    calib_path: Path
    samples: int
    tokens: int                      # draft positions seen (each run for CALIBRATION_STEPS steps)
    steps: int
    input_scales: dict[str, float]   # module -> input_scale written

    def to_dict(self) -> dict:
        return {**asdict(self), "calib_path": str(self.calib_path)}


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
                if name.endswith(".input_scale"):
                    scales[name.removesuffix(".input_scale")] = float(fh.get_tensor(name).float().max())
    return dict(sorted(scales.items()))


def run_static_fp8(draft: DraftCheckpoint, plan: QuantPlan, calib_path: Path, out_dir: Path, device: str,
                   verbose: bool = False) -> StaticCalibration:
    from eagle3_quant.quantize.quark_model import Eagle3QuarkModel
    from transformers import PretrainedConfig

    from eagle3_quant.runtime.loading import load_draft

    calib = load_calibration(calib_path)
    check_calibration(draft, calib)
    runtime = load_draft(draft.path, device=device, embedding=calibration_embedding(draft, calib))
    batches = calibration_batches(calib, device)
    model = Eagle3QuarkModel(PretrainedConfig.from_dict(dict(draft.config.raw)), runtime, CALIBRATION_STEPS)
    quark = import_quark(verbose)
    quantizer = quark.ModelQuantizer(quark_config(plan.scheme, quark_exclude_modules(draft, plan), "float32"))
    try:
        with quark_quiet(verbose):
            model = quantizer.quantize_model(model, batches)
            model = quantizer.freeze(model)
            quark.export_safetensors(model, str(out_dir), custom_mode="quark")
    except Exception as exc:  # Quark raises many types; surface one typed error naming the source
        raise QuantizationError(f"Quark static FP8 quantization failed: {exc}", path=draft.path) from exc
    _restore_config(out_dir, dict(draft.config.raw))
    tokens = sum(int(b["input_ids"].numel()) for b in batches)
    return StaticCalibration(Path(calib_path), len(batches), tokens, CALIBRATION_STEPS, _input_scales(out_dir))
