"""`BenchOptions`: everything `bench_draft` takes besides OUT, with defaults and help (API, CLI, pipeline)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.engine_layout import EngineLayout, check_reserved
from eagle3_quant.errors import OptionsError
from eagle3_quant.options import DEVICE_HELP, SEED, TIME, check_device, check_positive, option
from eagle3_quant.reading.target_precision import ONLINE_METHODS

ENGINE_DTYPES = ("bfloat16", "float16")        # vLLM refuses float32 for Quark checkpoints
# vllm.LLM arguments bench sets itself: not accepted in engine_args
RESERVED_ENGINE_ARGS = ("model", "tokenizer", "dtype", "speculative_config", "seed", "quantization", "max_num_seqs",
                        "disable_log_stats", "per_request_spec_decode_metrics", "logprobs_mode")


@dataclass(frozen=True)
class BenchOptions(EngineLayout):
    target: str | None = option(None, "The target model (folder or Hub id) vLLM runs; the draft must fit its "
                                      "vocabulary and hidden size.", pipeline=False)
    reference: Path | None = option(None, "The BF16 draft to compare with (default: the source folder recorded at "
                                          "quantization, if it still exists).", pipeline=False)
    prompts: str | None = option(None, "Prompts: a calibration set (its prompts; the continuations are the "
                                       "engine's), a .safetensors with an int `prompts` tensor [N, P], or a dataset "
                                       "as calibrate's --data.")
    num_prompts: int = option(64, "Prompts to run (the first N).")
    max_tokens: int = option(48, "New tokens per prompt (greedy, never stopping at EOS).")
    prompt_len: int = option(256, "A dataset's prompts are cut to this many tokens.")
    k: int = option(3, "Draft tokens per speculative step (vLLM's num_speculative_tokens).")
    engine_python: str | None = option(None, "The Python of the vLLM environment (default: "
                                             "$EAGLE3_QUANT_ENGINE_PYTHON, else the project's .venv-engine from "
                                             "make setup-engine).", pipeline=False)
    target_quantization: str | None = option(None, "Serve a BF16 target quantized by vLLM at load (vLLM's "
                                                   "--quantization, e.g. fp8). A quantized checkpoint needs none: "
                                                   "vLLM reads its quantization_config.", pipeline=False)
    dtype: str = option("bfloat16", "The dtype vLLM serves the target and drafts in (bfloat16 or float16).")
    max_num_seqs: int = option(32, "vLLM's max_num_seqs: requests batched at once.")
    timeout_s: float = option(1800.0, "Seconds each engine run may take before it is ended.")
    predict: bool = option(True, "Also run validate's offline prediction on the same prompts and the engine's own "
                                 "continuations, beside the engine's numbers.")
    device: str | None = option(None, "Where the offline prediction runs. " + DEVICE_HELP)
    concurrency: tuple[int, ...] = option((), "GPU only: throughput and TPOT at these concurrency levels "
                                              "(e.g. 1,4,16,64) for no draft, the BF16 and the FP8 draft; on a CPU "
                                              "engine: skipped, with the reason.")
    input_len: int = option(1024, "Prompt tokens per request of the --concurrency sweep.")
    output_len: int = option(1024, "New tokens per request of the --concurrency sweep.")
    seed: int = option(0, "Seed of vLLM and of the bootstrap.")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_reserved(self, RESERVED_ENGINE_ARGS, "bench")
        if self.reference is not None:
            object.__setattr__(self, "reference", Path(self.reference).expanduser())
        for name in ("num_prompts", "max_tokens", "prompt_len", "k", "max_num_seqs", "input_len", "output_len"):
            check_positive(getattr(self, name), name)
        object.__setattr__(self, "concurrency", tuple(self.concurrency or ()))
        for level in self.concurrency:
            check_positive(level, "concurrency")
        if self.dtype not in ENGINE_DTYPES:
            raise OptionsError(f"{self.dtype!r} is not one of {', '.join(ENGINE_DTYPES)} (vLLM serves Quark "
                               "checkpoints in bf16 or fp16 only)", field="dtype")
        TIME.check(self.timeout_s, "timeout_s", required=True)
        SEED.check(self.seed, "seed", required=True)
        check_device(self.device)
        if self.target_quantization is not None and self.target_quantization not in ONLINE_METHODS:
            raise OptionsError(f"{self.target_quantization!r} is not one of {', '.join(ONLINE_METHODS)}",
                               field="target_quantization")
