"""A calibration set is captured into a hidden sibling of OUT that survives a kill and is resumed by the
same command; it becomes OUT (rename) only once complete, so OUT never holds a half-written set."""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

from eagle3_quant.errors import DraftFormatError, OutputExistsError
from eagle3_quant.records.calibration import (
    INDEX_NAME,
    CalibrationInfo,
    CalibrationSet,
    CalibrationWriter,
    load_calibration,
)
from eagle3_quant.util.outdir import check_output_target, move_into_place

LOCK_NAME = ".lock"


def staging_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.calib-partial"


def check_inputs_apart(out: Path, *inputs: Path | None) -> None:
    """OUT must not be, contain or lie inside an input folder."""
    for src in inputs:
        if src is not None and src.exists():
            check_output_target(out, src, force=True)


def finished_set(out: Path, info: CalibrationInfo, force: bool) -> CalibrationSet | None:
    """OUT as it stands: the same complete set, every shard as written (nothing to do), absent (None), or refused
    without --force (another set, or a damaged one)."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise OutputExistsError("exists and is not a folder", path=out)
    existing = None
    if (out / INDEX_NAME).exists():
        try:
            existing = load_calibration(out)
        except DraftFormatError:
            existing = None
    damaged = existing.shard_problems() if existing is not None else []
    if existing is not None and not existing.info.differences(info) and not damaged:
        return existing
    if force:
        return None
    what = ("already exists" if existing is None else f"holds a damaged calibration set ({damaged[0]})" if damaged
            else f"holds a calibration set made with other options ({', '.join(existing.info.differences(info))})")
    raise OutputExistsError(what, path=out, hint="pass --force to replace it")


class ResumableOutput:
    """Open the staging folder (resuming a matching interrupted run), hold a lock, rename to OUT at the end."""

    def __init__(self, out: Path, info: CalibrationInfo, force: bool, shard_samples: int, shard_bytes: int):
        self.out, self.info, self.force = out, info, force
        self.staging = staging_dir(out)
        self.shard_samples, self.shard_bytes = shard_samples, shard_bytes
        self._lock = None

    def open(self) -> CalibrationWriter:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.staging.mkdir(exist_ok=True)
        self._lock = (self.staging / LOCK_NAME).open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock.close()
            raise OutputExistsError("another calibrate run is writing this set", path=self.staging) from exc
        self._discard_if_foreign()
        return CalibrationWriter(self.staging, self.info, self.shard_samples, self.shard_bytes, mark_incomplete=True)

    def _discard_if_foreign(self) -> None:
        """A run with other options is refused; with --force any run is deleted; debris before a first shard is
        cleared."""
        index = self.staging / INDEX_NAME
        try:
            existing = load_calibration(self.staging, allow_partial=True) if index.exists() else None
        except DraftFormatError:
            existing = None
        diffs = existing.info.differences(self.info) if existing is not None else []
        if diffs and not self.force:
            self.close()
            raise OutputExistsError(f"an interrupted run with other options ({', '.join(diffs)}) is waiting here",
                                    path=self.staging, hint="re-run it with its own options to finish it, or pass "
                                    "--force to start over")
        if existing is None or diffs or self.force:         # --force: every hidden state of OUT starts over
            for child in self.staging.iterdir():
                if child.name != LOCK_NAME:
                    shutil.rmtree(child) if child.is_dir() else child.unlink()

    def finish(self, writer: CalibrationWriter) -> Path:
        writer.close()
        (self.staging / LOCK_NAME).unlink()
        move_into_place(self.staging, self.out)
        self.close()
        return self.out

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None
