"""What the source draft says about itself that a derivative must carry: its license and its Hub id."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

LICENSE_KEYS = ("license", "license_name", "license_link")
# huggingface_hub's cache layout: .../models--ORG--NAME/snapshots/<commit>/
HUB_CACHE_SNAPSHOT = re.compile(r"models--([^/]+?)--([^/]+)/snapshots/[0-9a-f]{40}/?$")


def _front_matter(readme: Path) -> dict[str, Any]:
    try:
        text = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    if not text.startswith("---"):
        return {}
    end = text.find("\n---", 3)
    if end < 0:
        return {}
    import yaml

    try:
        data = yaml.safe_load(text[3:end])
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def source_card_info(folder: str | Path) -> dict[str, str]:
    """License fields from the source's README front matter, else from its config.json; {} when unknown."""
    folder = Path(folder)
    found = {k: v for k, v in _front_matter(folder / "README.md").items() if k in LICENSE_KEYS and isinstance(v, str)}
    if "license" not in found:
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            config = {}
        if isinstance(config, dict) and isinstance(config.get("license"), str):
            found["license"] = config["license"]
    return found


def repo_id_from_cache_path(path: str | Path) -> str | None:
    """`.../models--org--name/snapshots/<sha>` (a Hub download) -> `org/name`; anything else -> None."""
    match = HUB_CACHE_SNAPSHOT.search(Path(path).as_posix())
    return f"{match.group(1)}/{match.group(2)}" if match else None
