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


def reach_hub(endpoint: str | None = None) -> str | None:
    """Ask ENDPOINT (default: huggingface_hub's) once (one request, no retry); unreachable: offline mode for this
    process. Returns why it could not be reached (None: reachable, or the user's own offline mode)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    endpoint = endpoint or constants.ENDPOINT
    if user_offline():
        return None
    if endpoint not in _unreachable:
        _set_offline(False)             # another endpoint's answer must not refuse this request
        try:
            get_session().head(endpoint, timeout=PROBE_TIMEOUT_S)     # any HTTP answer: the Hub is there
            _unreachable[endpoint] = None
        except Exception as exc:  # noqa: BLE001 - only network failures mean "unreachable"; the read reports the rest
            if not _network_error(exc):
                return None
            _unreachable[endpoint] = " ".join(str(exc).split())[:160] or type(exc).__name__
    _set_offline(_unreachable[endpoint] is not None)
    return _unreachable[endpoint]


def _set_offline(offline: bool) -> None:
    """Offline mode follows the endpoint now in use: one found unreachable turns it on, a reachable one off."""
    from huggingface_hub import constants

    constants.HF_HUB_OFFLINE = offline
    loaded = sys.modules.get("datasets.config")      # datasets keeps its own copy once imported
    if loaded is not None:
        loaded.HF_HUB_OFFLINE = offline


def forget() -> None:
    """Forget every probe's answer and leave offline mode to the environment (tests: one process, many Hubs)."""
    _unreachable.clear()
    _set_offline(user_offline())


def user_offline() -> bool:
    """HF_HUB_OFFLINE set by the user (not by the probe)."""
    from huggingface_hub import constants

    return constants._is_true(os.environ.get("HF_HUB_OFFLINE"))


def reach_hub_for(name: str | Path) -> None:
    """`reach_hub` when `name` is not a local path (a Hub id is read next)."""
    if not Path(name).expanduser().exists():
        reach_hub()


def unreachable_reason() -> str | None:
    """Why the current endpoint could not be reached, when the probe found it so (offline mode is then ours)."""
    from huggingface_hub import constants

    return None if user_offline() else _unreachable.get(constants.ENDPOINT)
