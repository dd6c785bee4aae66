"""`bench --engine llamacpp`'s offline prediction: `validate` of the GGUF draft (llama.cpp's arithmetic,
validate/gguf.py) on the same prompts and llama.cpp's own no-draft continuations, so llama.cpp's counts and the
prediction stand side by side. The target's states come from transformers running the target's folder over each
prompt + continuation (`bench/predict.py` `capture_states`); chains start only where the continuation is also
transformers' greedy text, and how many are is recorded."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.bench.predict import capture_states, prediction_of
from eagle3_quant.calib.target import TargetSpec
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.records.bench_run import Prediction
from eagle3_quant.validate.gguf import validate_gguf
from eagle3_quant.validate.options import ValidateOptions

HOW = ("validate's offline acceptance in llama.cpp's arithmetic (validate/gguf.py) on llama.cpp's no-draft "
       "continuations; the target's states from transformers in {dtype}")


def predict_gguf(out: Path, reference: Path, spec: TargetSpec, prompts: list[list[int]],
                 continuations: list[list[int]], k: int, llamacpp: str | None, scratch: Path) -> Prediction:
    config = read_draft(reference).config
    calib, greedy = capture_states(spec, config, prompts, continuations, scratch / "calib")
    options = ValidateOptions(reference=reference, calib=calib, report=scratch / "prediction.json",
                              target=spec.name, k=k, kernel=False, vllm=False, sglang=False, llamacpp=llamacpp)
    metrics = validate_gguf(out, options).metrics
    return prediction_of(metrics, spec, greedy, len(prompts), HOW.format(dtype=spec.dtype))
