"""What llama.cpp's EAGLE-3 cannot run, refused in one line before any conversion (engines/llamacpp/names.py has
where each rule was read)."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.calib.target import TargetSpec
from eagle3_quant.engines.llamacpp.names import NUM_TAPS, gguf_name
from eagle3_quant.errors import TargetMismatchError, UnsupportedSourceError
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.families import DraftFamily
from eagle3_quant.reading.layout import EMBEDDING_NAMES, DraftLayout

FAMILY_REFUSALS = {
    DraftFamily.QWEN3: "its attention has per-head q/k norms, which llama.cpp's eagle3 graph (src/models/eagle3.cpp) "
                       "does not compute and its converter cannot map",
    DraftFamily.MLA: "its attention is MLA (q_a/kv_a/kv_b projections); llama.cpp's eagle3 graph "
                     "(src/models/eagle3.cpp) has only q/k/v/o projections",
}


def check_runs_in_llamacpp(config: DraftConfig, layout: DraftLayout, tensors: set[str], target: TargetSpec,
                           where: Path) -> None:
    """The draft is one Llama layer without biases that reads three target layers, and fits `target`."""
    why = FAMILY_REFUSALS.get(config.family)
    if why:
        raise UnsupportedSourceError(f"a {config.family.value}-family Eagle3 draft cannot run in llama.cpp: {why}",
                                     path=where, field="architectures")
    if config.num_aux != NUM_TAPS:
        raise UnsupportedSourceError(f"the draft reads {config.num_aux} target layers; llama.cpp feeds exactly "
                                     f"{NUM_TAPS} (common/speculative.cpp: 'expected 3 extract layers')",
                                     path=where, field="eagle_aux_hidden_state_layer_ids")
    prefix = layout.format.layer_prefix
    bias = sorted(n for n in tensors if n.endswith(".bias"))
    if bias:
        raise UnsupportedSourceError("llama.cpp's eagle3 graph has no biases (src/models/eagle3.cpp creates none; "
                                     "the file would fail to load: 'wrong number of tensors')", path=where,
                                     tensor=bias[0])
    unknown = sorted(n for n in tensors if gguf_name(n, prefix) is None and n not in ("t2d",))
    if unknown:
        raise UnsupportedSourceError("llama.cpp's eagle3 architecture has no tensor for it", path=where,
                                     tensor=unknown[0])
    if config.target_hidden_size != target.hidden_size:
        raise TargetMismatchError(f"the draft reads target states of {config.target_hidden_size}, the target "
                                  f"{target.name} has hidden size {target.hidden_size}", path=where,
                                  field="target_hidden_size", hint="is this the draft's target?")
    if config.vocab_size != target.vocab_size:
        raise TargetMismatchError(f"the draft maps into a vocabulary of {config.vocab_size}, the target {target.name} "
                                  f"has {target.vocab_size}", path=where, field="vocab_size",
                                  hint="is this the draft's target?")
    if not tensors & set(EMBEDDING_NAMES) and config.hidden_size != target.hidden_size:
        raise UnsupportedSourceError(f"the draft has no token embedding, so llama.cpp lends it the target's rows of "
                                     f"{target.hidden_size}; its layer is {config.hidden_size} wide "
                                     "(src/models/eagle3.cpp)", path=where, field="hidden_size")
    if "lm_head.weight" not in tensors and "d2t" in tensors and config.draft_vocab_size != target.vocab_size:
        raise UnsupportedSourceError("the draft shares the target's lm_head but maps a pruned vocabulary (d2t): "
                                     "llama.cpp asserts d2t covers the lm_head's rows (src/models/eagle3.cpp)",
                                     path=where, tensor="d2t")
