"""One line for every failed Hub read: the Hub cannot be reached, the repository does not exist, or HF_HUB_OFFLINE is
set and nothing of the repository is cached. Every reader of the Hub (drafts, targets, their configs, tokenizers,
lm_heads) goes through `hub_reads`; the CLI turns whatever still escapes with the same `hub_failure`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from eagle3_quant.errors import Eagle3QuantError, HubError, SourceNotFoundError
from eagle3_quant.reading.hub_reach import NETWORK_ERRORS, reach_hub, unreachable_reason

URL_REPO = re.compile(r"/(?:api/(?:models|datasets)/)?(?:datasets/)?([A-Za-z0-9][\w.-]*/[\w.-]+)"
                      r"/(?:resolve|revision|tree)/")


class HubUnreachableError(HubError):
    """The Hub could not be asked (refused, timed out, offline mode with nothing cached)."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _settings() -> tuple[str, bool]:
    from huggingface_hub import constants

    return constants.ENDPOINT, bool(constants.is_offline_mode())


def _reason(exc: BaseException) -> str:
    """The innermost network reason ('[Errno 111] Connection refused'), not huggingface_hub's advice."""
    for link in reversed(list(_chain(exc))):
        if type(link).__name__ in NETWORK_ERRORS or isinstance(link, (ConnectionError, TimeoutError)):
            text = str(link).strip().splitlines()[0] if str(link).strip() else type(link).__name__
            return text[:160]
    return type(exc).__name__


def _repo_from(exc: BaseException) -> str | None:
    for link in _chain(exc):
        found = URL_REPO.search(str(link))
        if found:
            return found.group(1)
    return None


def hub_failure(exc: BaseException, repo_id: str | None = None) -> Eagle3QuantError | None:
    """The error to show for `exc` when it is a failed Hub read (anywhere in its chain), else None. A file missing
    from a repository that exists is not one: the caller says which file its reading needed."""
    if isinstance(exc, Eagle3QuantError):
        return None
    try:
        from huggingface_hub import errors
    except ImportError:      # pragma: no cover - huggingface_hub is a dependency
        return None
    endpoint, offline = _settings()
    links = list(_chain(exc))
    repo = repo_id or _repo_from(exc)
    for link in links:
        if isinstance(link, errors.GatedRepoError):
            return SourceNotFoundError(f"the repository is gated on the Hub at {endpoint}: accept its terms, then "
                                       "set HF_TOKEN or run `hf auth login`", path=repo)
        if isinstance(link, errors.RepositoryNotFoundError):
            return SourceNotFoundError(f"no such repository on the Hub at {endpoint} (or it is private and no "
                                       "token with access is set)", path=repo)
        if isinstance(link, errors.RevisionNotFoundError):
            return SourceNotFoundError(f"no such revision on the Hub at {endpoint}", path=repo)
    offline_link = next((lk for lk in links if isinstance(lk, errors.OfflineModeIsEnabled)), None)
    local_miss = next((lk for lk in links if isinstance(lk, errors.LocalEntryNotFoundError)), None)
    probed = unreachable_reason()
    if probed is not None and (offline_link is not None or local_miss is not None):
        return HubUnreachableError(f"the Hub at {endpoint} cannot be reached ({probed}) and nothing of it is in "
                                   "the local Hub cache", path=repo)
    if offline_link is not None or (local_miss is not None and offline):
        return HubUnreachableError("HF_HUB_OFFLINE is set and nothing of it is in the local Hub cache (unset "
                                   "HF_HUB_OFFLINE to download it, or give a local folder)", path=repo)
    network = next((lk for lk in links if type(lk).__name__ in NETWORK_ERRORS), None)
    if local_miss is not None or network is not None:
        return HubUnreachableError(f"the Hub at {endpoint} cannot be reached ({_reason(exc)}) and nothing of it is "
                                   "in the local Hub cache", path=repo)
    http = next((lk for lk in links if isinstance(lk, errors.HfHubHTTPError)
                 and not isinstance(lk, errors.EntryNotFoundError)), None)
    if http is not None:
        status = getattr(getattr(http, "response", None), "status_code", None)
        first = str(http).strip().splitlines()[0] if str(http).strip() else type(http).__name__
        return HubError(f"the Hub at {endpoint} failed the request (HTTP {status}): {first[:200]}", status=status,
                        path=repo)
    return None


@contextmanager
def hub_reads(repo_id: str) -> Iterator[None]:
    """Reads of `repo_id` from the Hub inside: a failure to reach or find it becomes one error naming it (an
    unreachable Hub is found out by one request first, `hub_reach.py`)."""
    reach_hub()
    try:
        yield
    except Exception as exc:
        error = hub_failure(exc, repo_id)
        if error is None:
            raise
        raise error from exc
