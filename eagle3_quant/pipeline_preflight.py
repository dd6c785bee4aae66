"""Every stage's options checked before the first stage runs: an unknown option or a bad value in the pipeline
file is refused up front, not after quantize has written its output. Stage modules are imported lazily here
(the core imports no stage at import time); a stage that is not installed is left to report `unavailable`."""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Mapping
from typing import Any

from eagle3_quant.errors import Eagle3QuantError, PipelineSpecError
from eagle3_quant.pipeline_spec import PipelineSpec

# keywords the pipeline passes itself; the file may not set them in `options`
FIXED = {"validate_draft": ("out", "reference", "calib"),
         "calibrate_target": ("target", "draft", "data", "out", "num_samples", "seq_len", "force")}


def _stage(name: str) -> Any:
    try:
        return getattr(importlib.import_module("eagle3_quant"), name)
    except (ImportError, AttributeError):
        return None


def _check_keywords(name: str, options: Mapping[str, Any], section: str, file: str | None) -> None:
    fn = _stage(name)
    if fn is None:
        return
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    takes = [p for p in params if p not in FIXED[name] and params[p].kind is not inspect.Parameter.VAR_POSITIONAL]
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise PipelineSpecError(f"unknown option(s) {', '.join(map(repr, unknown))}; valid options: "
                                f"{', '.join(takes)}", path=file, field=f"{section}.options")


def _check_values(build, section: str, file: str | None) -> None:
    try:
        build()
    except Eagle3QuantError as exc:
        raise PipelineSpecError(str(exc), path=file, field=f"{section}.{exc.field}" if exc.field else section) \
            from None
    except (TypeError, ValueError) as exc:
        raise PipelineSpecError(f"bad option value ({exc})", path=file, field=f"{section}.options") from None


def preflight(spec: PipelineSpec) -> None:
    file = spec.path
    auto = spec.quantize.auto_exclude
    if auto is not None and (isinstance(auto, bool) or not math.isfinite(auto) or not 0.0 <= auto < 1.0):
        raise PipelineSpecError(f"{auto!r} is not a fraction of positions in [0, 1)", path=file,
                                field="quantize.auto_exclude")
    options = spec.validate.options
    if spec.validate.enabled:
        _check_keywords("validate_draft", options, "validate", file)
        if "gates" in options:
            from eagle3_quant.validate.report import Gates

            _check_values(lambda: Gates.from_value(options["gates"]), "validate.options.gates", file)
        k = options.get("k")
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 64):
            raise PipelineSpecError(f"{k!r} is not a number of draft steps in 1..64", path=file,
                                    field="validate.options.k")
    if spec.calibrate.data:
        _check_keywords("calibrate_target", spec.calibrate.options, "calibrate", file)
        from eagle3_quant.calib.options import CalibrationOptions

        c = spec.calibrate
        _check_values(lambda: CalibrationOptions(num_samples=c.num_samples, seq_len=c.seq_len, **c.options),
                      "calibrate", file)
