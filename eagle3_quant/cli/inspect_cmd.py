from __future__ import annotations

import json
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb
from eagle3_quant.cli.quantize_cmd import PlainScheme
from eagle3_quant.options import default_of as default
from eagle3_quant.options import help_of
from eagle3_quant.quantize.options import QuantizeOptions as Q


@verb("inspect")
def inspect_command(
    src: Annotated[str, typer.Argument(help="Draft folder or Hub repo id (ORG/NAME).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of tables.")] = False,
    scheme: Annotated[PlainScheme, typer.Option(help="Scheme whose plan to show.")] = default(Q, "scheme"),
    exclude: Annotated[list[str] | None, typer.Option(help=help_of(Q, "exclude"))] = None,
    quantize_fc: Annotated[bool, typer.Option("--quantize-fc", help=help_of(Q, "quantize_fc"))]
    = default(Q, "quantize_fc"),
    revision: Annotated[str | None, typer.Option(help=help_of(Q, "revision"))] = default(Q, "revision"),
    target: Annotated[str | None, typer.Option(help="The target (folder or Hub id; its config.json only): its "
                                                    "layer count gives the layers the engines' defaults name.")]
    = None,
) -> None:
    """Describe a draft from its headers: format, sizes, vocabularies, parameters, the plan, the target layers
    each engine feeds it. Instant."""
    from eagle3_quant.inspection import inspect_draft

    report = inspect_draft(src, scheme.value, exclude, quantize_fc, revision, target)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2, allow_nan=False))
        return
    from eagle3_quant.cli.render import print_inspection
    from eagle3_quant.cli.render_taps import print_taps

    print_inspection(report)
    print_taps(report.taps)
