"""`speedup_estimate.json`: the one owner of its name and layout. `eagle3-quant estimate OUT --write` writes it;
the model card shows it only while it belongs to OUT as OUT stands.

Layout (``estimate_version`` 2)::

    {
      "estimate_version": 2, "kind": "estimate (cycle model, not an engine measurement)",
      "k", "tokens_per_round", "tokens_per_round_bf16", "verify_ms", "draft_ms", "draft_ms_source",
      "draft_ms_bf16", "device_profile", "cycle_ms", "verify_share", "speedup_vs_no_spec",
      "speedup_vs_bf16_draft", "acceptance_source",       # eagle3_quant/speedup.py: the cycle model's terms
      "artifact_files": {"model.safetensors": "<sha256>", ...},   # the artifact estimated (records/evidence.py)
      "validation_sha256": "<sha256>",                    # the validation report its acceptance came from
      "token_ms": X,                                      # only when one target token costs other than a verify
      "measured": {"speedup", "interval", "what", "inside_interval"}   # only when an engine measured the speed
    }

A file of another version, of other artifact files, or made from another report than OUT's own is not this
artifact's estimate: the card says "not measured" and why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from eagle3_quant.errors import EstimateInputError
from eagle3_quant.reading.limits import load_json_file
from eagle3_quant.records.fields import RecordFields

ESTIMATE_NAME = "speedup_estimate.json"
ESTIMATE_VERSION = 2
KIND = "estimate (cycle model, not an engine measurement)"


@dataclass(frozen=True)
class SpeedupEstimate:
    k: int
    tokens_per_round: float
    tokens_per_round_bf16: float | None
    verify_ms: float
    draft_ms: float
    draft_ms_source: str
    draft_ms_bf16: float | None
    device_profile: str | None
    cycle_ms: float
    verify_share: float
    speedup_vs_no_spec: float
    speedup_vs_bf16_draft: float | None
    acceptance_source: str
    artifact_files: dict[str, str] = field(default_factory=dict)   # path -> sha256 of the artifact estimated
    validation_sha256: str | None = None                           # the report the acceptance was read from
    token_ms: float | None = None       # one target forward of one token, when not the verify's (a CPU: batches cost)
    measured: dict | None = None        # the engine's measured speedup beside it (llama.cpp: bench.json)

    def to_dict(self) -> dict:
        data = {"estimate_version": ESTIMATE_VERSION, "kind": KIND, **asdict(self)}
        return {k: v for k, v in data.items() if not (k in ("token_ms", "measured") and v is None)}

    def write(self, folder: Path) -> Path:
        path = folder / ESTIMATE_NAME
        tmp = path.with_name(f".{ESTIMATE_NAME}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n")
        tmp.replace(path)
        return path

    @classmethod
    def read(cls, path: Path) -> SpeedupEstimate:
        """Every field checked (EstimateInputError naming the file and the field)."""
        data = load_json_file(path, EstimateInputError)
        if not isinstance(data, dict):
            raise EstimateInputError("is not a JSON object", path=path)
        f = RecordFields(data, path, error=EstimateInputError)
        if data.get("estimate_version") != ESTIMATE_VERSION:
            raise f.fail("estimate_version", f"{ESTIMATE_VERSION} (run `eagle3-quant estimate OUT --write` again)")
        numbers = {"k": f.integer, "tokens_per_round": f.number, "tokens_per_round_bf16": f.number,
                   "verify_ms": f.number, "draft_ms": f.number, "draft_ms_bf16": f.number, "cycle_ms": f.number,
                   "verify_share": f.number, "speedup_vs_no_spec": f.number, "speedup_vs_bf16_draft": f.number}
        values = {name: numbers[name](name) for name in numbers}
        for name in ("k", "tokens_per_round", "verify_ms", "draft_ms", "cycle_ms", "verify_share",
                     "speedup_vs_no_spec"):
            if values[name] is None or not values[name] > 0:
                raise f.fail(name, "a positive number")
        texts = {"draft_ms_source": f.text("draft_ms_source"), "acceptance_source": f.text("acceptance_source"),
                 "device_profile": f.optional_text("device_profile"),
                 "validation_sha256": f.optional_text("validation_sha256")}
        measured = f.optional_object("measured")
        values = {**values, **texts, "artifact_files": f.texts_by_name("artifact_files"),
                  "token_ms": f.number("token_ms") if f.has("token_ms") else None,
                  "measured": measured.data if measured else None}
        estimate = cls(**{x.name: values[x.name] for x in fields(cls)})
        wrong = estimate.disagreement()
        if wrong:
            raise f.fail(wrong, "what the cycle model gives from the file's own inputs (an edited estimate)")
        return estimate

    def disagreement(self) -> str | None:
        """The first term that is not what the cycle model computes from the inputs beside it; None when all are."""
        cycle = self.draft_ms + self.verify_ms
        token = self.token_ms if self.token_ms is not None else self.verify_ms
        expected = {"cycle_ms": cycle, "verify_share": self.verify_ms / cycle,
                    "speedup_vs_no_spec": self.tokens_per_round * token / cycle}
        return next((name for name, value in expected.items()
                     if not math.isclose(getattr(self, name), value, rel_tol=1e-9)), None)


def estimate_of(out: Path, artifact: Mapping[str, str], report_sha256: str | None
                ) -> tuple[SpeedupEstimate | None, str]:
    """OUT's estimate when it belongs to the artifact whose files are `artifact` (path -> sha256) and was made from
    the report whose sha256 is `report_sha256` (OUT's own validation.json); else (None, why not)."""
    path = out / ESTIMATE_NAME
    if not path.is_file():
        return None, "run `eagle3-quant estimate OUT --verify-ms X --write`"
    try:
        estimate = SpeedupEstimate.read(path)
    except (OSError, EstimateInputError) as exc:
        return None, f"{ESTIMATE_NAME} does not read: {exc}"
    if not estimate.artifact_files or estimate.artifact_files != dict(artifact):
        return None, f"{ESTIMATE_NAME} was made for other artifact files: estimate again"
    if report_sha256 is None or estimate.validation_sha256 != report_sha256:
        return None, f"{ESTIMATE_NAME} was made from another validation report than this one: estimate again"
    return estimate, ""
