"""Read an Eagle3 draft checkpoint (headers only) and check it against its config before any work."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.reading.checkpoint import Checkpoint, check_links, read_checkpoint
from eagle3_quant.reading.config import DraftConfig, load_config_file, parse_config
from eagle3_quant.reading.formats import DraftFormat, detect_format
from eagle3_quant.reading.layout import DraftLayout, Part, build_layout
from eagle3_quant.reading.source import DraftSource, resolve_source


@dataclass(frozen=True)
class DraftCheckpoint:
    """A checked draft: where it is, its format and config, every tensor and what part it belongs to."""

    source: DraftSource
    format: DraftFormat
    config: DraftConfig
    checkpoint: Checkpoint
    layout: DraftLayout

    @property
    def path(self) -> Path:
        return self.source.path

    def params_by_part(self) -> dict[str, int]:
        counts = {part.value: 0 for part in Part}
        for name, part in self.layout.parts.items():
            counts[part.value] += self.checkpoint.tensors[name].numel
        return {k: v for k, v in counts.items() if v}


def read_draft(src: str | Path, revision: str | None = None) -> DraftCheckpoint:
    source = resolve_source(src, revision)
    check_links(source.path)
    config_path = source.path / "config.json"
    raw = load_config_file(config_path)
    checkpoint = read_checkpoint(source.path)
    where = str(source.path)
    fmt = detect_format(checkpoint.tensors, raw, where)
    config = parse_config(raw, fmt, config_path)
    layout = build_layout(fmt, config, checkpoint.tensors, where)
    return DraftCheckpoint(source, fmt, config, checkpoint, layout)
