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

import torch
from eagle3_quant.calib.format import CalibrationSet, load_calibration
from eagle3_quant.quantize.plan import QuantPlan
from eagle3_quant.quantize.quark_file import quark_config, quark_exclude_modules
from eagle3_quant.quantize.quark_import import import_quark, quark_quiet
from safetensors import safe_open

from eagle3_quant.draft import DraftCheckpoint
from eagle3_quant.errors import DraftFormatError, Eagle3QuantError, QuantizationError
from eagle3_quant.layout import EMBEDDING_NAMES

CALIBRATION_STEPS = 3     # vLLM's usual num_speculative_tokens for Eagle3 drafts


@dataclass(frozen=True)
class StaticCalibration:
    calib_path: Path
    samples: int
    tokens: int                      # draft positions seen (each run for CALIBRATION_STEPS steps)
    steps: int
    input_scales: dict[str, float]   # module -> input_scale written

    def to_dict(self) -> dict:
        return {**asdict(self), "calib_path": str(self.calib_path)}


def check_calibration(draft: DraftCheckpoint, calib: CalibrationSet) -> None:
    if calib.info.target_hidden_size != draft.config.target_hidden_size:
        raise DraftFormatError(f"calibration hidden states are {calib.info.target_hidden_size} wide per layer, the "
                               f"draft's fc expects target_hidden_size {draft.config.target_hidden_size}",
                               path=calib.path, field="info.target_hidden_size")
    if calib.num_samples == 0:
        raise DraftFormatError("the calibration set holds no samples", path=calib.path)


def calibration_embedding(draft: DraftCheckpoint, calib: CalibrationSet) -> torch.Tensor | None:
    """None when the draft has its own embedding; else the target's, found through the set's info.target."""
    if any(name in draft.checkpoint.tensors for name in EMBEDDING_NAMES):
        return None
    from eagle3_quant.runtime.embedding import read_target_embedding

    try:
        return read_target_embedding(calib.info.target)
    except Eagle3QuantError as exc:
        raise DraftFormatError(f"the draft has no embedding and the target's could not be read ({exc.message})",
                               path=calib.path, field="info.target",
                               hint="the calibration set must name the target's folder or Hub id") from exc


def calibration_batches(calib: CalibrationSet, device: str | torch.device) -> list[dict[str, torch.Tensor]]:
    from eagle3_quant.runtime.drafting import draft_inputs

    batches = []
    for sample in calib.samples():
        if sample.input_ids.numel() < 2:
            continue
        ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
        batches.append({"input_ids": ids.to(device), "aux_hidden_states": aux.to(device)})
    return batches


def _restore_config(out: Path, source_config: dict) -> None:
    written = json.loads((out / "config.json").read_text())
    config = {k: v for k, v in source_config.items() if k != "quantization_config"}
    config["quantization_config"] = written["quantization_config"]
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


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
