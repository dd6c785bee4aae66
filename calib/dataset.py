"""Read calibration prompts with `datasets`: a Hub id or a local json/jsonl/parquet/arrow file or folder.

A local ``.json`` / ``.jsonl`` file is first read line by line, streaming (`check_json_rows`): each line at most
`MAX_ROW_BYTES`, UTF-8, and (JSON lines) one JSON value, else refused naming the file and the line; a file with no
row is refused. A line is never read whole past the limit.

Each row becomes either a chat (a list of ``{"role", "content"}`` messages, from a ``messages`` column or a
ShareGPT ``conversations`` column with ``from``/``value``) or a plain text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_quant.errors import CalibrationDataError, SourceNotFoundError
from eagle3_quant.reading.hub_reach import reach_hub

CHAT_COLUMNS = ("messages", "conversations", "conversation")
TEXT_COLUMNS = ("text",)
BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}
MAX_ROW_BYTES = 4 << 20        # one row (one JSON line) of a local prompts file; prompts are cut far below this
DATASET_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
ROLES = {"user": "user", "human": "user", "system": "system", "assistant": "assistant", "gpt": "assistant",
         "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
         "tool": "tool", "function": "tool", "observation": "tool", "ipython": "tool"}


@dataclass(frozen=True)
class PromptColumn:
    name: str
    chat: bool   # messages (chat template) or plain text


def load_rows(data: str, split: str = "train", subset: str | None = None):
    """The dataset's rows (a `datasets.Dataset`); errors name DATA."""
    import datasets

    path = Path(data).expanduser()
    try:
        if path.is_file():
            builder = BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise CalibrationDataError(f"unknown file type {path.suffix!r}; use one of "
                                           f"{', '.join(sorted(BUILDERS))}", path=path)
            if builder == "json":
                check_json_rows(path)
            return datasets.load_dataset(builder, data_files=str(path), split="train")
        if path.is_dir():
            if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
                loaded = datasets.load_from_disk(str(path))
                return loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
            return datasets.load_dataset(str(path), subset, split=split)
        if not DATASET_ID.match(data):
            raise SourceNotFoundError("no such file or folder, and not a Hub dataset id", path=data)
        reach_hub()
        return datasets.load_dataset(data, subset, split=split)
    except (CalibrationDataError, SourceNotFoundError):
        raise
    except (FileNotFoundError, ValueError, KeyError, OSError, datasets.exceptions.DatasetNotFoundError,
            datasets.exceptions.DatasetGenerationError) as exc:
        raise CalibrationDataError(f"cannot load the dataset ({type(exc).__name__}: {exc})", path=data) from exc


def check_json_rows(path: Path) -> int:
    """The rows of a local .json/.jsonl file, read line by line (never a line whole past `MAX_ROW_BYTES`): every
    line UTF-8 and at most that long; in JSON lines (a .jsonl file, or a .json file whose first line is a whole
    JSON value) every non-blank line one JSON value. Returns the row count (a JSON document: 1); none is refused."""
    rows, lines_mode = 0, path.suffix.lower() == ".jsonl"
    with open(path, "rb") as fh:
        for number, raw in enumerate(iter(lambda: fh.readline(MAX_ROW_BYTES + 1), b""), start=1):
            if len(raw) > MAX_ROW_BYTES:
                raise CalibrationDataError(f"line {number} is longer than {MAX_ROW_BYTES >> 20} MiB, the limit of "
                                           "one row", path=path, hint="one prompt per line, cut before use")
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8").strip()
            except UnicodeDecodeError as exc:
                raise CalibrationDataError(f"line {number} is not UTF-8 text (byte {exc.start} of the line)",
                                           path=path) from None
            if not line:
                continue
            if rows == 0 and not lines_mode:
                lines_mode = _json_value(line, path, number)
            rows += 1
            if lines_mode and not _json_value(line, path, number):
                raise CalibrationDataError(f"line {number} is not one JSON value", path=path,
                                           hint="JSON lines: one object per line")
    if rows == 0:
        raise CalibrationDataError("is empty: no row to read prompts from", path=path)
    return rows if lines_mode else 1


def _json_value(line: str, path: Path, number: int) -> bool:
    """Whether the line is one JSON value (json's own C parser: a prompts file may be large; a row nested past
    its recursion limit is refused, not followed)."""
    try:
        json.loads(line)
    except RecursionError:
        raise CalibrationDataError(f"line {number} is JSON nested too deeply to be a row", path=path) from None
    except ValueError:
        return False
    return True


def pick_column(rows, column: str | None, where: str) -> PromptColumn:
    """The named column, or the first of messages / conversations / text present."""
    names = list(rows.column_names)
    if column is not None and column not in names:
        raise CalibrationDataError(f"no column {column!r}; columns: {', '.join(names)}", path=where, field=column)
    candidates = [column] if column else [c for c in CHAT_COLUMNS + TEXT_COLUMNS if c in names]
    if not candidates:
        raise CalibrationDataError(f"no messages / conversations / text column; columns: {', '.join(names)}",
                                   path=where, hint="name one with --column")
    name = candidates[0]
    sample = next((v for v in rows[:100][name] if v is not None), None)
    if isinstance(sample, str):
        return PromptColumn(name, chat=False)
    if isinstance(sample, list):
        return PromptColumn(name, chat=True)
    raise CalibrationDataError(f"column holds {type(sample).__name__}, expected text or a list of messages",
                               path=where, field=name)


def to_messages(value: Any, where: str) -> list[dict[str, str]]:
    """Normalise one chat: role/content or ShareGPT from/value; list-of-parts content keeps its text parts."""
    if not isinstance(value, list):
        raise CalibrationDataError(f"expected a list of messages, got {type(value).__name__}", path=where)
    messages = []
    for turn in value:
        if not isinstance(turn, dict):
            raise CalibrationDataError(f"a message is {type(turn).__name__}, expected an object", path=where)
        role = turn.get("role", turn.get("from"))
        content = turn.get("content", turn.get("value"))
        mapped = ROLES.get(str(role).lower()) if role is not None else None
        if mapped is None:
            raise CalibrationDataError(f"unknown message role {role!r}; known: {', '.join(sorted(ROLES))}",
                                       path=where)
        if isinstance(content, list):
            content = "".join(p.get("text") or "" for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise CalibrationDataError(f"message content is {type(content).__name__}, expected text", path=where)
        messages.append({"role": mapped, "content": content})
    return messages
