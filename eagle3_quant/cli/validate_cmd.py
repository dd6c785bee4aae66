from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import app
from eagle3_quant.validate.report import DEFAULT_K, Gates

DEFAULT = Gates()


@app.command("validate")
def validate_command(
    out: Annotated[Path, typer.Argument(help="FP8 draft folder (made by `eagle3-quant quantize`).")],
    reference: Annotated[Path | None, typer.Option(
        help="BF16 source draft (default: the manifest's source folder, if it still exists).")] = None,
    calib: Annotated[Path | None, typer.Option(help="Calibration set for the data checks (eagle3-quant calibrate).")]
    = None,
    report: Annotated[Path | None, typer.Option(help="Write the JSON report here (default OUT/validation.json).")]
    = None,
    target: Annotated[str | None, typer.Option(
        help="Target folder or Hub id for the token embedding (default: the calibration set's target).")] = None,
    k: Annotated[int, typer.Option("--k", min=1, help="Draft tokens per speculative step.")] = DEFAULT_K,
    min_top1: Annotated[float, typer.Option(help="Gate: step-0 top-1 agreement FP8 vs BF16.")]
    = DEFAULT.min_top1_agreement,
    min_acceptance_ratio: Annotated[float, typer.Option(help="Gate: acceptance length FP8 / BF16.")]
    = DEFAULT.min_acceptance_ratio,
    min_sqnr_db: Annotated[float, typer.Option(help="Gate: lowest per-layer weight SQNR in dB.")]
    = DEFAULT.min_weight_sqnr_db,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 (default: first GPU, else CPU).")] = None,
    kernel: Annotated[bool, typer.Option("--kernel/--no-kernel", help="Run the FP8 kernel-path check.")] = True,
    max_samples: Annotated[int | None, typer.Option(help="Use at most this many calibration samples.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report instead of tables.")] = False,
) -> None:
    """Prove an FP8 draft still works: structure, fidelity to the BF16 draft, FP8 kernel path. Exit 1 on a failed
    gate."""
    from eagle3_quant.validate.api import validate_draft

    gates = Gates(min_top1_agreement=min_top1, min_acceptance_ratio=min_acceptance_ratio,
                  min_weight_sqnr_db=min_sqnr_db)
    result = validate_draft(out, reference, calib, report, gates, k=k, target=target, device=device, kernel=kernel,
                            max_samples=max_samples)
    if as_json:
        typer.echo(json.dumps(json.loads(result.report_path.read_text()), indent=2, allow_nan=False))
    else:
        from eagle3_quant.cli.validate_render import print_validation

        print_validation(result)
    if not result.passed:
        raise typer.Exit(1)
