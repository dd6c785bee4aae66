"""Where `calibrate` runs the target: transformers in this process (`api.py`, `capture.py`) or vLLM's engine in its
own Python (`vllm_capture.py`). The choice and the checks of its options; no heavy imports (the CLI reads them)."""

from __future__ import annotations

from enum import StrEnum

from eagle3_quant.engine_layout import EngineLayout, check_reserved
from eagle3_quant.errors import CalibrationDataError
from eagle3_quant.options import COUNT, TIME


class Backend(StrEnum):
    transformers = "transformers"
    vllm = "vllm"


DEFAULT_BACKEND = Backend.transformers.value
# options of the vllm backend, and their defaults (any other value with the transformers backend is refused)
VLLM_ONLY = {"engine_python": None, **EngineLayout().to_dict(), "max_num_seqs": None, "target_quantization": None}
# options of the transformers backend: refused with the vllm backend
TRANSFORMERS_ONLY = ("max_memory", "device", "batch_size", "threads")
# vllm.LLM arguments calibrate sets itself: not accepted in engine_args
RESERVED_ENGINE_ARGS = ("model", "tokenizer", "dtype", "speculative_config", "kv_transfer_config", "trust_remote_code",
                        "seed", "quantization", "max_num_seqs")


def check_backend_options(opts) -> None:
    """The backend is known; the vllm options are in range, and only given with the vllm backend."""
    if opts.backend not in Backend.__members__:
        raise CalibrationDataError(f"{opts.backend!r} is not one of {', '.join(Backend.__members__)}", field="backend")
    if opts.backend == Backend.transformers:
        given = [name for name, default in VLLM_ONLY.items() if getattr(opts, name) != default]
        if given:
            raise CalibrationDataError("applies to the vllm backend only (the target runs in transformers)",
                                       field=given[0], hint="add --backend vllm, or drop it")
        return
    transformers_only = [name for name in TRANSFORMERS_ONLY if getattr(opts, name)]
    if transformers_only:
        raise CalibrationDataError("applies to the transformers backend only (vLLM places, batches and threads the "
                                   "target itself: --tensor-parallel-size, --max-num-seqs, --engine-args)",
                                   field=transformers_only[0])
    COUNT.check(opts.max_num_seqs, "max_num_seqs", CalibrationDataError)
    TIME.check(opts.engine_timeout, "engine_timeout", CalibrationDataError, required=True)
    longest = opts.seq_len + (opts.generate_tokens or 0) + 1
    if opts.max_model_len is not None and opts.max_model_len < longest:
        raise CalibrationDataError(f"{opts.max_model_len} is shorter than a sample can be: --seq-len {opts.seq_len}, "
                                   f"{opts.generate_tokens or 0} generated tokens and one more", field="max_model_len",
                                   hint=f"pass at least {longest}, or a smaller --seq-len")
    check_reserved(opts, RESERVED_ENGINE_ARGS, "calibrate")
