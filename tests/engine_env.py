"""Whether vLLM's engine environment (`make setup-engine`) is here, for tests that run the real engine."""

from __future__ import annotations

import pytest

from eagle3_quant.engines import environment
from eagle3_quant.errors import EngineNotFoundError


def engine_missing() -> str | None:
    """Why no engine Python is found (the lookup `bench` and `calibrate --backend vllm` use), or None."""
    try:
        environment.find_engine_python()
    except EngineNotFoundError as exc:
        return str(exc)
    return None


needs_engine = pytest.mark.skipif(engine_missing() is not None, reason=str(engine_missing()))
