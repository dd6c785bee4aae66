"""What published files may say about local inputs: a folder's name, never its absolute path.

The card, the manifest and the validation report are uploaded by `push`; a local source, reference, calibration
set or target is recorded there by its folder name (its files by their hashes). The absolute source path, which
`validate` uses as its default reference, is kept in a hidden file of OUT that is never hashed nor published.
"""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_quant.reading.source import REPO_ID

LOCAL_RECORD = ".eagle3_quant.local.json"


def public_name(value: str | Path | None) -> str | None:
    """A Hub repo id as is; a local path (existing, absolute or relative) as its last component."""
    if value is None:
        return None
    text = str(value)
    if not text:
        return text
    if isinstance(value, str) and REPO_ID.match(text) and not Path(text).expanduser().exists():
        return text
    return Path(text).expanduser().name or text


def write_local_record(out: Path, source_path: Path) -> None:
    (out / LOCAL_RECORD).write_text(json.dumps({"source_path": str(source_path)}, allow_nan=False) + "\n")


def recorded_source_path(out: Path) -> Path | None:
    """The absolute source folder recorded at quantization (None when unknown or unreadable)."""
    try:
        data = json.loads((out / LOCAL_RECORD).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    value = data.get("source_path") if isinstance(data, dict) else None
    return Path(value) if isinstance(value, str) and Path(value).is_absolute() else None
