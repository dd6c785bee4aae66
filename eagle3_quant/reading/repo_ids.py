"""Hub repo ids checked before any request: ORG/NAME as huggingface_hub itself validates it
(`huggingface_hub.utils.validate_repo_id`: allowed characters, no `--` or `..`, at most 96 characters)."""

from __future__ import annotations

import re

ORG_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def repo_id_problem(text: object) -> str | None:
    """Why `text` is not a Hub model repo id ORG/NAME (None when it is one)."""
    if not isinstance(text, str) or not ORG_NAME.match(text):
        return "not a Hub repo id (ORG/NAME)"
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError as exc:
        return f"not a valid Hub repo id ({str(exc).splitlines()[0].rstrip('.')})"
    return None


def is_repo_id(text: object) -> bool:
    return repo_id_problem(text) is None
