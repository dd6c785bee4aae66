"""Talk to the Hub safely: the endpoint the environment names, a token that never leaks, one error type.

- `HF_ENDPOINT` and `HF_HUB_DISABLE_XET` are read from the environment at call time (huggingface_hub reads
  them once at import; a value set later would otherwise send requests to the public Hub).
- The token comes from huggingface_hub's own lookup (`HF_TOKEN`, then the login file under `HF_HOME`). While a
  session is open every log record is scrubbed of it, and every error leaving the session is rebuilt from
  scrubbed text, with the original exception dropped from the chain.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from eagle3_quant.errors import Eagle3QuantError, HubAuthError, HubError, PublishError
from eagle3_quant.reading.hub_errors import HubUnreachableError, hub_failure
from eagle3_quant.reading.hub_reach import reach_hub, user_offline

T = TypeVar("T")
MASK = "hf_***"
TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})


def scrub(text: str, token: str | None) -> str:
    return text.replace(token, MASK) if token else text


def resolve_token() -> str:
    from huggingface_hub import get_token

    token = get_token()
    if not token:
        raise HubAuthError("no Hub token", hint="set HF_TOKEN, or run `hf auth login` (token file under HF_HOME)")
    return token


def _environment_endpoint() -> str:
    """The endpoint HF_ENDPOINT names now (huggingface_hub's own copy was read at its import)."""
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")


def _sync_constants() -> dict[str, Any]:
    """Point huggingface_hub at the environment's endpoint; return the previous values to restore."""
    from huggingface_hub import constants

    endpoint = _environment_endpoint()
    wanted = {
        "ENDPOINT": endpoint,
        "HUGGINGFACE_CO_URL_TEMPLATE": endpoint + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HUB_DISABLE_XET": constants._is_true(os.environ.get("HF_HUB_DISABLE_XET")) or constants.HF_HUB_DISABLE_XET,
    }
    previous = {name: getattr(constants, name) for name in wanted}
    for name, value in wanted.items():
        setattr(constants, name, value)
    return previous


@contextmanager
def _scrubbed_logs(token: str) -> Iterator[None]:
    old_factory = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = old_factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error handling
            return record
        if token in message:
            record.msg, record.args = scrub(message, token), None
        return record

    logging.setLogRecordFactory(factory)
    try:
        yield
    finally:
        logging.setLogRecordFactory(old_factory)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def translate(exc: BaseException, token: str | None, endpoint: str, repo_id: str | None) -> Eagle3QuantError:
    """One clear, token-free error for anything the Hub client raised."""
    if isinstance(exc, Eagle3QuantError):
        return exc
    cause = exc
    while _status(cause) is None and cause.__cause__ is not None:  # LFS errors wrap the HTTP error
        cause = cause.__cause__
    status = _status(cause)
    text = scrub(str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__, token)
    server = scrub(str(getattr(cause, "server_message", "") or "").strip(), token)
    detail = f"{text}" + (f" - server says: {server}" if server and server not in text else "")
    where = repo_id or endpoint
    if status == 401:
        return HubAuthError(f"the Hub at {endpoint} rejected the token (401 Unauthorized): {detail}", status=401,
                            path=where, hint="check HF_TOKEN or run `hf auth login`")
    if status == 403:
        return HubAuthError(f"the token may not write here (403 Forbidden): {detail}", status=403, path=where,
                            hint="use a token with write access to this namespace")
    if status is not None:
        retry = " after retries" if status in TRANSIENT else ""
        return HubError(f"Hub request failed{retry} (HTTP {status}): {detail}", status=status, path=where)
    unreachable = hub_failure(exc, repo_id)          # refused, timed out, offline: the readers' one line
    if isinstance(unreachable, HubUnreachableError):
        return HubUnreachableError(scrub(unreachable.message, token), path=where)
    if isinstance(cause, ValueError) and "yaml" in text.lower():
        return PublishError(f"the Hub rejected the model card metadata: {detail}", path=where)
    return HubError(f"cannot complete the Hub request at {endpoint}: {type(cause).__name__}: {detail}", path=where)


def require_online(repo_id: str) -> None:
    """Publishing needs the Hub: HF_HUB_OFFLINE, or an endpoint that cannot be reached, is refused in one line
    before anything is written or sent."""
    if user_offline():
        raise HubUnreachableError("HF_HUB_OFFLINE is set: publishing needs the Hub", path=repo_id,
                                  hint="unset HF_HUB_OFFLINE")
    endpoint = _environment_endpoint()
    reason = reach_hub(endpoint)
    if reason is not None:
        raise HubUnreachableError(f"the Hub at {endpoint} cannot be reached ({reason}): publishing needs the Hub",
                                  path=repo_id)


class HubSession:
    """Calls into huggingface_hub with the token scrubbed from whatever comes back."""

    def __init__(self, token: str, repo_id: str) -> None:
        from huggingface_hub import HfApi, constants

        self.token, self.repo_id = token, repo_id
        self.endpoint = constants.ENDPOINT
        require_online(repo_id)
        self.api = HfApi(endpoint=self.endpoint, token=token)

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every client error is rebuilt token-free below
            raise translate(exc, self.token, self.endpoint, self.repo_id) from None


@contextmanager
def hub_session(token: str, repo_id: str) -> Iterator[HubSession]:
    from huggingface_hub import constants

    previous = _sync_constants()
    try:
        with _scrubbed_logs(token):
            yield HubSession(token, repo_id)
    finally:
        for name, value in previous.items():
            setattr(constants, name, value)
