"""The on-disk calibration set: what the draft really receives from its target.

Folder layout::

    CAL/calib.json                 index: format, version, info, shards (written after each shard: resumable)
    CAL/shard-00000.safetensors    per sample i: input_ids.{i} int64 [T],
                                   aux_hidden_states.{i} bf16/fp16/fp32 [T, 3*H_target],
                                   target_next_ids.{i} int64 [T]

Alignment (the Eagle3 convention vLLM uses): ``aux_hidden_states[t]`` are the target's hidden states at
position t (after reading tokens 0..t) at the draft's three layer taps, concatenated low/mid/high;
``target_next_ids[t]`` is the target's greedy (argmax) prediction for position t+1. A draft step at
position t reads ``aux_hidden_states[t]`` and the embedding of ``input_ids[t+1]`` and predicts the token
at t+2, to be compared with ``target_next_ids[t+1]``. Where a sample is the target's own greedy
continuation, ``input_ids[t+1] == target_next_ids[t]``; ``generated_from`` gives the first such position.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from eagle3_quant.errors import DraftFormatError

CALIB_FORMAT = "eagle3-quant-calibration"
CALIB_VERSION = 1
INDEX_NAME = "calib.json"


@dataclass(frozen=True)
class CalibrationInfo:
    target: str                       # target model path or repo id
    aux_layer_ids: tuple[int, ...]    # hidden_states indices: "input of layer k" (0 = embeddings)
    target_hidden_size: int
    dtype: str = "bfloat16"
    source: str = ""                  # dataset or engine that produced the prompts / states
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CalibrationSample:
    input_ids: torch.Tensor          # int64 [T]
    aux_hidden_states: torch.Tensor  # [T, 3*H_target]
    target_next_ids: torch.Tensor    # int64 [T]
    generated_from: int | None = None


@dataclass(frozen=True)
class CalibrationSet:
    path: Path
    info: CalibrationInfo
    shards: tuple[dict, ...]

    @property
    def num_samples(self) -> int:
        return sum(len(s["samples"]) for s in self.shards)

    @property
    def num_tokens(self) -> int:
        return sum(s["tokens"] for s in self.shards)

    def samples(self) -> Iterator[CalibrationSample]:
        for shard in self.shards:
            with safe_open(str(self.path / shard["file"]), framework="pt") as fh:
                for i, generated_from in zip(shard["samples"], shard["generated_from"], strict=True):
                    yield CalibrationSample(fh.get_tensor(f"input_ids.{i}"), fh.get_tensor(f"aux_hidden_states.{i}"),
                                            fh.get_tensor(f"target_next_ids.{i}"), generated_from)


def load_calibration(path: str | Path) -> CalibrationSet:
    path = Path(path)
    index_path = path / INDEX_NAME
    try:
        index = json.loads(index_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DraftFormatError(f"not a calibration set ({exc})", path=index_path) from exc
    if index.get("format") != CALIB_FORMAT or index.get("version") != CALIB_VERSION:
        raise DraftFormatError(f"expected format {CALIB_FORMAT!r} version {CALIB_VERSION}", path=index_path,
                               field="format")
    info = index["info"]
    info["aux_layer_ids"] = tuple(info["aux_layer_ids"])
    return CalibrationSet(path, CalibrationInfo(**info), tuple(index["shards"]))


class CalibrationWriter:
    """Append samples; every `shard_samples` samples a shard and the index are written (resumable)."""

    def __init__(self, path: Path, info: CalibrationInfo, shard_samples: int = 64) -> None:
        self.path, self.info, self.shard_samples = Path(path), info, shard_samples
        self.path.mkdir(parents=True, exist_ok=True)
        existing = load_calibration(self.path) if (self.path / INDEX_NAME).exists() else None
        self.shards = list(existing.shards) if existing else []
        self.count = existing.num_samples if existing else 0
        self._pending: list[tuple[int, CalibrationSample]] = []

    def add(self, sample: CalibrationSample) -> None:
        self._pending.append((self.count, sample))
        self.count += 1
        if len(self._pending) >= self.shard_samples:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        name = f"shard-{len(self.shards):05d}.safetensors"
        tensors = {}
        for i, s in self._pending:
            tensors[f"input_ids.{i}"] = s.input_ids.to(torch.int64).contiguous()
            tensors[f"aux_hidden_states.{i}"] = s.aux_hidden_states.contiguous()
            tensors[f"target_next_ids.{i}"] = s.target_next_ids.to(torch.int64).contiguous()
        save_file(tensors, self.path / name)
        self.shards.append({"file": name, "samples": [i for i, _ in self._pending],
                            "generated_from": [s.generated_from for _, s in self._pending],
                            "tokens": sum(int(s.input_ids.numel()) for _, s in self._pending)})
        self._pending = []
        index = {"format": CALIB_FORMAT, "version": CALIB_VERSION, "info": asdict(self.info),
                 "shards": self.shards}
        tmp = self.path / (INDEX_NAME + ".tmp")
        tmp.write_text(json.dumps(index, indent=2) + "\n")
        tmp.replace(self.path / INDEX_NAME)
