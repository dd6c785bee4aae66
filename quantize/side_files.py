"""Carry the source's other files (tokenizer, generation config, ...) into the output."""

from __future__ import annotations

import shutil
from pathlib import Path

from eagle3_quant.reading.checkpoint import PICKLE_SUFFIXES
from eagle3_quant.records.manifest import MANIFEST_NAME
from eagle3_quant.records.validation_report import REPORT_NAME

# Written by us or by Quark; never copied from the source. The source's README.md is its own model card (it
# describes the BF16 model): `eagle3-quant push`/`card` write ours, and its license is kept in the manifest.
OWN_FILES = frozenset({"config.json", MANIFEST_NAME, REPORT_NAME, "README.md"})


def copy_side_files(src: Path, out: Path) -> list[str]:
    """Copy every non-weight file of SRC that OUT lacks; returns the names copied."""
    copied = []
    for path in sorted(src.iterdir()):
        name = path.name
        if (not path.is_file() or name.startswith(".") or name in OWN_FILES or name.endswith(".safetensors")
                or name.endswith(".safetensors.index.json") or path.suffix in PICKLE_SUFFIXES):
            continue
        if not (out / name).exists():
            shutil.copyfile(path, out / name)
            copied.append(name)
    return copied
