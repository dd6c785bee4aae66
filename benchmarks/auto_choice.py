"""Wall time of `eagle3-quant quantize --scheme auto` on the committed tiny real pair (tests/fixtures/tiny_pair).

The calibration set is the target's greedy continuations of the first 32 held-out prompts (48 new tokens, as the
tests make it), built once into the cache folder. The quantize run is one measured child process:
``python -m benchmarks.auto_choice``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks.contenders import REPO, eagle3_quant_bin
from benchmarks.drafts import DEFAULT_CACHE
from benchmarks.measure import run_measured
from eagle3_quant.records.manifest import Manifest

PAIR = REPO / "tests" / "fixtures" / "tiny_pair"
PROMPTS, NEW_TOKENS = 32, 48


def tiny_pair_calibration(cache: Path) -> Path:
    folder = cache / "tiny-pair-calib"
    if (folder / "calib.json").is_file():
        return folder
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    sys.path.insert(0, str(REPO / "fixtures"))
    import tiny_capture

    shutil.rmtree(folder, ignore_errors=True)
    target = LlamaForCausalLM.from_pretrained(PAIR / "target", dtype=torch.float32).eval()
    prompts = load_file(PAIR / "heldout_prompts.safetensors")["prompts"].long()[:PROMPTS]
    tiny_capture.write_calibration(tiny_capture.greedy_samples(target, prompts, NEW_TOKENS), folder,
                                   str(PAIR / "target"))
    return folder


def bench_auto_choice(cache: Path = DEFAULT_CACHE) -> dict[str, Any]:
    calib = tiny_pair_calibration(cache)
    out = cache / "runs" / "tiny-pair-auto"
    shutil.rmtree(out, ignore_errors=True)
    measured = run_measured([eagle3_quant_bin(), "quantize", str(PAIR / "draft"), str(out), "--scheme", "auto",
                             "--calib", str(calib), "--device", "cpu"], cwd=REPO)    # a failure raises
    record = Manifest.read(out).auto_choice
    shutil.rmtree(out, ignore_errors=True)
    return {"wall_s": round(measured.wall_s, 3), "peak_rss_bytes": measured.peak_rss_bytes,
            "candidates": len(record.candidates), "chosen": record.chosen, "engines": record.chosen_candidate.engines,
            "measure_s": round(record.seconds, 3)}


def format_auto_choice(result: dict[str, Any]) -> str:
    return (f"--scheme auto on the tiny pair: {result['wall_s']:.2f} s wall ({result['measure_s']:.2f} s measuring "
            f"{result['candidates']} candidates), peak RSS {result['peak_rss_bytes'] / 1e9:.2f} GB; chose "
            f"{result['chosen']}")


if __name__ == "__main__":
    print(format_auto_choice(bench_auto_choice()))
