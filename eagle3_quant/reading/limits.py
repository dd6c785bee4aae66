"""Parsers with limits: JSON and YAML from strangers are read with a size cap, a nesting cap and no
non-finite numbers; YAML without aliases (no expansion blow-up) and without Python tags.

Every refusal is one `DraftFormatError` (or the error type the caller names) naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle3_quant.errors import DraftFormatError, Eagle3QuantError

MAX_CONFIG_BYTES = 16 * 1024 * 1024        # config.json, indexes, manifests, reports, calibration indexes
MAX_YAML_BYTES = 1024 * 1024               # pipeline files
MAX_DEPTH = 64                             # nesting of objects/lists; real files nest < 10 deep


def read_limited_bytes(path: Path, max_bytes: int = MAX_CONFIG_BYTES,
                       error: type[Eagle3QuantError] = DraftFormatError) -> bytes:
    """The file's bytes, refused when larger than `max_bytes` (read at most that much + 1)."""
    with Path(path).open("rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise error(f"larger than {max_bytes} bytes: refused (not a file this tool writes or reads)", path=path)
    return data


def read_limited_text(path: Path, max_bytes: int = MAX_CONFIG_BYTES, error: type[Eagle3QuantError] = DraftFormatError
                      ) -> str:
    """The file's UTF-8 text, refused when larger than `max_bytes` (read at most that much + 1)."""
    return read_limited_bytes(path, max_bytes, error).decode("utf-8")


def refuse_constant(name: str) -> Any:
    """json.loads(parse_constant=...): NaN, Infinity and -Infinity are not JSON; refused."""
    raise ValueError(f"{name} is not a JSON number (non-finite values are refused)")


def nesting_depth(text: str) -> int:
    """Deepest [ / { nesting outside strings, found without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


class _NonFinite:
    def __init__(self, name: str) -> None:
        self.name = name


def _find_non_finite(value: Any, prefix: str = "") -> tuple[str, str] | None:
    """(dotted field, constant) of the first NaN/Infinity in a parsed value (depth already capped)."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        field = f"{prefix}[{key}]" if isinstance(key, int) else f"{prefix}.{key}" if prefix else key
        if isinstance(item, _NonFinite):
            return field, item.name
        found = _find_non_finite(item, field)
        if found:
            return found
    return None


def loads_strict(text: str, where: Path | str, error: type[Eagle3QuantError] = DraftFormatError,
                 max_depth: int = MAX_DEPTH) -> Any:
    """json.loads with a nesting cap and no NaN/Infinity (refused naming the field); any failure is one
    `error` naming `where`."""
    if nesting_depth(text) > max_depth:
        raise error(f"JSON nested deeper than {max_depth} levels: refused", path=where)
    try:
        data = json.loads(text, parse_constant=_NonFinite)
    except (ValueError, RecursionError) as exc:
        raise error(f"not valid JSON ({exc})", path=where) from None
    if isinstance(data, _NonFinite):
        raise error(f"{data.name} is not a JSON number: non-finite values are refused", path=where)
    found = _find_non_finite(data)
    if found:
        raise error(f"{found[1]} is not a JSON number: non-finite values are refused", path=where, field=found[0])
    return data


def load_json_file(path: Path, error: type[Eagle3QuantError] = DraftFormatError,
                   max_bytes: int = MAX_CONFIG_BYTES) -> Any:
    return json_from_bytes(read_limited_bytes(path, max_bytes, error), path, error)


def json_from_bytes(data: bytes, path: Path, error: type[Eagle3QuantError] = DraftFormatError) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text ({exc.reason})", path=path) from None
    return loads_strict(text, path, error)


def _strict_loader():
    """yaml.SafeLoader that refuses what would make a file mean something else than it says: a key written twice
    (the later one would silently replace the earlier) and a merge key (`<<`, keys from elsewhere)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            first: dict = {}
            for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():
                line = key_node.start_mark.line + 1
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise _Refused(f"line {line}: YAML merge keys (<<) are not accepted: write the keys out")
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.get(key)
                except TypeError:          # an unhashable key: yaml's own error says so
                    continue
                if earlier is not None:
                    raise _Refused(f"key {key!r} appears twice (lines {earlier} and {line}): the later one would "
                                   "replace the earlier; write each key once")
                first[key] = line
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


class _Refused(Exception):
    """A YAML document refused by `_strict_loader` (its message says why)."""


def load_yaml_text(text: str, where: Path | str, error: type[Eagle3QuantError] = DraftFormatError,
                   max_bytes: int = MAX_YAML_BYTES, kind: str = "file") -> Any:
    """yaml.safe_load of at most `max_bytes`, with anchors/aliases refused (an alias bomb expands
    exponentially), the nesting capped, and duplicate and merge keys refused (`_strict_loader`)."""
    import yaml

    if len(text.encode("utf-8")) > max_bytes:
        raise error(f"larger than {max_bytes} bytes: refused", path=where)
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise error("YAML anchors and aliases (&name / *name) are not accepted: write the values out",
                            path=where)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise error(f"YAML nested deeper than {MAX_DEPTH} levels: refused", path=where)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.load(text, Loader=_strict_loader())   # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        raise error(str(exc), path=where) from None
    except yaml.YAMLError as exc:
        raise error(f"not a readable YAML {kind} ({str(exc).splitlines()[0]})", path=where) from None
