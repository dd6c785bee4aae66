"""Write outputs into a hidden sibling folder and rename it into place only on success."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eagle3_quant.errors import OutputExistsError

PARTIAL_MARK = ".partial-"


def check_output_target(out: Path, src: Path | None, force: bool) -> Path:
    """`src` None: the output is made from nothing on disk (a new draft), only OUT itself is checked."""
    out = out.resolve()
    if src is not None:
        src = src.resolve()
        if out == src:
            raise OutputExistsError("OUT is the source folder; the source is never modified", path=out)
        if out.is_relative_to(src):
            raise OutputExistsError("OUT lies inside the source folder; choose a folder outside it", path=out)
        if src.is_relative_to(out):
            raise OutputExistsError("OUT contains the source folder; --force would delete the source", path=out)
    if out.exists() and not force:
        raise OutputExistsError("already exists", path=out, hint="pass --force to replace it")
    if out.exists() and not out.is_dir():
        raise OutputExistsError("exists and is not a folder", path=out)
    return out


def _remove_stale_partials(out: Path) -> None:
    """Folders left by a killed run (its pid no longer alive) are deleted."""
    for stale in out.parent.glob(f".{out.name}{PARTIAL_MARK}*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def staged_output(out: Path, src: Path | None, force: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside OUT; on success it replaces OUT, on any failure it is removed."""
    out = check_output_target(out, src, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(out)
    staging = out.parent / f".{out.name}{PARTIAL_MARK}{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    move_into_place(staging, out)


def move_into_place(staging: Path, out: Path) -> None:
    """Rename a finished folder to OUT; an existing OUT is moved aside first and deleted after."""
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(out)
