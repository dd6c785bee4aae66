"""The single place quark.torch is imported (~20 s): only when a quantization actually runs."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator


def import_quark(verbose: bool = False):
    """Import quark.torch, quiet unless `verbose` (Quark reads QUARK_LOG_LEVEL once, at import)."""
    if "quark.torch" not in sys.modules and not verbose:
        os.environ.setdefault("QUARK_LOG_LEVEL", "error")
    import quark.torch

    return quark.torch


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
