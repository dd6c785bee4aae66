"""Options of a calibration capture, validated; the ones that shape the data are recorded in the set."""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.calib.engine_taps import DEFAULT_ENGINE, Engine
from eagle3_quant.calib.taps import TapConvention
from eagle3_quant.calib.target import DTYPE_NAMES

from eagle3_quant.errors import CalibrationDataError

DEFAULT_GENERATE_TOKENS = 64


def default_generate_tokens(seq_len: int) -> int:
    return min(DEFAULT_GENERATE_TOKENS, seq_len // 4)


@dataclass(frozen=True)
class CalibrationOptions:
    num_samples: int = 128
    seq_len: int = 2048
    seed: int = 0
    column: str | None = None            # default: messages / conversations / text, whichever exists
    split: str = "train"
    subset: str | None = None            # dataset configuration name
    min_tokens: int = 16                 # shorter prompts are skipped
    # greedy continuation by the target appended to each prompt; None: DEFAULT_GENERATE_TOKENS, at most
    # a quarter of seq_len (acceptance replays need the target's own text)
    generate_tokens: int | None = None
    tap_convention: str = TapConvention.auto.value
    engine: str = DEFAULT_ENGINE.value   # the serving engine whose taps are captured
    aux_layer_ids: tuple[int, ...] | None = None   # override the draft config's ids
    dtype: str = "auto"                  # run the target and store the states in: auto = the target's dtype
    trust_remote_code: bool = False
    max_memory: dict | None = None       # accelerate max_memory per device (GPU machines)
    shard_samples: int = 64
    shard_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        for name in ("num_samples", "seq_len", "shard_samples", "shard_bytes"):
            if getattr(self, name) < 1:
                raise CalibrationDataError(f"must be at least 1, got {getattr(self, name)}", field=name)
        if self.generate_tokens is None:
            object.__setattr__(self, "generate_tokens", default_generate_tokens(self.seq_len))
        for name in ("min_tokens", "generate_tokens"):
            if getattr(self, name) < 0:
                raise CalibrationDataError(f"must not be negative, got {getattr(self, name)}", field=name)
        if self.tap_convention not in TapConvention.__members__:
            raise CalibrationDataError(f"{self.tap_convention!r} is not one of {', '.join(TapConvention.__members__)}",
                                       field="tap_convention")
        if self.engine not in Engine.__members__:
            raise CalibrationDataError(f"{self.engine!r} is not one of {', '.join(Engine.__members__)}",
                                       field="engine")
        if self.dtype not in ("auto", *DTYPE_NAMES):
            raise CalibrationDataError(f"{self.dtype!r} is not one of auto, {', '.join(DTYPE_NAMES)}", field="dtype")
        if self.aux_layer_ids is not None:
            object.__setattr__(self, "aux_layer_ids", tuple(int(i) for i in self.aux_layer_ids))
