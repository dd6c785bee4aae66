"""`python -m benchmarks.engine_gemm`: what an FP8 draft costs in vLLM's CPU engine against its BF16 original, with
torch's own CPU `_scaled_mm` and with the engine child's fp32 GEMM of the same operands (engines/vllm/serve_cpu.py).

On the real pair (SmolLM2-135M-Instruct and its draft; `make real-pair`), the same held-out prompts, greedy, k=3:
one engine run per draft and GEMM, each in its own process; generation seconds (load excluded), generated tokens
per second, and whether the greedy output is the same under both GEMMs. Part of `make bench` when the engine and the
real pair are there.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from eagle3_quant.bench.prompts import load_prompts
from eagle3_quant.calib.target import read_target
from eagle3_quant.engines.environment import VLLM_CHILDREN, engine_env, find_engine_python, probe_engine
from eagle3_quant.engines.runner import ChildCommand, run_child
from eagle3_quant.engines.vllm.serve_cpu import SCALED_MM_ENV

GEMMS = {"fp32 GEMM (default)": None, "torch._scaled_mm": "reference"}


def measure(num_prompts: int, max_tokens: int) -> dict:
    from eagle3_quant.bench.options import BenchOptions
    from eagle3_quant.engines.changes import changes_for
    from eagle3_quant.quantize.api import quantize_draft
    from fixtures.real_pair.draft_files import DRAFT_DIR
    from fixtures.real_pair.prompts import HELDOUT_FILE
    from fixtures.real_pair.target import prepare

    target = read_target(prepare())
    python = find_engine_python()
    info = probe_engine(python)
    opts = BenchOptions(target=target.name, prompts=str(HELDOUT_FILE), num_prompts=num_prompts,
                        max_tokens=max_tokens)
    prompts, _ = load_prompts(opts, target)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        ptpc = quantize_draft(DRAFT_DIR, Path(tmp) / "ptpc", device="cpu").output
        for draft_name, draft in (("BF16 draft", DRAFT_DIR), ("PTPC draft", ptpc)):
            for gemm, mode in GEMMS.items():
                env = {**engine_env(info), **({SCALED_MM_ENV: mode} if mode else {})}
                command = ChildCommand(python.path, VLLM_CHILDREN / "serve_child.py", name="vLLM", env=env,
                                       unset=("PYTHONPATH",) if mode else ("PYTHONPATH", SCALED_MM_ENV))
                request = {"target": target.name, "draft": str(Path(draft).resolve()), "k": 3, "dtype": "bfloat16",
                           "prompts": prompts, "max_tokens": max_tokens,
                           "max_model_len": max(len(p) for p in prompts) + max_tokens + 20, "max_num_seqs": 32,
                           "seed": 0, "sweep": None, "changes": changes_for(info, mx=False)}
                started = time.perf_counter()
                result = run_child(command, request, 3600).checked()
                rows[f"{draft_name}, {gemm}"] = {
                    "generate_s": round(result["generate_s"], 1), "wall_s": round(time.perf_counter() - started, 1),
                    "tokens_per_s": round(result["generated_tokens"] / result["generate_s"], 2),
                    "outputs_sha": hash(json.dumps(result["outputs"])),
                    "gemm_calls": result["substituted_ops"].get("torch._scaled_mm", {}).get("calls", 0)}
    for draft_name in ("BF16 draft", "PTPC draft"):
        fast, slow = (rows[f"{draft_name}, {gemm}"] for gemm in GEMMS)
        fast["same_output_as_scaled_mm"] = fast.pop("outputs_sha") == slow.pop("outputs_sha")
    return {"engine": info.describe(), "prompts": num_prompts, "max_tokens": max_tokens, "k": 3,
            "threads": os.cpu_count(), "rows": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_gemm", description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    result = measure(args.num_prompts, args.max_tokens)
    print("| run | generation s | tokens/s | same greedy output as torch._scaled_mm |")
    print("|---|---|---|---|")
    for name, row in result["rows"].items():
        same = row.get("same_output_as_scaled_mm")
        print(f"| {name} | {row['generate_s']} | {row['tokens_per_s']} | {'' if same is None else same} |")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
