"""What a calibration run returns, and the size of a set."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSet

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class CalibrationResult:
    path: Path
    samples: int                  # in the finished set
    tokens: int
    seconds: float                # wall time of this call
    tokens_per_second: float      # capture throughput of this call (0.0 when nothing had to be captured)
    taps: tuple[int, ...]         # the hidden_states indices stored (input of layer k): every candidate's layers
    tap_convention: str           # how the draft config counts its ids: input or output
    dtype: str
    bytes: int                    # on disk
    resumed_samples: int          # already captured by an earlier, interrupted run
    captured_samples: int         # captured by this call
    captured_tokens: int
    capture_seconds: float
    generated_tokens: int         # appended by the target (--generate-tokens), this call
    cut_generations: int          # always 0: the states come from the decoding passes (kept for the API)
    source: str
    info: CalibrationInfo

    @property
    def tap_note(self) -> str | None:
        """One line when the serving engine feeds other layers than the draft was trained on."""
        from eagle3_quant.taps.capture import TapRecord

        record = TapRecord.from_extra(self.info.extra or {})
        return record.note if record else None

    @property
    def tap_notes(self) -> list[str]:
        """That line, and one when the draft's ids are written out of layer order."""
        from eagle3_quant.taps.capture import TapRecord

        record = TapRecord.from_extra(self.info.extra or {})
        return record.notes if record else []


def set_bytes(calib: CalibrationSet) -> int:
    return sum((calib.path / s["file"]).stat().st_size for s in calib.shards)


def estimate_bytes(tokens: int, hidden_size: int, dtype: str, num_states: int = 3) -> int:
    """Aux states plus two int64 id vectors per token (headers are noise)."""
    return tokens * (num_states * hidden_size * DTYPE_BYTES[dtype] + 16)
