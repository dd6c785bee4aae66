"""`ValidateOptions`: everything `validate_draft` takes besides OUT, with defaults and help."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import OptionsError
from eagle3_quant.options import DEVICE_HELP, check_device, check_positive, option
from eagle3_quant.records.validation_report import REPORT_NAME
from eagle3_quant.validate.report import DEFAULT_K, Gates


@dataclass(frozen=True)
class ValidateOptions:
    reference: Path | None = option(None, "BF16 source draft (default: the manifest's source folder, if it still "
                                          "exists).", pipeline=False)
    calib: Path | None = option(None, "Calibration set for the data checks (eagle3-quant calibrate).", pipeline=False)
    report: Path | None = option(None, f"Write the JSON report here (default OUT/{REPORT_NAME}).", pipeline=False)
    target: str | None = option(None, "Target folder or Hub id for the token embedding, and the target's folder "
                                      "for its lm_head when the draft shares it (default: the calibration "
                                      "set's target).", pipeline=False)
    gates: Gates = option(help="Thresholds that fail the validation.", factory=Gates)
    k: int = option(DEFAULT_K, "Draft tokens per speculative step.")
    device: str | None = option(None, DEVICE_HELP)
    kernel: bool = option(True, "Run the FP8 kernel-path check.")
    vllm: bool = option(True, "Run the vllm_load check: vLLM's own loader and forward on this artifact (skipped "
                              "when vLLM is not installed).")
    sglang: bool = option(True, "Run the sglang_load check: SGLang's own loader on this artifact (skipped when "
                                "SGLang is not installed).")
    max_samples: int | None = option(None, "Use at most this many calibration samples.")
    llamacpp: str | None = option(None, "A GGUF draft: llama.cpp's tools, whose gguf-py dequantizes it (default: "
                                        "$EAGLE3_QUANT_LLAMACPP, else the project's .venv-llamacpp).", pipeline=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gates", Gates.from_value(self.gates))
        for name, value in self.gates.to_dict().items():
            if value is not None and not math.isfinite(value):
                raise OptionsError(f"gate {value!r} is not a finite number", field=name)
        for name in ("reference", "calib", "report"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, Path(value).expanduser())
        check_positive(self.k, "k")
        check_positive(self.max_samples, "max_samples")
        check_device(self.device)

    @classmethod
    def gate_fields(cls) -> Mapping[str, str]:
        default = " Default: the artifact's scheme's (FP8: {}; MX schemes: docs/mx.md)."
        return {"min_top1_agreement": "Gate: step-0 top-1 agreement quantized vs BF16." + default.format(0.95),
                "min_acceptance_ratio": "Gate: acceptance length quantized / BF16." + default.format(0.99),
                "min_weight_sqnr_db": "Gate: lowest per-layer weight SQNR in dB." + default.format(25.0)}
