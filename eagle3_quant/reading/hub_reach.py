"""Whether the Hub can be reached, asked once per endpoint and process before the first read of a Hub id.

huggingface_hub retries a refused or timed-out request five times with backoff (about 23 s) before it gives up, on
every file. One HEAD of the endpoint with a short timeout and no retry answers first; when it fails, huggingface_hub
is put in offline mode for the rest of the process: files in the local Hub cache still serve, and a read that needs
the network fails at once, reported (`hub_errors.hub_failure`) as the unreachable Hub with the probe's reason.
HF_HUB_OFFLINE=1 set by the user skips the probe: nothing is asked of the network.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PROBE_TIMEOUT_S = 3.0
NETWORK_ERRORS = ("ConnectError", "ConnectTimeout", "ConnectionError", "ReadTimeout", "TimeoutException",
                  "NewConnectionError", "MaxRetryError", "RemoteProtocolError", "ProxyError")
_unreachable: dict[str, str | None] = {}        # endpoint -> the reason it could not be reached (None: reachable)


def _network_error(exc: BaseException) -> bool:
    return type(exc).__name__ in NETWORK_ERRORS or isinstance(exc, ConnectionError | TimeoutError)


def reach_hub() -> None:
    """Ask the endpoint once (one request, no retry); unreachable: offline mode for this process."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    endpoint = constants.ENDPOINT
    if _user_offline():
        return
    if endpoint in _unreachable:
        if _unreachable[endpoint] is not None:
            constants.HF_HUB_OFFLINE = True
        return
    try:
        get_session().head(endpoint, timeout=PROBE_TIMEOUT_S)     # any HTTP answer: the Hub is there
        _unreachable[endpoint] = None
    except Exception as exc:  # noqa: BLE001 - only network failures mean "unreachable"; the read reports the rest
        if not _network_error(exc):
            return
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        _unreachable[endpoint] = reason
        constants.HF_HUB_OFFLINE = True
        loaded = sys.modules.get("datasets.config")      # datasets keeps its own copy once imported
        if loaded is not None:
            loaded.HF_HUB_OFFLINE = True


def _user_offline() -> bool:
    from huggingface_hub import constants

    return constants._is_true(os.environ.get("HF_HUB_OFFLINE"))


def reach_hub_for(name: str | Path) -> None:
    """`reach_hub` when `name` is not a local path (a Hub id is read next)."""
    if not Path(name).expanduser().exists():
        reach_hub()


def unreachable_reason() -> str | None:
    """Why the current endpoint could not be reached, when the probe found it so (offline mode is then ours)."""
    from huggingface_hub import constants

    return None if _user_offline() else _unreachable.get(constants.ENDPOINT)
