"""What published files may say about local inputs: a folder's name, never its absolute path.

The card, the manifest and the validation report are uploaded by `push`; a local source, reference, calibration
set or target is recorded there by its folder name (its files by their hashes), and the recorded command by its
verb, its flags and those names (`public_command`). The absolute source path, which `validate` uses as its default
reference, is kept in a hidden file of OUT that is never hashed nor published.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eagle3_quant.errors import ManifestError
from eagle3_quant.reading.limits import load_json_file
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


def _public_value(value: Any) -> str:
    """An option's value as the CLI takes it: a path by its name, anything else as written."""
    text = str(value)
    if isinstance(value, Path) or (isinstance(value, str) and (os.sep in text or text.startswith("~"))
                                   and not REPO_ID.match(text)):
        return public_name(text) or text
    return text


def public_command(verb: str, inputs: Sequence[str | Path], options: Any) -> list[str]:
    """`eagle3-quant VERB INPUT... --flag value ...` equivalent to the call: the inputs by their public names and
    every field of the options dataclass that differs from its default as its CLI flag (`exclude` -> `--exclude`,
    once per value; a true boolean alone), paths by their names. The same for a CLI run and an API call, and free
    of local paths (`tests/test_public_command.py` parses it back with the CLI)."""
    argv = ["eagle3-quant", verb, *(public_name(x) or str(x) for x in inputs)]
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if value == default or value is None:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, tuple | list):
            for item in value:
                argv += [flag, _public_value(item)]
        else:
            argv += [flag, _public_value(value)]
    return argv


def public_argv(argv: Sequence[str]) -> list[str]:
    """A recorded command with every local path argument reduced to its name (for manifests written before
    `public_command`)."""
    return [_public_value(a) if not a.startswith("-") else a for a in argv]


def write_local_record(out: Path, source_path: Path, target_path: Path | None = None) -> None:
    record = {"source_path": str(source_path)} | ({"target_path": str(target_path)} if target_path else {})
    (out / LOCAL_RECORD).write_text(json.dumps(record, allow_nan=False) + "\n")


def _recorded(out: Path, key: str) -> Path | None:
    try:
        data = load_json_file(out / LOCAL_RECORD, ManifestError)
    except (OSError, ManifestError):
        return None
    value = data.get(key) if isinstance(data, dict) else None
    return Path(value) if isinstance(value, str) and Path(value).is_absolute() else None


def recorded_source_path(out: Path) -> Path | None:
    """The absolute source folder recorded at quantization (None when unknown or unreadable)."""
    return _recorded(out, "source_path")


def recorded_target_path(out: Path) -> Path | None:
    """The target folder a GGUF draft was converted with (`gguf`; None when unknown or unreadable)."""
    return _recorded(out, "target_path")
