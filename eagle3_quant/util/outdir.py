"""Write outputs into a hidden sibling folder and rename it into place only on success.

Every temporary folder of a run is named ``.OUT.partial-[PURPOSE-]PID``: on any failure or Ctrl-C it is
removed; after a SIGKILL it stays, and the next run for the same OUT removes it (its PID is dead).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eagle3_quant.errors import OutputExistsError, ResourceError
from eagle3_quant.util.interrupts import requested as interrupt_requested
from eagle3_quant.util.outlock import claim_output

PARTIAL_MARK = ".partial-"
OLD_MARK = ".old-"
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "StorageFull")


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


def is_disk_full(exc: BaseException | None) -> bool:
    """True when `exc` or its cause is a disk-full error, also when a library wrapped it in text (safetensors)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        if any(text in str(exc) for text in DISK_FULL_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _remove_stale_partials(out: Path) -> None:
    """Folders left by a killed run (its pid no longer alive) are deleted."""
    for mark in (PARTIAL_MARK, OLD_MARK):
        for stale in out.parent.glob(f".{out.name}{mark}*"):
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


def _make_parents(folder: Path) -> list[Path]:
    """mkdir -p, returning the folders it created (deepest first) so a failure can remove them."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir()
    return missing


@contextmanager
def claimed_output(out: Path, force: bool, src: Path | None = None) -> Iterator[Path]:
    """Hold OUT's writer lock (see outlock.py) from the first check to the final rename; yields OUT resolved.

    OUT is checked against a local `src` first (nothing is created inside a source). Folders created for
    OUT's parent are removed again if they are still empty at the end.
    """
    out = Path(out).expanduser().resolve()
    if src is not None and Path(src).expanduser().exists():
        check_output_target(out, Path(src).expanduser(), force=True)
    try:
        created = _make_parents(out.parent)
    except OSError as exc:
        raise ResourceError(f"cannot create the output folder: {exc.strerror or exc}", path=out) from exc
    try:
        with claim_output(out, force):
            yield out
    finally:
        for folder in created:
            _remove_if_empty(folder)


@contextmanager
def staged_output(out: Path, src: Path | None, force: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside OUT; on success it replaces OUT, on any failure it is removed.

    A disk-full error while writing becomes a ``ResourceError`` naming OUT. OUT's writer lock is held throughout.
    """
    with claimed_output(out, force, src) as claimed:
        yield from _staged(claimed, src, force)


def _staged(out: Path, src: Path | None, force: bool) -> Iterator[Path]:
    out = check_output_target(out, src, force)
    staging = out.parent / f".{out.name}{PARTIAL_MARK}{os.getpid()}"
    created: list[Path] = []
    try:   # one block from mkdir on: a signal arriving just after mkdir still removes the folder
        try:
            created = _make_parents(out.parent)
            _remove_stale_partials(out)
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
        except OSError as exc:
            raise ResourceError(f"cannot create the output folder: {exc.strerror or exc}", path=out) from exc
        yield staging
        if interrupt_requested():   # Ctrl-C that a library swallowed: never put OUT in place
            raise KeyboardInterrupt
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:
            _remove_if_empty(folder)
        if is_disk_full(exc) and not isinstance(exc, ResourceError):
            free = shutil.disk_usage(out.parent).free if out.parent.exists() else 0
            raise ResourceError(f"disk full while writing the output ({free / 1e9:.2f} GB free after removing "
                                "the partial output); nothing was kept", path=out) from exc
        raise
    move_into_place(staging, out)


def move_into_place(staging: Path, out: Path) -> None:
    """Rename a finished folder to OUT; an existing OUT is moved aside first and deleted after."""
    if out.exists():
        old = out.parent / f".{out.name}{OLD_MARK}{os.getpid()}"
        out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        staging.rename(out)


def scratch_beside(staging: Path, purpose: str):
    """A hidden folder beside a staging folder (same OUT, same pid) for intermediate files; always removed."""
    prefix, pid = staging.name.rsplit("-", 1)
    return _scratch(staging.parent / f"{prefix}-{purpose}-{pid}")


def scratch_for(out: Path, purpose: str):
    """A hidden folder beside OUT, named like its staging folder, for work done before staging starts."""
    return _scratch(out.parent / f".{out.name}{PARTIAL_MARK}{purpose}-{os.getpid()}")


@contextmanager
def _scratch(folder: Path) -> Iterator[Path]:
    shutil.rmtree(folder, ignore_errors=True)
    created: list[Path] = []
    try:   # as in `_staged`: the folder is removed even when a signal lands right after its mkdir
        try:
            created = _make_parents(folder)
        except OSError as exc:
            raise ResourceError(f"cannot create a working folder: {exc.strerror or exc}", path=folder) from exc
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for parent in created[1:]:
            _remove_if_empty(parent)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass
