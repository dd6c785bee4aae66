"""The CLI's `Progress`: plan lines and a rich progress bar (with tokens/s) on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from eagle3_quant.util.progress import Advance


def _console():
    from rich.console import Console

    console = Console(file=sys.stderr, highlight=False)
    return console if console.is_terminal else Console(file=sys.stderr, highlight=False, width=140)


class TerminalProgress:
    def say(self, text: str) -> None:
        _console().print(text)

    @contextmanager
    def task(self, name: str, total: int, done: int = 0) -> Iterator[Advance]:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        with Progress(TextColumn(name), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                      TimeElapsedColumn(), TimeRemainingColumn(), console=_console()) as bar:
            task = bar.add_task(name, total=total, completed=done, rate="")
            counted = {"tokens": 0}

            def advance(items: int, tokens: int = 0) -> None:
                counted["tokens"] += tokens
                elapsed = bar.tasks[0].elapsed or 1e-9
                rate = f"{counted['tokens'] / elapsed:,.0f} tok/s" if counted["tokens"] else ""
                bar.update(task, advance=items, rate=rate)

            yield advance
