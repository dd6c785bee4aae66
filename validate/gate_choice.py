"""Which scheme's default gates apply to an artifact: the scheme its manifest names, else the one its Quark
config declares (an artifact without a manifest), else none (FP8's gates)."""

from __future__ import annotations

from eagle3_quant.records.manifest import Manifest
from eagle3_quant.schemes import SCHEMES
from eagle3_quant.validate.gemm_forms import scheme_of


def artifact_scheme(manifest: Manifest | None, quant_config: dict) -> str | None:
    """The registered scheme an artifact was made with (its manifest first, as read), or None when neither source
    names one."""
    name = manifest.scheme.name if manifest is not None else None
    if name in SCHEMES:
        return name
    return scheme_of(quant_config)
