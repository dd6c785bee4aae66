"""Builders for the second round of the corpus: values that parse but are not finite or not consistent, and
parsers pushed past their limits (see tests/corpus/cases.py)."""

from __future__ import annotations

from pathlib import Path

from corpus.builders import SINGLE, file_tensors, set_tensors, split, tiny, write_raw


def config_text(replace: str, by: str):
    """The tiny draft with one literal piece of config.json's text replaced (values json.dumps cannot write)."""
    def build(root: Path) -> Path:
        src = tiny(root)
        text = (src / "config.json").read_text()
        assert replace in text, replace
        (src / "config.json").write_text(text.replace(replace, by, 1))
        return src
    return build


def config_nested(depth: int):
    def build(root: Path) -> Path:
        src = tiny(root)
        (src / "config.json").write_text('{"x": ' + "[" * depth + "]" * depth + "}")
        return src
    return build


def header_nested(depth: int):
    def build(root: Path) -> Path:
        src = tiny(root)
        _, data = split(src / SINGLE)
        write_raw(src / SINGLE, b"[" * depth + b"]" * depth, data)
        return src
    return build


def d2t_duplicate_target(root: Path) -> Path:
    """Draft ids 0 and 1 both map to the target id of draft id 0."""
    src = tiny(root)
    d2t = file_tensors(src / SINGLE)["d2t"]
    d2t[1] = d2t[0] - 1
    set_tensors(src / SINGLE, d2t=d2t)
    return src
