"""The CLI's `Progress`: plan lines, and the counted work with tokens/s and the time left (util/progress.Throughput)
on stderr: a live bar on a terminal, one line every `LINE_EVERY_S` seconds in a log or pipe."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from eagle3_quant.util.progress import Advance, Throughput

LINE_EVERY_S = 30.0


class TerminalProgress:
    """Draws on the stderr the verb started with: a library's quiet block (Quark's, which swaps sys.stderr for a
    buffer) does not swallow the progress of the work inside it."""

    def __init__(self) -> None:
        self.stream = sys.stderr

    def _console(self):
        from eagle3_quant.cli.data_console import data_console

        return data_console(self.stream)

    def say(self, text: str) -> None:
        self._console().print(text)

    @contextmanager
    def task(self, name: str, total: int, done: int = 0, unit: str = "prompts") -> Iterator[Advance]:
        console = self._console()
        counted = Throughput(total, done)
        if not console.is_terminal:          # logs: a plain line now and then, and one at the end
            printed = {"at": time.perf_counter()}

            def advance(items: int, tokens: int = 0) -> None:
                counted.add(items, tokens)
                if time.perf_counter() - printed["at"] >= LINE_EVERY_S:
                    console.print(f"{name}: {counted.line(unit)}", markup=False)
                    printed["at"] = time.perf_counter()

            yield advance
            console.print(f"{name}: {counted.line(unit)}", markup=False)
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn(name), BarColumn(), TextColumn("{task.fields[line]}"), TimeElapsedColumn(),
                      console=console) as bar:
            task = bar.add_task(name, total=total, completed=done, line=counted.line(unit))

            def advance(items: int, tokens: int = 0) -> None:
                counted.add(items, tokens)
                bar.update(task, advance=items, line=counted.line(unit))

            yield advance
