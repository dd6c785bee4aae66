"""eagle3-quant: Eagle3 draft -> FP8 (AMD Quark) draft that vLLM serves, with proof that it still works.

The public functions are imported lazily so that ``import eagle3_quant`` stays instant (no torch,
no quark.torch). The ``TYPE_CHECKING`` block repeats ``_LAZY`` for editors and type checkers
(tests/test_public_api.py keeps the two equal).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
STAGES = ("calib", "quantize", "export", "validate")


class _CheckoutStages:
    """Run from the checkout's root (``python -m``, pytest), ``./eagle3_quant`` comes before any installed copy, and
    the stages it installs as ``eagle3_quant.calib`` ... live beside it: this finder imports them from there."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, name: str, path=None, target=None):
        package, _, stage = name.partition(".")
        if package != __name__ or stage not in STAGES:
            return None
        from importlib.machinery import PathFinder

        return PathFinder.find_spec(name, [self.root])


def _find_checkout_stages() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    beside = all(os.path.isfile(os.path.join(root, stage, "__init__.py")) for stage in STAGES)
    if beside and not os.path.isdir(os.path.join(here, STAGES[0])):
        sys.meta_path.append(_CheckoutStages(root))


_find_checkout_stages()

_LAZY = {
    "quantize_draft": "eagle3_quant.quantize.api",
    "QuantizeResult": "eagle3_quant.quantize.api",
    "inspect_draft": "eagle3_quant.inspection",
    "read_draft": "eagle3_quant.reading.draft",
    "check_loader_compat": "eagle3_quant.engines.vllm.loader_compat",
    "validate_draft": "eagle3_quant.validate.api",
    "ValidationReport": "eagle3_quant.validate.report",
    "bench_draft": "eagle3_quant.bench.api",
    "BenchResult": "eagle3_quant.bench.api",
    "gguf_draft": "eagle3_quant.quantize.gguf_api",
    "GgufResult": "eagle3_quant.quantize.gguf_api",
    "bench_gguf": "eagle3_quant.bench.llamacpp_api",
    "LlamaCppBenchResult": "eagle3_quant.bench.llamacpp_api",
    "SCHEMES": "eagle3_quant.schemes",
    "get_scheme": "eagle3_quant.schemes",
    "calibrate_target": "eagle3_quant.calib.api",
    "import_calibration": "eagle3_quant.calib.importer",
    "CalibrationResult": "eagle3_quant.calib.result",
    "load_draft": "eagle3_quant.runtime.loading",
    "save_draft": "eagle3_quant.runtime.saving",
    "new_draft_config": "eagle3_quant.runtime.saving",
    "Eagle3Draft": "eagle3_quant.runtime.model",
    "push_draft": "eagle3_quant.export.push",
    "PushResult": "eagle3_quant.export.push",
    "make_card": "eagle3_quant.export.card",
    "run_pipeline": "eagle3_quant.pipeline",
    "load_pipeline": "eagle3_quant.pipeline_spec",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from eagle3_quant.bench.api import BenchResult, bench_draft
    from eagle3_quant.bench.llamacpp_api import LlamaCppBenchResult, bench_gguf
    from eagle3_quant.calib.api import calibrate_target
    from eagle3_quant.calib.importer import import_calibration
    from eagle3_quant.calib.result import CalibrationResult
    from eagle3_quant.engines.vllm.loader_compat import check_loader_compat
    from eagle3_quant.export.card import make_card
    from eagle3_quant.export.push import PushResult, push_draft
    from eagle3_quant.inspection import inspect_draft
    from eagle3_quant.pipeline import run_pipeline
    from eagle3_quant.pipeline_spec import load_pipeline
    from eagle3_quant.quantize.api import QuantizeResult, quantize_draft
    from eagle3_quant.quantize.gguf_api import GgufResult, gguf_draft
    from eagle3_quant.reading.draft import read_draft
    from eagle3_quant.runtime.loading import load_draft
    from eagle3_quant.runtime.model import Eagle3Draft
    from eagle3_quant.runtime.saving import new_draft_config, save_draft
    from eagle3_quant.schemes import SCHEMES, get_scheme
    from eagle3_quant.validate.api import validate_draft
    from eagle3_quant.validate.report import ValidationReport


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eagle3_quant' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
