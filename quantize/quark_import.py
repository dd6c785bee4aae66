"""The single place quark.torch is imported (~10 s, ~20 s bare): only when a quantization actually runs."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from eagle3_quant.quantize.lean_expert_scan import lean_expert_scan


def import_quark(verbose: bool = False):
    """Import quark.torch, quiet unless `verbose` (Quark reads QUARK_LOG_LEVEL once, at import)."""
    if "quark.torch" not in sys.modules and not verbose:
        os.environ.setdefault("QUARK_LOG_LEVEL", "error")
    with lean_expert_scan():   # also when another thread is mid-import: `import` then waits for it
        import quark.torch

    return quark.torch


def import_quark_in_background(verbose: bool = False) -> Future:
    """Start the import in a worker thread; the future's result is (quark.torch, seconds the import took).

    The import is ~10 s of GIL-bound Python on one core (~20 s without `lean_expert_scan`), so streamed
    reading and hashing of the draft (file reads, sha256 and torch reductions release the GIL) run beside it.
    The thread is not a daemon: an error raised meanwhile is reported at once, and the process exits once the
    import ends.
    """

    def timed():
        started = time.perf_counter()
        module = import_quark(verbose)
        return module, time.perf_counter() - started

    pool = ThreadPoolExecutor(1, thread_name_prefix="import-quark")
    future = pool.submit(timed)
    pool.shutdown(wait=False)
    return future


@contextlib.contextmanager
def quark_quiet(verbose: bool = False) -> Iterator[None]:
    """Hide Quark's chatter (stdout, its tqdm bars on stderr) and INFO logs unless `verbose`.
    Failures still surface: Quark raises, and callers wrap the exception."""
    if verbose:
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(previous)
