"""The dump formats `calibrate --from-dump` reads (no heavy imports: the CLI's options name them)."""

from __future__ import annotations

from enum import StrEnum


class DumpFormat(StrEnum):
    auto = "auto"
    calibration = "calibration"     # this project's format (calib.json + shards)
    specforge = "specforge"         # SpecForge's data_*.ckpt
    vllm = "vllm"                   # vLLM extract_hidden_states: {request_id}.safetensors
    speculators = "speculators"     # speculators generate-offline-data: hs_{i}.safetensors


ENGINE_FORMATS = (DumpFormat.vllm, DumpFormat.speculators)
