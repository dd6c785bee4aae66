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
    """Hide Quark's stdout chatter and INFO logs unless `verbose`."""
    if verbose:
        yield
        return
    previous, tqdm_env = logging.root.manager.disable, os.environ.get("TQDM_DISABLE")
    logging.disable(logging.INFO)
    os.environ["TQDM_DISABLE"] = "1"      # Quark's progress bars
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(previous)
        if tqdm_env is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = tqdm_env
