"""What `quantize --gptq` costs beside round-to-nearest: wall time and peak RSS of both CLI runs, each in a fresh
process, on a synthetic draft of a real shape and a synthetic calibration set (random aux states).

    .venv/bin/python -m benchmarks.gptq_cost WORKDIR [--shape llama3-8b] [--samples 16] [--seq-len 256]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.measure import rss_method, run_measured
from eagle3_quant.records.manifest import Manifest

REPO = Path(__file__).resolve().parent.parent


def prepare(workdir: Path, shape: str, samples: int, seq_len: int) -> tuple[Path, Path]:
    sys.path.insert(0, str(REPO / "tests"))
    from calib_fixtures import write_calibration, write_target

    from fixtures.synthetic import SHAPES, write_synthetic_draft

    dims = SHAPES[shape]
    src, cal = workdir / f"{shape}-draft", workdir / f"{shape}-cal-{samples}x{seq_len}"
    if not src.exists():
        write_synthetic_draft(src, shape)
    if not cal.exists():
        target = write_target(workdir / f"{shape}-target", vocab=dims.vocab, hidden=dims.hidden)
        write_calibration(cal, target, samples=samples, seq_len=seq_len, vocab=dims.draft_vocab,
                          target_hidden=dims.hidden)
    return src, cal


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gptq_cost")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--shape", default="llama3-8b")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=256)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    src, cal = prepare(args.workdir, args.shape, args.samples, args.seq_len)
    cli = [str(Path(sys.executable).parent / "eagle3-quant"), "quantize", str(src)]
    results = {"shape": args.shape, "samples": args.samples, "seq_len": args.seq_len, "rss": rss_method()}
    for mode, extra in (("round-to-nearest", []), ("gptq", ["--gptq", "--calib", str(cal)])):
        out = args.workdir / f"{args.shape}-{mode}"
        measured = run_measured([*cli, str(out), "--device", "cpu", "--force", *extra], cwd=REPO)
        results[mode] = measured.to_dict()
        if mode == "gptq":
            results[mode]["gptq_seconds"] = Manifest.read(out).gptq["seconds"]
        print(mode, json.dumps(results[mode]), flush=True)
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
