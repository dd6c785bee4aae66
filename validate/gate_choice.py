"""Which scheme's default gates apply to an artifact: the scheme its manifest names, else the one its Quark
config describes (an MX artifact without a manifest), else FP8's."""

from __future__ import annotations

from eagle3_quant.records.manifest import Manifest
from eagle3_quant.schemes import SCHEMES


def _first(entry):
    return entry[0] if isinstance(entry, list) and entry else entry


def _from_config(quant_config: dict) -> str | None:
    """The registered non-FP8 scheme whose weight and input element dtypes the config declares (an MXFP8 weight is
    also per group); None for FP8 and anything else (they take FP8's gates)."""
    global_config = quant_config.get("global_quant_config") or {}
    weight, inputs = _first(global_config.get("weight")) or {}, _first(global_config.get("input_tensors")) or {}
    for scheme in SCHEMES.values():
        if scheme.weight.kind == "fp8" or (scheme.weight.kind == "mxfp8" and weight.get("qscheme") != "per_group"):
            continue
        declared = (inputs.get("dtype", "bf16"), bool(inputs.get("is_dynamic", True)))
        if scheme.weight.dtype == weight.get("dtype") and (scheme.input.dtype, scheme.input.dynamic) == declared:
            return scheme.name
    return None


def artifact_scheme(manifest: Manifest | None, quant_config: dict) -> str | None:
    """The registered scheme an artifact was made with (its manifest first, as read), or None when neither source
    names one."""
    name = manifest.scheme.name if manifest is not None else None
    if name in SCHEMES:
        return name
    return _from_config(quant_config)
