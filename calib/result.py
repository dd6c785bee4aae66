"""What a calibration run returns, and its terminal output (plan, progress bar)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.calib.format import CalibrationInfo, CalibrationSet

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class CalibrationResult:
    path: Path
    samples: int                  # in the finished set
    tokens: int
    seconds: float                # wall time of this call
    tokens_per_second: float      # capture throughput of this call (0.0 when nothing had to be captured)
    taps: tuple[int, ...]         # transformers hidden_states indices (input of layer k)
    tap_convention: str           # how the draft config counts its ids: input or output
    dtype: str
    bytes: int                    # on disk
    resumed_samples: int          # already captured by an earlier, interrupted run
    captured_samples: int         # captured by this call
    captured_tokens: int
    capture_seconds: float
    generated_tokens: int         # appended by the target (--generate-tokens), this call
    cut_generations: int          # continuations cut where the full pass disagreed with generate()
    source: str
    info: CalibrationInfo

    @property
    def tap_note(self) -> str | None:
        """One line when the serving engine feeds other layers than the draft was trained on."""
        from eagle3_quant.calib.engine_taps import TapRecord

        record = TapRecord.from_extra(self.info.extra or {})
        return record.note if record else None


def set_bytes(calib: CalibrationSet) -> int:
    return sum((calib.path / s["file"]).stat().st_size for s in calib.shards)


def estimate_bytes(tokens: int, hidden_size: int, dtype: str) -> int:
    """Aux states plus two int64 id vectors per token (headers are noise)."""
    return tokens * (3 * hidden_size * DTYPE_BYTES[dtype] + 16)


def _console():
    from rich.console import Console

    console = Console(file=sys.stderr, highlight=False)
    return console if console.is_terminal else Console(file=sys.stderr, highlight=False, width=140)


def say(verbose: bool, text: str) -> None:
    if verbose:
        _console().print(text)


@contextmanager
def progress_bar(verbose: bool, total: int, done: int):
    """Yields advance(samples, tokens); a rich bar with tokens/s when verbose, a no-op otherwise."""
    if not verbose:
        yield lambda samples, tokens: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("capture"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=_console()) as bar:
        task = bar.add_task("capture", total=total, completed=done, rate="")
        counted = {"tokens": 0}

        def advance(samples: int, tokens: int) -> None:
            counted["tokens"] += tokens
            elapsed = bar.tasks[0].elapsed or 1e-9
            bar.update(task, advance=samples, rate=f"{counted['tokens'] / elapsed:,.0f} tok/s")

        yield advance
