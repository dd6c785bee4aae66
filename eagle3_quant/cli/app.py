"""The Typer application object; command modules register themselves on it through `verb`."""

from __future__ import annotations

from typing import Annotated

import typer

from eagle3_quant.cli.help_format import HELP_OPTIONS, PANEL_OF, SUMMARY_OF, Verb, VerbGroup

app = typer.Typer(
    name="eagle3-quant",
    help="Turn a BF16 Eagle3 draft into an FP8 (AMD Quark) draft that vLLM serves, and prove it still works.",
    cls=VerbGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": HELP_OPTIONS},
)


def version_line() -> str:
    """`eagle3-quant X.Y.Z`, from the installed package's metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"eagle3-quant {version('eagle3-quant')}"
    except PackageNotFoundError:
        return "eagle3-quant (not installed: no package metadata)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit(0)


@app.callback()
def _app(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version, help="Print the version and exit.")] = False) -> None:
    """Turn a BF16 Eagle3 draft into an FP8 (AMD Quark) draft that vLLM serves, and prove it still works."""


def verb(name: str):
    """Register a verb: its panel and one-line summary come from help_format.PANELS (one place)."""
    return app.command(name, cls=Verb, rich_help_panel=PANEL_OF[name], short_help=SUMMARY_OF[name])
