"""`llama-bench` on the target: what one verify batch of k + 1 tokens and one decoded token cost at a context depth,
llama.cpp's own timing (tools/llama-bench: ``-p N`` a batch of N prompt tokens, ``-n 1`` one generated token, ``-d``
the KV cache filled to that depth first, ``-o json``: ``avg_ns`` and ``stddev_ns`` over ``-r`` repetitions)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.engines.llamacpp.process import failure, run_tool
from eagle3_quant.engines.llamacpp.tools import LlamaCppTools
from eagle3_quant.errors import EngineError

TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class StepCost:
    depth: int                    # tokens already in the KV cache
    batch: int                    # tokens in the batch (k + 1 for a verify step)
    batch_ms: float
    batch_ms_sd: float
    token_ms: float               # one generated token at that depth
    token_ms_sd: float
    repetitions: int

    def to_dict(self) -> dict:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


def step_cost(tools: LlamaCppTools, target: Path, batch: int, depth: int, threads: int,
              repetitions: int = 5, timeout_s: float = TIMEOUT_S) -> StepCost:
    argv = [tools.binary("llama-bench"), "-m", target, "-p", str(batch), "-n", "1", "-d", str(depth), "-t",
            str(threads), "-r", str(repetitions), "-o", "json"]
    run = run_tool(argv, tools.env(), timeout_s, "llama-bench")
    start = run.output.find("[")
    try:
        rows = json.loads(run.output[start:run.output.rindex("]") + 1]) if run.ok and start >= 0 else None
    except ValueError:
        rows = None
    if not rows:
        raise EngineError(failure(run, "llama-bench", timeout_s, ("error", "failed")) if not run.ok else
                          "llama-bench printed no JSON results", path=target)
    prompt = next(r for r in rows if r["n_prompt"] == batch and r["n_gen"] == 0)
    token = next(r for r in rows if r["n_gen"] == 1)
    return StepCost(depth, batch, prompt["avg_ns"] / 1e6, prompt["stddev_ns"] / 1e6, token["avg_ns"] / 1e6,
                    token["stddev_ns"] / 1e6, repetitions)
