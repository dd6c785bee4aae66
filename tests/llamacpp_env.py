"""Whether llama.cpp's tools (`make setup-llamacpp`) are here, for tests that run them."""

from __future__ import annotations

import pytest

from eagle3_quant.engines.llamacpp.tools import find_tools
from eagle3_quant.errors import EngineNotFoundError


def llamacpp_missing() -> str | None:
    """Why no llama.cpp tools are found (the lookup `gguf` and `bench --engine llamacpp` use), or None."""
    try:
        tools = find_tools()
        tools.build  # noqa: B018 - llama-server --version runs
    except EngineNotFoundError as exc:
        return str(exc)
    return None


needs_llamacpp = pytest.mark.skipif(llamacpp_missing() is not None, reason=str(llamacpp_missing()))


def run(argv: list[str]) -> int:
    """The CLI in this process: its exit status."""
    from eagle3_quant.cli import main

    try:
        main(argv)
    except SystemExit as exc:
        return exc.code
    return 0


def llama_servers() -> list[int]:
    """The llama-server processes running now (none may outlive a verb)."""
    import psutil

    return [p.pid for p in psutil.process_iter(["name", "status"])
            if p.info["name"] == "llama-server" and p.info["status"] != psutil.STATUS_ZOMBIE]
