"""The one number type of the CLI: every numeric option of every verb parses with `number(RANGE)`, a range from
eagle3_quant/options.py, so inf, nan and absurd values are refused at the option in one line, before any work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from eagle3_quant.options import Number


def number(bound: Number) -> Callable[[str], int | float]:
    """typer's `parser=` for an option holding one number of `bound`."""

    def parse(text: str) -> int | float:
        if not isinstance(text, str):    # a default, already a number
            return text
        try:
            return bound.parse(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    parse.bound = bound      # what tests/test_cli_numbers.py checks every numeric option for
    return parse


def numbers(bound: Number, text: str | None, option: str) -> list[int | float] | None:
    """A comma-separated list of numbers of `bound` (`--aux-layer-ids 2,15,28`); None when not given."""
    if text is None:
        return None
    try:
        return [bound.parse(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r}: {exc}", param_hint=f"'{option}'") from None


def number_option(bound: Number, *names: str, help: str, **more) -> Any:
    """typer.Option holding one number of `bound` (`more`: typer.Option's other arguments)."""
    return typer.Option(*names, parser=number(bound), help=help, **more)
