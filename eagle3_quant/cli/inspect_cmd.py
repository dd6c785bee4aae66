from __future__ import annotations

import json
from typing import Annotated

import typer

from eagle3_quant.cli.app import app
from eagle3_quant.schemes import DEFAULT_SCHEME


@app.command("inspect")
def inspect_command(
    src: Annotated[str, typer.Argument(help="Draft folder or Hub repo id (ORG/NAME).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    scheme: Annotated[str, typer.Option(help="Scheme whose plan to show.")] = DEFAULT_SCHEME,
    exclude: Annotated[list[str] | None, typer.Option(help="Extra linears to keep BF16.")] = None,
    quantize_fc: Annotated[bool, typer.Option("--quantize-fc", help="Plan fc as FP8.")] = False,
    revision: Annotated[str | None, typer.Option(help="Hub revision.")] = None,
) -> None:
    """Describe a draft from its headers: format, sizes, vocabularies, parameters, the plan. Instant."""
    from eagle3_quant.inspection import inspect_draft

    report = inspect_draft(src, scheme, exclude, quantize_fc, revision)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, allow_nan=False))
        return
    from eagle3_quant.cli.render import print_inspection

    print_inspection(report)
