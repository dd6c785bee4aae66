"""The manifest's record of `quantize --serve-taps`: which target layers each engine feeds the draft as shipped
and as written, what was written to make them so, why, and the acceptance measured under each candidate."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from eagle3_quant.errors import ManifestError

SERVE_TAPS = ("trained", "as-is")


@dataclass(frozen=True)
class MeasuredTaps:
    """The BF16 draft's acceptance with one candidate's layers fed (the calibration set's chains)."""

    name: str                             # trained=sglang, vllm, defaults, ...
    indices: list[int]                    # hidden_states fed
    acceptance_length: float | None       # None: no chain could be judged (no generated tokens)
    per_position: list[float]
    drafts: int


@dataclass(frozen=True)
class ServeTapsRecord:
    mode: str                             # trained | as-is
    served: list[int] | None              # what every engine named feeds the artifact (None: unknown)
    trained: list[int] | None             # the trained layers, as decided (None: unknown)
    decided_by: str                       # config | measurement | convention | as-is
    reason: str                           # one line: why these layers
    written: dict[str, Any]               # config field -> value written (eagle_config.KEY: the nested one)
    before: dict[str, Any]                # config field -> its value in the source (None: absent)
    feeds_before: dict[str, list[int] | None]    # reader (vllm, vllm_v2, sglang) -> hidden_states fed
    feeds_after: dict[str, list[int] | None]
    problems_before: dict[str, str]       # reader -> why the draft cannot run on what it fed (a repeated layer)
    target_layers: int | None
    calibration: str | None               # the set measured on (public name)
    k: int | None
    measured: list[MeasuredTaps]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def measured_for(self, indices) -> MeasuredTaps | None:
        return next((m for m in self.measured if indices is not None and m.indices == list(indices)), None)

    @classmethod
    def from_dict(cls, data: Any, path: Path | None = None) -> ServeTapsRecord:
        if not isinstance(data, dict) or data.get("mode") not in SERVE_TAPS:
            raise ManifestError(f"not an object with a mode in {', '.join(SERVE_TAPS)}", path=path,
                                field="serve_taps")
        try:
            measured = [MeasuredTaps(**{k: row[k] for k in MeasuredTaps.__dataclass_fields__})
                        for row in data.get("measured") or []]
            return cls(**{**{k: data[k] for k in cls.__dataclass_fields__ if k != "measured"},
                          "measured": measured})
        except (KeyError, TypeError) as exc:
            raise ManifestError(f"incomplete ({exc!r})", path=path, field="serve_taps") from None
