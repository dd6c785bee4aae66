"""Rewrite the config.json Quark wrote so that vLLM loads it with no edits."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eagle3_quant.engines.vllm.names import exclude_pattern
from eagle3_quant.errors import QuantizationError
from eagle3_quant.plan import QuantPlan


def vllm_exclude(plan: QuantPlan) -> list[str]:
    return [exclude_pattern(d.role) for d in plan.excluded]


def rewrite_config(config_path: Path, source_config: Mapping[str, Any], plan: QuantPlan,
                   taps: Mapping[str, Any] | None = None) -> dict:
    """Replace Quark's plain exclude names by anchored `re:` patterns; keep every source key as it was but the
    aux layer ids `taps` names (``taps/written_ids.py``: the layers each engine feeds)."""
    from eagle3_quant.taps.written_ids import apply_written

    config = json.loads(config_path.read_text())
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        raise QuantizationError("Quark wrote no quantization_config", path=config_path)
    qc["exclude"] = vllm_exclude(plan)
    qc.setdefault("layer_type_quant_config", {})
    qc.setdefault("layer_quant_config", {})
    for key, value in source_config.items():
        if key != "quantization_config" and config.get(key) != value:
            raise QuantizationError("differs from the source config after quantization", path=config_path,
                                    field=key)
    ordered = {k: config[k] for k in source_config if k in config}
    ordered.update({k: v for k, v in config.items() if k not in ordered})
    ordered = apply_written(ordered, taps or {})
    config_path.write_text(json.dumps(ordered, indent=2, allow_nan=False) + "\n")
    return ordered
