"""What to try when a draft misses its gates: the candidate `quantize --scheme auto` would measure after this
artifact's (``quantize/auto_ladder.py``: the next heavier draft step), named as the flags that make it."""

from __future__ import annotations

from eagle3_quant.errors import Eagle3QuantError
from eagle3_quant.quantize.auto_ladder import build_ladder
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.records.manifest import Manifest


def _flags(scheme: str, draft_vocab: int | None, quantize_fc: bool) -> str:
    return " ".join([f"--scheme {scheme}", *([f"--draft-vocab {draft_vocab}"] if draft_vocab else []),
                     *(["--quantize-fc"] if quantize_fc else [])])


def next_rung(manifest: Manifest | None, reference: DraftCheckpoint) -> str | None:
    """'--scheme w8a8_int8 (auto's next rung: 1.31x the step bytes)', or None where the ladder has nothing heavier
    or the manifest does not say what the artifact is."""
    if manifest is None or manifest.scheme is None or manifest.gguf is not None:
        return None
    pruning = manifest.vocab_pruning or {}
    vocab = pruning.get("draft_vocab") if isinstance(pruning.get("draft_vocab"), int) else None
    fc = any(layer.role == "fc" and layer.quantized for layer in manifest.layers)
    try:
        ladder = build_ladder(reference, (), "auto", [vocab] if vocab else [])
    except Eagle3QuantError:
        return None
    mine = next((c for c in ladder.candidates
                 if (c.scheme, c.draft_vocab, c.quantize_fc) == (manifest.scheme.name, vocab, fc)), None)
    if mine is None:
        return None
    heavier = next((c for c in ladder.candidates if c.step_bytes > mine.step_bytes and c.left_out is None), None)
    if heavier is None:
        return None
    return (f"{_flags(heavier.scheme, heavier.draft_vocab, heavier.quantize_fc)} (the rung `--scheme auto` measures "
            f"next: {heavier.step_bytes / mine.step_bytes:.2f}x this draft step's bytes)")
