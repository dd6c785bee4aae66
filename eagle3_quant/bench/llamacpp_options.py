"""`LlamaCppBenchOptions`: everything `bench_gguf` (`bench --engine llamacpp`) takes besides OUT, with defaults and
help (API, CLI, pipeline)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import OptionsError
from eagle3_quant.options import COUNT, SEED, STEPS, TIME, Number, option

THREADS = Number(int, 1, 1024)
SLOTS = Number(int, 1, 256)
REPEATS = Number(int, 1, 100)
MAX_PROMPTS = 4096


@dataclass(frozen=True)
class LlamaCppBenchOptions:
    target: str | None = option(None, "The target llama.cpp serves: a GGUF file (your quantized target), or a "
                                      "model folder / Hub id, converted to a BF16 GGUF by llama.cpp's converter.",
                                pipeline=False)
    reference: Path | None = option(None, "The BF16 draft to compare with: a GGUF (file or `gguf --type bf16` "
                                          "folder) or a draft folder, converted with OUT's target layers (default: "
                                          "the draft OUT was made from).", pipeline=False)
    prompts: str | None = option(None, "Prompts: a calibration set, a .safetensors with an int `prompts` tensor, "
                                       "or a dataset as calibrate's --data (tokenized with the target's tokenizer "
                                       "and chat template).")
    num_prompts: int = option(64, "Prompts to run (the first N).")
    max_tokens: int = option(48, "New tokens per prompt (greedy, never stopping at EOS).")
    prompt_len: int = option(256, "A dataset's prompts are cut to this many tokens.")
    k: int = option(3, "Draft tokens per speculative step (llama-server's --spec-draft-n-max).")
    threads: int | None = option(None, "Threads of every llama.cpp run (default: this machine's cores).")
    slots: tuple[int, ...] = option((1,), "Server slots (-np) to time at: 1 runs the prompts one by one (where "
                                          "acceptance, outputs and each step's time are measured: always in), N "
                                          "sends N at once (e.g. 1,4).")
    repeats: int = option(3, "Timed repetitions of every prompt, the three servers interleaved.")
    long_context: int | None = option(None, "Also split each step's time at this context length (tokens): the "
                                            "prompts preceded by other prompts' tokens up to it.")
    predict: bool = option(True, "Also predict acceptance offline in llama.cpp's arithmetic (validate) on the same "
                                 "prompts and llama.cpp's no-draft continuations, beside its counts.")
    llamacpp: str | None = option(None, "llama.cpp's tools (default: $EAGLE3_QUANT_LLAMACPP, else the project's "
                                        ".venv-llamacpp from make setup-llamacpp).", pipeline=False)
    timeout_s: float = option(1800.0, "Seconds any one server start or request may take before it is ended.")
    seed: int = option(0, "Seed of the bootstrap (and of llama.cpp's sampler, though greedy decoding uses none).")

    def __post_init__(self) -> None:
        if self.reference is not None:
            object.__setattr__(self, "reference", Path(self.reference).expanduser())
        for name in ("num_prompts", "max_tokens", "prompt_len"):
            COUNT.check(getattr(self, name), name, required=True)
        if self.num_prompts > MAX_PROMPTS:
            raise OptionsError(f"{self.num_prompts} prompts: at most {MAX_PROMPTS}", field="num_prompts")
        STEPS.check(self.k, "k", required=True)
        THREADS.check(self.threads, "threads")
        REPEATS.check(self.repeats, "repeats", required=True)
        COUNT.check(self.long_context, "long_context")
        TIME.check(self.timeout_s, "timeout_s", required=True)
        SEED.check(self.seed, "seed", required=True)
        slots = tuple(self.slots or ())
        if not slots:
            raise OptionsError("at least one slot count", field="slots")
        for level in slots:
            SLOTS.check(level, "slots", required=True)
        if len(set(slots)) != len(slots):
            raise OptionsError(f"{list(slots)} repeats a level", field="slots")
        if 1 not in slots:
            raise OptionsError(f"{list(slots)} lacks 1: acceptance, outputs and where a step's time goes are measured "
                               "one prompt at a time", field="slots", hint=f"pass 1,{','.join(map(str, slots))}")
        object.__setattr__(self, "slots", tuple(sorted(slots)))

    @property
    def thread_count(self) -> int:
        return self.threads or os.cpu_count() or 1
