from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb
from eagle3_quant.cli.numbers import number_option
from eagle3_quant.options import COUNT, DECIBELS, FRACTION, RATIO, STEPS, help_of
from eagle3_quant.options import default_of as default
from eagle3_quant.validate.options import ValidateOptions as V
from eagle3_quant.validate.report import Gates

GATE_HELP = V.gate_fields()
GATE = Gates()


@verb("validate")
def validate_command(
    out: Annotated[Path, typer.Argument(help="Quantized draft folder (made by `quantize`, or `gguf`).")],
    reference: Annotated[Path | None, typer.Option(help=help_of(V, "reference"))] = default(V, "reference"),
    calib: Annotated[Path | None, typer.Option(help=help_of(V, "calib"))] = default(V, "calib"),
    report: Annotated[Path | None, typer.Option(help=help_of(V, "report"))] = default(V, "report"),
    target: Annotated[str | None, typer.Option(help=help_of(V, "target"))] = default(V, "target"),
    k: Annotated[int, number_option(STEPS, "--k", help=help_of(V, "k"))] = default(V, "k"),
    min_top1: Annotated[float | None, number_option(FRACTION, help=GATE_HELP["min_top1_agreement"])]
    = GATE.min_top1_agreement,
    min_acceptance_ratio: Annotated[float | None, number_option(RATIO, help=GATE_HELP["min_acceptance_ratio"])]
    = GATE.min_acceptance_ratio,
    min_sqnr_db: Annotated[float | None, number_option(DECIBELS, help=GATE_HELP["min_weight_sqnr_db"])]
    = GATE.min_weight_sqnr_db,
    device: Annotated[str | None, typer.Option(help=help_of(V, "device"))] = default(V, "device"),
    kernel: Annotated[bool, typer.Option("--kernel/--no-kernel", help=help_of(V, "kernel"))] = default(V, "kernel"),
    vllm: Annotated[bool, typer.Option("--vllm/--no-vllm", help=help_of(V, "vllm"))] = default(V, "vllm"),
    sglang: Annotated[bool, typer.Option("--sglang/--no-sglang", help=help_of(V, "sglang"))] = default(V, "sglang"),
    max_samples: Annotated[int | None, number_option(COUNT, help=help_of(V, "max_samples"))]
    = default(V, "max_samples"),
    llamacpp: Annotated[str | None, typer.Option(help=help_of(V, "llamacpp"))] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report on stdout instead of tables.")]
    = False,
) -> None:
    """Prove a quantized draft still works: structure, fidelity to the BF16 draft, kernel path. Exit 1 on a failed
    gate."""
    from eagle3_quant.cli.progress import TerminalProgress
    from eagle3_quant.validate.api import validate_draft

    gates = Gates(min_top1_agreement=min_top1, min_acceptance_ratio=min_acceptance_ratio,
                  min_weight_sqnr_db=min_sqnr_db)
    options = V(reference=reference, calib=calib, report=report, target=target, gates=gates, k=k, device=device,
                kernel=kernel, vllm=vllm, sglang=sglang, max_samples=max_samples, llamacpp=llamacpp)
    result = validate_draft(out, options, progress=TerminalProgress())
    if as_json:
        typer.echo(json.dumps(json.loads(result.report_path.read_text()), indent=2, allow_nan=False))
    else:
        from eagle3_quant.cli.render_validate import print_validation

        print_validation(result)
    if not result.passed:
        raise typer.Exit(1)
