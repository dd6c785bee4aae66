"""The three names a model card is about: the repository it lives in, the target the draft serves and the BF16 draft
it was made from. Each is a Hub id (ORG/NAME), given or recorded; the card never fills one in with a placeholder (a
local folder's name, `TARGET_MODEL`, `ORG/...`): a name that is not known is refused with the flag that gives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import PublishError
from eagle3_quant.reading.repo_ids import repo_id_problem
from eagle3_quant.reading.source_card import repo_id_from_cache_path
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.records.validation_report import ValidationSummary


@dataclass(frozen=True)
class CardNames:
    repo_id: str
    target: str
    base_model: str


def _given(value: str, flag: str, what: str, out: Path) -> str:
    problem = repo_id_problem(value)
    if problem:
        raise PublishError(f"{value!r} is {problem}: the card names {what} by its Hub id", path=out,
                           field=flag.lstrip("-").replace("-", "_"), hint=f"pass {flag} ORG/NAME")
    return value


def _recorded(candidates: list[object]) -> str | None:
    return next((c for c in candidates if isinstance(c, str) and repo_id_problem(c) is None), None)


def card_names(out: Path, manifest: Manifest, validation: ValidationSummary, config_verifier: str | None,
               repo_id: str | None, target: str | None, base_model: str | None) -> CardNames:
    """The card's names: each one given, else the one the records hold as a Hub id (the target: the validation
    report's, the calibration set's, the config's verifier; the base model: the source's Hub id as quantize
    recorded it), else refused naming every flag (and pipeline key) still needed, in one error."""
    if repo_id is not None:
        repo_id = _given(repo_id, "--repo-id", "its repository", out)
    if target is not None:
        target = _given(target, "--target", "the target", out)
    else:
        target = _recorded([validation.target, (manifest.calibration or {}).get("target"), config_verifier])
    source = manifest.source
    if base_model is not None:
        base_model = _given(base_model, "--base-model", "the BF16 draft", out)
    else:
        base_model = _recorded([source.repo_id, source.hub_id, repo_id_from_cache_path(source.path or "")])
    missing = [(field, why, flag) for field, value, why, flag in (
        ("repo_id", repo_id, "the repository it lives in", "--repo-id ORG/NAME"),
        ("target", target, "the target (validate and calibrate record a local target by its folder only)",
         "--target ORG/NAME (pipeline: push.target)"),
        ("base_model", base_model, f"the BF16 draft (made from the local folder {source.path!r}, whose Hub id is "
                                   "not recorded)", "--base-model ORG/NAME (pipeline: push.base_model)"),
    ) if value is None]
    if missing:
        raise PublishError("the card needs " + "; ".join(why for _, why, _ in missing), path=out,
                           field=", ".join(field for field, _, _ in missing),
                           hint="pass " + " ".join(flag for _, _, flag in missing))
    return CardNames(repo_id, target, base_model)
