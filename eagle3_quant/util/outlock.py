"""One writer per OUT: an exclusive ``fcntl.flock`` on ``.OUT.lock`` beside OUT, held from the first check of
OUT to the final rename.

Without ``--force`` a second writer is refused at once while the first holds OUT; with ``--force`` it waits
and runs after it (serialized, never mixed). The lock file is unlinked by its holder on release; a waiter that
wakes up on an unlinked file takes the lock again on the new one. Claims nest within one thread (the API
claims OUT before its first check, the staging helper claims it again).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eagle3_quant.errors import OutputExistsError, ResourceError

LOCK_MARK = ".lock"
_local = threading.local()


def lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}{LOCK_MARK}"


def _held() -> set[Path]:
    if not hasattr(_local, "paths"):
        _local.paths = set()
    return _local.paths


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"


def _acquire(path: Path, out: Path, wait: bool) -> int:
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ResourceError(f"cannot create the lock file {path.name}: {exc.strerror or exc}", path=out) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            pid = _holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutputExistsError(f"another eagle3-quant run (pid {pid}) is writing this folder",
                                        path=out, hint="wait for it to finish, or pass --force to run after "
                                                       "it") from exc
            raise ResourceError(f"cannot lock {path.name}: {exc.strerror or exc}", path=out) from exc
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:          # else the previous holder unlinked it while we waited: lock the new file
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)


@contextmanager
def claim_output(out: Path, force: bool) -> Iterator[Path]:
    """Hold OUT's writer lock (OUT's parent folder must exist); yields OUT resolved."""
    out = Path(out).expanduser().resolve()
    held = _held()
    if out in held:
        yield out
        return
    path = lock_path(out)
    fd = _acquire(path, out, wait=force)
    held.add(out)
    try:
        yield out
    finally:
        held.discard(out)
        try:
            path.unlink()
        except OSError:
            pass
        os.close(fd)
