"""The one console every view prints through: each string it renders (a line, a table cell, a title) is one line,
so a value (a file name, a field read from a record) can never end the line it is printed in or forge one."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.text import Text

from eagle3_quant.errors import one_line

WIDTH_OFF_TERMINAL = 140     # logs and pipes: wide enough that runtime layer names are never cut


class DataConsole(Console):
    def render_str(self, text: str, **kwargs) -> Text:
        return super().render_str(one_line(text), **kwargs)


def data_console(file: TextIO | None = None) -> DataConsole:
    console = DataConsole(file=file, highlight=False)
    return console if console.is_terminal else DataConsole(file=file, highlight=False, width=WIDTH_OFF_TERMINAL)
