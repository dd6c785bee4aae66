"""A local Hub-compatible HTTP server for tests: `with running_hub(tokens) as hub: ...` (hub.url, hub.requests)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .server import Fault, HubHTTPServer, Recorded

__all__ = ["Fault", "HubHTTPServer", "Recorded", "running_hub"]


@contextmanager
def running_hub(tokens: dict[str, str]) -> Iterator[HubHTTPServer]:
    """Serve on 127.0.0.1 at a free port in a daemon thread; `tokens` maps token -> user name."""
    server = HubHTTPServer(tokens)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
