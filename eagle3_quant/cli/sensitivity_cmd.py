from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import app
from eagle3_quant.cli.quantize_cmd import Device, SchemeName
from eagle3_quant.schemes import DEFAULT_SCHEME


@app.command("sensitivity")
def sensitivity_command(
    src: Annotated[str, typer.Argument(help="BF16/FP16 draft folder or Hub repo id.")],
    calib: Annotated[Path, typer.Option(help="Calibration set (made by `eagle3-quant calibrate`).")],
    scheme: Annotated[SchemeName, typer.Option(help="Scheme whose FP8 math is simulated.")] = DEFAULT_SCHEME,
    group: Annotated[list[str] | None, typer.Option(
        help="Measure only this layer group (fc, qkv_proj, o_proj, gate_up_proj, down_proj, lm_head). "
             "Repeatable.")] = None,
    max_samples: Annotated[int | None, typer.Option(min=1, help="Use at most this many calibration samples.")]
    = None,
    device: Annotated[Device | None, typer.Option(help="Device (default: cuda if available).")] = None,
    revision: Annotated[str | None, typer.Option(help="Hub revision of SRC.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Quantize one layer group at a time; rank groups by how much they change the draft on CAL."""
    from eagle3_quant.quantize.sensitivity import measure_sensitivity

    report = measure_sensitivity(src, calib, scheme.value, device.value if device else None, groups=group,
                                 max_samples=max_samples, revision=revision)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, allow_nan=False))
        return
    from eagle3_quant.cli.render import print_sensitivity

    print_sensitivity(report)
