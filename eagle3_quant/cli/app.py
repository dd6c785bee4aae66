"""The Typer application object; command modules register themselves on it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="eagle3-quant",
    help="Turn a BF16 Eagle3 draft into an FP8 (AMD Quark) draft that vLLM serves, and prove it still works.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
