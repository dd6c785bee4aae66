from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb
from eagle3_quant.export.options import PushOptions
from eagle3_quant.options import help_of


@verb("card")
def card_command(
    out: Annotated[Path, typer.Argument(help="Quantized draft folder.")],
    repo_id: Annotated[str | None, typer.Option("--repo-id", help="Repository the card will live in (ORG/NAME).")]
    = None,
    target: Annotated[str | None, typer.Option(help=help_of(PushOptions, "target"))] = None,
    base_model: Annotated[str | None, typer.Option(help=help_of(PushOptions, "base_model"))] = None,
    print_only: Annotated[bool, typer.Option("--print", help="Print the card instead of writing README.md.")]
    = False,
) -> None:
    """Write OUT/README.md, the model card, from the manifest and validation report (push does this too)."""
    from eagle3_quant.export.card import make_card

    card = make_card(out, repo_id, target=target, base_model=base_model, write=not print_only)
    typer.echo(card.text if print_only
               else f"wrote {card.path} ({card.size} bytes; validation {card.validation.state})")
