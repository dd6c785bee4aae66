"""What the source draft says about itself that a derivative must carry: its license and its Hub id."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.limits import load_json_file, load_yaml_text, read_limited_text

LICENSE_KEYS = ("license", "license_name", "license_link")
# huggingface_hub's cache layout: .../models--ORG--NAME/snapshots/<commit>/
HUB_CACHE_SNAPSHOT = re.compile(r"models--([^/]+?)--([^/]+)/snapshots/[0-9a-f]{40}/?$")


def _front_matter(readme: Path) -> dict[str, Any]:
    try:
        text = read_limited_text(readme)
    except (OSError, UnicodeDecodeError, DraftFormatError):
        return {}
    if not text.startswith("---"):
        return {}
    end = text.find("\n---", 3)
    if end < 0:
        return {}
    try:
        data = load_yaml_text(text[3:end], readme)
    except DraftFormatError:      # not YAML, or what the limited reader refuses (aliases, too deep, too large)
        return {}
    return data if isinstance(data, dict) else {}


def source_card_info(folder: str | Path) -> dict[str, str]:
    """License fields from the source's README front matter, else from its config.json; {} when unknown."""
    folder = Path(folder)
    found = {k: v for k, v in _front_matter(folder / "README.md").items() if k in LICENSE_KEYS and isinstance(v, str)}
    if "license" not in found:
        try:
            config = load_json_file(folder / "config.json")
        except (OSError, DraftFormatError):
            config = {}
        if isinstance(config, dict) and isinstance(config.get("license"), str):
            found["license"] = config["license"]
    return found


def repo_id_from_cache_path(path: str | Path) -> str | None:
    """`.../models--org--name/snapshots/<sha>` (a Hub download) -> `org/name`; anything else -> None."""
    match = HUB_CACHE_SNAPSHOT.search(Path(path).as_posix())
    return f"{match.group(1)}/{match.group(2)}" if match else None
