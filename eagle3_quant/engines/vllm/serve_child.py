"""One run of vLLM's real serving engine (``vllm.LLM``): ``PYTHON serve_child.py REQUEST.json RESULT.json``.

Runs by its file path in the engine's own environment, where eagle3-quant is not installed: it imports only the
standard library, torch and vLLM. The parent (``eagle3_quant/bench/api.py``) runs it once per draft (none, the BF16
reference, the artifact), through ``eagle3_quant/engines/runner.py``.

REQUEST: {"target", "draft" (null: no speculative decoding), "k", "dtype", "prompts": [[token ids]], "max_tokens",
"max_model_len", "max_num_seqs", "seed", "sweep": null | {"concurrency": [..], "input_len", "output_len"},
"quantization": vLLM's online quantization of the target | null, "engine": {more ``vllm.LLM`` keyword arguments:
the parallel layout, ...}, "changes": [the CPU build's changes to make, by name (``cpu_changes.py``)],
"top_logits": N (0: none; else the N highest raw logits at every generated token)}.
RESULT: {"vllm", "torch", "dtype", "outputs": [[token ids]], "per_request": [{"histogram", "draft_tokens"}],
"counters": {"drafts", "draft_tokens", "accepted", "accepted_per_position"}, "load_s", "generate_s",
"generated_tokens", "substituted_ops": {op: {"why", "with", "calls", "processes", ...}}, "registered_kernels":
{kernel: {..., "processes"}}, "processes": {process: [changes made there]}, "top_logits": [[[[id, logit], ...] per
token] per prompt] (when asked), "sweep": [...]} or {"error": one line}.

Greedy (temperature 0, ``ignore_eos``). Acceptance is vLLM's own: the spec-decode counters of ``llm.get_metrics()``
and each request's ``spec_decode_metrics`` (``per_request_spec_decode_metrics="summary"``: a histogram of accepted
draft tokens per verify step).

The child first makes vLLM's CPU build run every artifact (``request["changes"]``, ``serve_cpu.py``): the
static-FP8 ``_C`` ops it lacks in torch, torch's slow CPU ``_scaled_mm`` through an fp32 GEMM of the same operands,
vLLM's own MX emulation kernels registered for the CPU platform; in this process and, through vLLM's plugin entry
point (``cpu_plugin.py``), in every worker a parallel layout starts. The result names each op supplied
(``substituted_ops``, with its calls) and each kernel registered (``registered_kernels``), with the processes where
each acted.
"""

from __future__ import annotations

import os
import sys
import time

# child_protocol.py is in engines/, one folder up; appended after site-packages so that engines/vllm/ never
# shadows vLLM itself
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cpu_changes  # noqa: E402  (this folder is the script's own: sys.path[0])
import cpu_plugin  # noqa: E402
from child_protocol import serve  # noqa: E402


def _counters(metrics) -> dict:
    found = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_position": []}
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for metric in metrics:
        if metric.name in names:
            found[names[metric.name]] += int(metric.value)
        elif metric.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            found["accepted_per_position"] = [int(v) for v in metric.values]
    return found


def llm_kwargs(request: dict) -> dict:
    """The ``vllm.LLM`` keyword arguments of this request (``layout_child.py`` checks the same ones)."""
    spec = None
    if request["draft"]:
        spec = {"method": "eagle3", "model": request["draft"], "num_speculative_tokens": request["k"]}
    return {"model": request["target"], "dtype": request["dtype"], "enforce_eager": True, "seed": request["seed"],
            "quantization": request.get("quantization"), "max_model_len": request["max_model_len"],
            "max_num_seqs": request["max_num_seqs"], "disable_log_stats": False, "speculative_config": spec,
            **({"per_request_spec_decode_metrics": "summary"} if spec else {}),
            **({"logprobs_mode": "raw_logits"} if request.get("top_logits") else {}), **request.get("engine", {})}


def _generate(llm, prompts: list[list[int]], max_tokens: int, top_logits: int = 0):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=top_logits or None)
    return llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)


def _top_logits(positions, top: int) -> list[list[list]]:
    """Per generated position the `top` highest raw logits (``logprobs_mode="raw_logits"``): [[id, logit], ...]."""
    rows = []
    for entries in positions or []:
        ranked = sorted(entries.items(), key=lambda item: item[1].rank if item[1].rank is not None else 1 << 30)
        rows.append([[int(token), float(value.logprob)] for token, value in ranked[:top]])
    return rows


def _sweep(llm, sweep: dict, pool: list[int]) -> list[dict]:
    """Output tokens/s and TPOT per concurrency level: `concurrency` requests at once (offline: the batch is the
    concurrency), each `input_len` tokens cut from the bench prompts laid end to end, `output_len` new tokens."""
    rows = []
    for level in sweep["concurrency"]:
        prompts = [[pool[(start + i) % len(pool)] for i in range(sweep["input_len"])]
                   for start in range(0, level * sweep["input_len"], sweep["input_len"])]
        started = time.perf_counter()
        outputs = _generate(llm, prompts, sweep["output_len"])
        seconds = time.perf_counter() - started
        tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
        tpot = [(o.metrics.last_token_ts - o.metrics.first_token_ts) / (len(o.outputs[0].token_ids) - 1)
                for o in outputs if getattr(o, "metrics", None) is not None and len(o.outputs[0].token_ids) > 1
                and getattr(o.metrics, "last_token_ts", 0) > getattr(o.metrics, "first_token_ts", 0)]
        rows.append({"concurrency": level, "output_tokens": tokens, "seconds": seconds,
                     "output_tokens_per_s": tokens / seconds if seconds > 0 else None,
                     "tpot_ms": 1000 * sum(tpot) / len(tpot) if tpot else None})
    return rows


def run(request: dict) -> dict:
    import torch
    import vllm

    changes = request.get("changes", [])
    cpu_plugin.install(changes)             # every process vLLM starts from here on
    cpu_changes.apply(changes)              # this one
    started = time.perf_counter()
    from vllm import LLM

    llm = LLM(**llm_kwargs(request))
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    top = request.get("top_logits") or 0
    outputs = _generate(llm, request["prompts"], request["max_tokens"], top)
    generate_s = time.perf_counter() - started
    per_request = []
    for output in outputs:
        metrics = output.outputs[0].spec_decode_metrics
        per_request.append(None if metrics is None else
                           {"histogram": list(metrics.histogram), "draft_tokens": int(metrics.num_draft_tokens)})
    result = {"vllm": vllm.__version__, "torch": torch.__version__, "dtype": request["dtype"],
              "outputs": [list(o.outputs[0].token_ids) for o in outputs], "per_request": per_request,
              "counters": _counters(llm.get_metrics()), "load_s": load_s, "generate_s": generate_s,
              "generated_tokens": sum(len(o.outputs[0].token_ids) for o in outputs)}
    if top:
        result["top_logits"] = [_top_logits(o.outputs[0].logprobs, top) for o in outputs]
    if request.get("sweep"):
        result["sweep"] = _sweep(llm, request["sweep"], [t for p in request["prompts"] for t in p])
    return {**result, **cpu_changes.everywhere(llm)}


if __name__ == "__main__":
    serve(run, "vLLM")
