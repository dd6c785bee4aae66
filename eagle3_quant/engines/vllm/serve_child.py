"""One run of vLLM's real serving engine (``vllm.LLM``): ``PYTHON serve_child.py REQUEST.json RESULT.json``.

Runs by its file path in the engine's own environment, where eagle3-quant is not installed: it imports only the
standard library, torch and vLLM. The parent (``eagle3_quant/bench/api.py``) runs it once per draft (none, the BF16
reference, the artifact), through ``eagle3_quant/engines/runner.py``.

REQUEST: {"target", "draft" (null: no speculative decoding), "k", "dtype", "prompts": [[token ids]], "max_tokens",
"max_model_len", "max_num_seqs", "seed", "sweep": null | {"concurrency": [..], "input_len", "output_len"}}.
RESULT: {"vllm", "torch", "dtype", "outputs": [[token ids]], "per_request": [{"histogram", "draft_tokens"}],
"counters": {"drafts", "draft_tokens", "accepted", "accepted_per_position"}, "load_s", "generate_s",
"generated_tokens", "substituted_ops": {op: {"why", "calls"}}, "sweep": [...]} or {"error": one line}.

Greedy (temperature 0, ``ignore_eos``). Acceptance is vLLM's own: the spec-decode counters of ``llm.get_metrics()``
and each request's ``spec_decode_metrics`` (``per_request_spec_decode_metrics="summary"``: a histogram of accepted
draft tokens per verify step).

Two ``_C`` ops the CPU build lacks for static FP8 (facts: ``static_scaled_fp8_quant`` is registered with no
arguments, ``silu_and_mul_quant`` is missing) are supplied in torch with the CUDA kernels' math, only when broken
or missing, and the result names each one supplied and how often vLLM called it.
"""

from __future__ import annotations

import os
import sys
import time

# child_protocol.py is in engines/, one folder up; appended after site-packages so that engines/vllm/ never
# shadows vLLM itself
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from child_protocol import serve  # noqa: E402

FP8_MAX = 448.0


def _static_scaled_fp8_quant(out, input, scale, group_shape=None):
    """``_C::static_scaled_fp8_quant`` (csrc/quantization/fp8): out = clamp(x * (1 / scale), +-448) as e4m3fn,
    computed in fp32; a per-tensor scale (the only static FP8 activation scheme Quark writes)."""
    import torch

    _CALLS["static_scaled_fp8_quant"] += 1
    if scale.numel() != 1:
        raise NotImplementedError(f"the torch stand-in for _C::static_scaled_fp8_quant takes a per-tensor scale only "
                                  f"(got {tuple(scale.shape)}, group_shape {group_shape})")
    inv = scale.to(torch.float32).reciprocal()
    out.copy_((input.to(torch.float32) * inv).clamp(-FP8_MAX, FP8_MAX).to(out.dtype))


def _silu_and_mul_quant(result, x, scale):
    """``_C::silu_and_mul_quant`` (csrc/quantization/activation_kernels.cu, ``act_and_mul_quant_kernel``): SiLU in
    fp32 returned in the model dtype, the product of two model-dtype values rounded again, then the static FP8
    quantization above (the same steps as ``eagle3_quant/runtime/serving.silu_and_mul_quant``; this child cannot
    import our package)."""
    import torch

    _CALLS["silu_and_mul_quant"] += 1
    if scale.numel() != 1:
        raise NotImplementedError(f"the torch stand-in for _C::silu_and_mul_quant takes a per-tensor scale only "
                                  f"(got {tuple(scale.shape)})")
    d = x.shape[-1] // 2
    gate, up = x[..., :d].to(torch.float32), x[..., d:].to(torch.float32)
    silu = (gate / (1.0 + torch.exp(-gate))).to(x.dtype)
    product = (silu.to(torch.float32) * up).to(x.dtype)
    y = product.to(torch.float32) * scale.to(torch.float32).reshape(()).reciprocal()
    result.copy_(y.clamp(-FP8_MAX, FP8_MAX).to(result.dtype))


_CALLS = {"static_scaled_fp8_quant": 0, "silu_and_mul_quant": 0}
_SUPPLIED: dict[str, str] = {}


def _supply_missing_ops() -> None:
    """Replace the static-FP8 ``_C`` ops only where this build has none that can run."""
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()          # the build's own _C (e.g. _C_AVX2) first: never override a real op
    namespace = torch.ops._C
    for name, torch_code in (("static_scaled_fp8_quant", _static_scaled_fp8_quant),
                             ("silu_and_mul_quant", _silu_and_mul_quant)):
        try:
            schema = getattr(namespace, name).default._schema
            why = None if schema.arguments else "registered with no arguments in this build"
        except (AttributeError, RuntimeError):
            why = "missing in this build"
        if why:
            setattr(namespace, name, torch_code)
            _SUPPLIED[name] = why


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


def _engine(request: dict):
    from vllm import LLM

    spec = None
    if request["draft"]:
        spec = {"method": "eagle3", "model": request["draft"], "num_speculative_tokens": request["k"]}
    return LLM(model=request["target"], dtype=request["dtype"], enforce_eager=True, seed=request["seed"],
               max_model_len=request["max_model_len"], max_num_seqs=request["max_num_seqs"],
               disable_log_stats=False, speculative_config=spec,
               **({"per_request_spec_decode_metrics": "summary"} if spec else {}))


def _generate(llm, prompts: list[list[int]], max_tokens: int):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)


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

    _supply_missing_ops()
    started = time.perf_counter()
    llm = _engine(request)
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    outputs = _generate(llm, request["prompts"], request["max_tokens"])
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
    if request.get("sweep"):
        result["sweep"] = _sweep(llm, request["sweep"], [t for p in request["prompts"] for t in p])
    result["substituted_ops"] = {name: {"why": why, "calls": _CALLS[name]} for name, why in _SUPPLIED.items()}
    return result


if __name__ == "__main__":
    serve(run, "vLLM")
