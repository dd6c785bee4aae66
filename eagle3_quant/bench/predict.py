"""`bench`'s offline prediction: what `validate` predicts for the same prompts and the same continuations the
engine produced, so the engine's numbers and the prediction stand side by side.

The engine's no-draft greedy outputs are the target's own continuations as vLLM served it. The target runs once
over each prompt + continuation in transformers (calib's `TargetRunner`, at the layers vLLM feeds this draft),
giving the states the draft reads and the target's next tokens; that calibration set goes to `validate_draft`
(data checks only), whose acceptance machinery (``eagle3_quant/runtime/acceptance.py``) does the rest. Chains
start only where the continuation is also transformers' greedy text (``valid_starts``), so the count of such
sequences is reported too.
"""

from __future__ import annotations

from pathlib import Path

import torch

from eagle3_quant.calib.capture import TargetRunner
from eagle3_quant.calib.target import TargetSpec, load_model
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.records.artifact import QuantizedArtifact
from eagle3_quant.records.bench_run import DraftPair, EngineWalk, Prediction
from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter
from eagle3_quant.records.validation_report import WalkMetrics
from eagle3_quant.taps.capture import capture_taps
from eagle3_quant.validate.api import validate_draft
from eagle3_quant.validate.options import ValidateOptions

HOW = ("validate's offline acceptance (eagle3_quant/runtime/acceptance.py) on the engine's no-draft continuations; "
       "the target's states at the layers vLLM feeds, from transformers in {dtype}")


def capture_states(spec: TargetSpec, config: DraftConfig, prompts: list[list[int]], continuations: list[list[int]],
                   folder: Path) -> tuple[Path, int]:
    """A calibration set of prompt + continuation per prompt; and how many continuations are also the target's
    greedy text in transformers."""
    plan = capture_taps(config, spec.num_layers, "vllm")       # every candidate's layers: validate picks vLLM's
    dtype = getattr(torch, spec.dtype)
    runner = TargetRunner(load_model(spec, spec.dtype), plan.indices, dtype)
    info = CalibrationInfo(spec.name, plan.indices, spec.hidden_size, spec.dtype,
                           "bench: the engine's no-draft greedy continuations", plan.record.extra())
    writer = CalibrationWriter(folder, info)
    greedy = 0
    for prompt, continuation in zip(prompts, continuations, strict=True):
        ids = torch.tensor(prompt + continuation, dtype=torch.int64)
        aux, next_ids = runner.forward(ids)
        start = len(prompt)
        greedy += bool((ids[start:] == next_ids[start - 1:-1]).all())
        writer.add(CalibrationSample(ids, aux, next_ids, start))
    writer.close()
    return folder, greedy


def predict(artifact: QuantizedArtifact, reference: DraftCheckpoint, spec: TargetSpec, prompts: list[list[int]],
            continuations: list[list[int]], k: int, device: str | None, scratch: Path) -> Prediction:
    """validate's prediction of both drafts' acceptance on these sequences (its own report stays in `scratch`); the
    artifact and the reference as bench read them."""
    calib, greedy = capture_states(spec, artifact.files.config, prompts, continuations, scratch / "calib")
    options = ValidateOptions(reference=reference.path, calib=calib, report=scratch / "prediction.json",
                              target=spec.name, k=k, device=device, kernel=False, vllm=False, sglang=False)
    metrics = validate_draft(artifact.path, options, artifact=artifact, reference_checkpoint=reference).metrics
    return prediction_of(metrics, spec, greedy, len(prompts), HOW.format(dtype=spec.dtype))


def prediction_of(metrics, spec: TargetSpec, greedy: int, sequences: int, how: str) -> Prediction:
    """A validation report's metrics as bench records its prediction."""
    return Prediction(
        acceptance_length=DraftPair(metrics.acceptance_length_bf16, metrics.acceptance_length_fp8),
        per_position=DraftPair(metrics.per_position_acceptance_bf16, metrics.per_position_acceptance_fp8),
        acceptance_ratio=metrics.acceptance_ratio, interval=metrics.acceptance_ratio_interval,
        method=metrics.acceptance_ratio_method, chains=metrics.drafts, compute_dtype=metrics.compute_dtype,
        device=metrics.device, target_dtype=spec.dtype, engine_walk=_walk(metrics.engine_walk),
        numerics=metrics.prediction_record, greedy_sequences=greedy, sequences=sequences, how=how)


def _walk(walk: WalkMetrics | None) -> EngineWalk | None:
    """The same prediction counted only over the chains vLLM's decoding walk drafts (what the engine counts)."""
    if walk is None:
        return None
    return EngineWalk(walk.acceptance_ratio, walk.acceptance_ratio_interval,
                      DraftPair(walk.acceptance_length_bf16, walk.acceptance_length_fp8),
                      DraftPair(walk.drafts_bf16, walk.drafts_fp8))
