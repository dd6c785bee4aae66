"""The single place quark.torch is imported (~20 s): only when a quantization actually runs."""

from __future__ import annotations

import os
import sys


def import_quark(verbose: bool = False):
    """Import quark.torch, quiet unless `verbose` (Quark reads QUARK_LOG_LEVEL once, at import)."""
    if "quark.torch" not in sys.modules and not verbose:
        os.environ.setdefault("QUARK_LOG_LEVEL", "error")
    import quark.torch

    return quark.torch
