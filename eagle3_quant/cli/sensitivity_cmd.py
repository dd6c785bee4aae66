from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb
from eagle3_quant.cli.numbers import number_option
from eagle3_quant.cli.quantize_cmd import PlainScheme
from eagle3_quant.options import COUNT, help_of
from eagle3_quant.options import default_of as default
from eagle3_quant.quantize.options import SensitivityOptions as S


@verb("sensitivity")
def sensitivity_command(
    src: Annotated[str, typer.Argument(help="BF16/FP16 draft folder or Hub repo id.")],
    calib: Annotated[Path, typer.Option(help="Calibration set (made by `eagle3-quant calibrate`).")],
    scheme: Annotated[PlainScheme, typer.Option(help=help_of(S, "scheme"))] = default(S, "scheme"),
    group: Annotated[list[str] | None, typer.Option(help=help_of(S, "groups"))] = None,
    max_samples: Annotated[int | None, number_option(COUNT, help=help_of(S, "max_samples"))]
    = default(S, "max_samples"),
    device: Annotated[str | None, typer.Option(help=help_of(S, "device"))] = default(S, "device"),
    revision: Annotated[str | None, typer.Option(help=help_of(S, "revision"))] = default(S, "revision"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of a table.")] = False,
) -> None:
    """Quantize one layer group at a time; rank groups by how much they change the draft on CAL."""
    from eagle3_quant.quantize.sensitivity import measure_sensitivity

    options = S(scheme=scheme.value, groups=tuple(group) if group else None, max_samples=max_samples, device=device,
                revision=revision)
    report = measure_sensitivity(src, calib, options)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, allow_nan=False))
        return
    from eagle3_quant.cli.render import print_sensitivity

    print_sensitivity(report)
