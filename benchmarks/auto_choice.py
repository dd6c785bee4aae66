"""Wall time of `eagle3-quant quantize --scheme auto`: on the committed tiny pair (tests/fixtures/tiny_pair; in
`make bench`), or on the real pair (``--pair real``: tests/fixtures/real_pair/draft and the calibration set `make
bench-real` makes: 128 training prompts, 64 generated tokens, seed 1; needs `make real-pair`).

The tiny pair's calibration set is the target's greedy continuations of the first 32 held-out prompts (48 new
tokens, as the tests make it). Each set is built once into the cache folder. Each quantize run is one measured child
process, cheapest first (the default) and with ``--measure-all``:
``python -m benchmarks.auto_choice [--pair real] [--measure-all]``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
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


def real_pair_calibration(cache: Path) -> tuple[Path, Path]:
    """(the real pair's draft, bench-real's calibration set), the set captured by `calibrate` when absent."""
    from benchmarks.studies.real_pair import calibration
    from fixtures.real_pair.draft_files import DRAFT_DIR
    from fixtures.real_pair.target import prepare

    (cache / "real-pair").mkdir(parents=True, exist_ok=True)
    return DRAFT_DIR, calibration(cache / "real-pair", prepare(), 128)


def bench_auto_choice(cache: Path = DEFAULT_CACHE, pair: str = "tiny", measure_all: bool = False) -> dict[str, Any]:
    draft, calib = (PAIR / "draft", tiny_pair_calibration(cache)) if pair == "tiny" else real_pair_calibration(cache)
    out = cache / "runs" / f"{pair}-pair-auto"
    shutil.rmtree(out, ignore_errors=True)
    measured = run_measured([eagle3_quant_bin(), "quantize", str(draft), str(out), "--scheme", "auto", "--calib",
                             str(calib), "--device", "cpu", *(["--measure-all"] if measure_all else [])],
                            cwd=REPO)    # a failure raises
    record = Manifest.read(out).auto_choice
    # one validate of the chosen artifact on the same set: the unit auto's cost is counted in, and its verdict
    started = time.perf_counter()
    check = subprocess.run([eagle3_quant_bin(), "validate", str(out), "--calib", str(calib), "--reference",
                            str(draft), "--device", "cpu", "--no-kernel", "--no-vllm", "--no-sglang"],
                           cwd=REPO, capture_output=True, text=True)
    validate_s = time.perf_counter() - started
    shutil.rmtree(out, ignore_errors=True)
    # the choice quantized directly: what auto costs beyond writing it (Quark's import and write are paid either way)
    chosen = record.chosen_candidate
    plain = run_measured([eagle3_quant_bin(), "quantize", str(draft), str(out), "--scheme", chosen.scheme, "--calib",
                          str(calib), "--device", "cpu", *(["--quantize-fc"] if chosen.quantize_fc else []),
                          *(["--draft-vocab", str(chosen.draft_vocab)] if chosen.draft_vocab else [])], cwd=REPO)
    shutil.rmtree(out, ignore_errors=True)
    return {"pair": pair, "wall_s": round(measured.wall_s, 3), "peak_rss_bytes": measured.peak_rss_bytes,
            "candidates": len(record.candidates), "measured": sum(c.measured for c in record.candidates),
            "chosen": record.chosen, "engines": record.chosen_candidate.engines, "measure_s": round(record.seconds, 3),
            "validate_s": round(validate_s, 3), "validate_passed": check.returncode == 0,
            "over_validate": round(measured.wall_s / validate_s, 2), "plain_quantize_s": round(plain.wall_s, 3),
            "extra_over_validate": round((measured.wall_s - plain.wall_s) / validate_s, 2)}


def format_auto_choice(result: dict[str, Any]) -> str:
    return (f"--scheme auto on the {result.get('pair', 'tiny')} pair: {result['wall_s']:.2f} s wall "
            f"({result['measure_s']:.2f} s measuring {result.get('measured', result['candidates'])} of "
            f"{result['candidates']} candidates), peak RSS {result['peak_rss_bytes'] / 1e9:.2f} GB; chose "
            f"{result['chosen']}" + (f"; one validate of it {result['validate_s']:.2f} s "
                                    f"({'passed' if result['validate_passed'] else 'FAILED'}): auto = "
                                    f"{result['over_validate']:.2f}x" if "validate_s" in result else "")
            + (f"; quantizing the choice directly {result['plain_quantize_s']:.2f} s, so auto's extra = "
               f"{result['extra_over_validate']:.2f}x validate" if "plain_quantize_s" in result else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.auto_choice", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", choices=("tiny", "real"), default="tiny")
    parser.add_argument("--measure-all", action="store_true")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args()
    print(format_auto_choice(bench_auto_choice(args.cache, args.pair, args.measure_all)))
