"""Where `calibrate` runs the target: transformers in this process (`api.py`, `capture.py`) or vLLM's engine in its
own Python (`vllm_capture.py`). The choice and the checks of its options; no heavy imports (the CLI reads them)."""

from __future__ import annotations

from enum import StrEnum

from eagle3_quant.errors import CalibrationDataError


class Backend(StrEnum):
    transformers = "transformers"
    vllm = "vllm"


DEFAULT_BACKEND = Backend.transformers.value
# options of the vllm backend, and their defaults (any other value with the transformers backend is refused)
VLLM_ONLY = {"engine_python": None, "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
             "enable_expert_parallel": False, "max_model_len": None, "max_num_seqs": None, "engine_args": None,
             "target_quantization": None}
# options of the transformers backend: refused with the vllm backend
TRANSFORMERS_ONLY = ("max_memory", "device", "batch_size", "threads")
# vllm.LLM arguments calibrate sets itself: not accepted in engine_args
RESERVED_ENGINE_ARGS = ("model", "dtype", "speculative_config", "kv_transfer_config", "trust_remote_code", "seed",
                        "quantization", *(name for name in VLLM_ONLY
                                          if name not in ("engine_python", "engine_args", "target_quantization")))


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
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_num_seqs"):
        value = getattr(opts, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise CalibrationDataError(f"must be an integer >= 1, got {value!r}", field=name)
    if not opts.engine_timeout > 0:
        raise CalibrationDataError(f"must be a positive number of seconds, got {opts.engine_timeout!r}",
                                   field="engine_timeout")
    args = opts.engine_args
    if args is None:
        return
    if not isinstance(args, dict) or not all(isinstance(key, str) for key in args):
        raise CalibrationDataError("must be a mapping of vllm.LLM argument names to values", field="engine_args")
    reserved = sorted(set(args) & set(RESERVED_ENGINE_ARGS))
    if reserved:
        raise CalibrationDataError(f"{reserved[0]!r} is set by calibrate itself (its own option, or the export's "
                                   "configuration)", field=f"engine_args.{reserved[0]}")
