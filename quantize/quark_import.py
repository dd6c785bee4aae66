"""The single place quark.torch is imported: only when a quantization actually runs, its C++ kernels built on first
use (`quark_kernels.py`) and transformers' modeling files scanned once per machine (`lean_expert_scan.py`).

``python -m eagle3_quant.quantize.quark_import --warm`` (run by `make setup`) pays both first-run costs up front:
it imports Quark (filling the scan cache) and builds the kernels into torch's extension cache, and prints the
seconds each took.
"""

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
from eagle3_quant.quantize.quark_kernels import build_kernels, defer_kernel_build


def import_quark(verbose: bool = False):
    """Import quark.torch, quiet unless `verbose`.

    Quiet is Quark's shared screen-log level set to ERROR before its loggers exist, not ``QUARK_LOG_LEVEL=error``:
    with that variable Quark 0.13 resets every earlier screen logger's level as each new one is made (101 of them),
    and each reset clears the cache of every logger in the process, ~5,000 resets costing ~5 s of the import
    (`ScreenLogger.set_shared_level`, quark/common/utils/log.py). A QUARK_LOG_LEVEL the user set is kept."""
    if "quark.torch" not in sys.modules and not verbose and "QUARK_LOG_LEVEL" not in os.environ:
        from quark.common.utils.log import ScreenLogger

        ScreenLogger._shared_level = logging.ERROR     # each new screen logger takes it, once
    defer_kernel_build()
    with lean_expert_scan():   # also when another thread is mid-import: `import` then waits for it
        import quark.torch
    if "QUARK_DISABLE_COMPILE" not in os.environ:
        eager_fake_quantize()
    return quark.torch


def eager_fake_quantize() -> None:
    """Quark's fake quantizer run eagerly, as ``QUARK_DISABLE_COMPILE=1`` runs it (a QUARK_DISABLE_COMPILE the user
    set is kept). By default Quark 0.13 `torch.compile`s it (``scaled_fake_quantize_compiled``), a compile of
    3-8 s per process paid for the few calls a one-layer draft makes; the bytes written are the same either way
    (tests/test_quark_eager.py)."""
    from quark.torch.quantization import tensor_quantize

    tensor_quantize.QUARK_DISABLE_COMPILE = True


_background: list[Future] = []


def importing_in_background() -> bool:
    """Is a background import still running (a thread holding the GIL beside this one)?"""
    return any(not future.done() for future in _background)


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
    _background[:] = [f for f in _background if not f.done()] + [future]
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


def warm() -> dict[str, float]:
    """Pay the first-run costs now: the import (fills the scan cache) and the kernel build (torch's cache)."""
    started = time.perf_counter()
    import_quark()
    imported = time.perf_counter()
    build_kernels()
    return {"import quark.torch": round(imported - started, 2),
            "build kernels": round(time.perf_counter() - imported, 2)}


if __name__ == "__main__":
    if sys.argv[1:] != ["--warm"]:
        sys.exit("usage: python -m eagle3_quant.quantize.quark_import --warm")
    print(", ".join(f"{k}: {v} s" for k, v in warm().items()))
