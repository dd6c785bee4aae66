"""`bench` on an artifact whose layer ids `quantize --serve-taps` rewrote: the BF16 reference runs twice, as shipped
and with the artifact's ids, so that the artifact/reference ratio measures quantization alone and the gain of serving
the trained layers is measured on its own (both by vLLM's counters, paired over the same prompts)."""

from __future__ import annotations

import json
from pathlib import Path

from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.records.bench_run import BenchServeTaps, EngineAcceptance, EngineRatio, SequencesMatch
from eagle3_quant.taps.written_ids import apply_written

AS_SHIPPED = "reference_as_shipped"      # the run name of the reference with its own ids


def served_reference(reference: DraftCheckpoint, written: dict, folder: Path) -> Path:
    """`folder`: the reference's files (linked, never copied) with a config.json carrying the artifact's ids (its
    config as already read)."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in reference.path.iterdir():
        if item.name != "config.json" and not item.name.startswith("."):
            (folder / item.name).symlink_to(item.resolve())
    config = dict(reference.config.raw)
    (folder / "config.json").write_text(json.dumps(apply_written(config, written), indent=2, allow_nan=False) + "\n")
    return folder


TAPS_NOTE = "the artifact's acceptance_ratio compares it with the BF16 draft given the same ids"


def taps_section(written: dict, as_shipped: EngineAcceptance, as_served: EngineAcceptance, gain: EngineRatio,
                 lossless: SequencesMatch) -> BenchServeTaps:
    """The bench record's `serve_taps`: the BF16 draft as shipped vs with the artifact's ids, in vLLM's engine."""
    return BenchServeTaps(written, as_shipped, as_served, gain, lossless, TAPS_NOTE)
