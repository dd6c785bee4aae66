"""`quantize --scheme auto`: measure every candidate of the ladder (``auto_ladder.py``) on the calibration set
and pick the cheapest draft step that keeps the acceptance gate.

Each candidate runs in memory, with no file written: the BF16 draft with the plan's linears replaced by the
FP8 weights and scales Quark writes for them, bit for bit (``sensitivity.fp8_versions``, vLLM's math), and
for a pruned vocabulary ``lm_head`` sliced and ``d2t`` rebuilt exactly as ``--draft-vocab`` writes them
(``vocab_prune.choose_vocab`` on the same counts). Acceptance is the simulation `validate` runs on the written
artifact (``runtime.acceptance``: the same chains, starts, counts and paired bootstrap as
``calibration_fidelity``), against the unpruned BF16 draft, both computed as vLLM serves them
(``runtime/serving.py``: bf16, the record's ``prediction``); the reference's chains are drafted once and
paired with every candidate.

The gate is on the point ratio (acceptance length candidate / BF16 >= ``min_acceptance_ratio``), as
`validate`'s acceptance_ratio gate; the 95% interval is measured and recorded beside it. A pruned vocabulary
is ranked and measured on the same calibration set: its coverage and ratio are in-sample (optimistic); judge
them on held-out data with `validate --calib OTHER`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from eagle3_quant.errors import AcceptanceGateError
from eagle3_quant.plan import make_plan
from eagle3_quant.quantize.auto_ladder import Candidate, Ladder, build_ladder, vocab_sizes
from eagle3_quant.quantize.calibration import (
    CALIBRATION_STEPS,
    calibration_batches,
    calibration_embedding,
)
from eagle3_quant.quantize.sensitivity import fp8_versions, in_dtype, linear_groups
from eagle3_quant.quantize.vocab_prune import choose_vocab, current_target_ids, target_token_counts
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.records.auto_choice import GATE_RULE, AutoCandidateRecord, AutoChoiceRecord
from eagle3_quant.records.calibration import CalibrationSet
from eagle3_quant.records.public_names import public_name
from eagle3_quant.runtime.acceptance import (
    AcceptanceStats,
    PairedRatio,
    acceptance_stats,
    chain_acceptance,
    paired_ratio,
)
from eagle3_quant.runtime.serving import serving_numerics
from eagle3_quant.schemes import get_scheme
from eagle3_quant.util.formatting import interval

AUTO_K = CALIBRATION_STEPS      # draft steps per chain: vLLM's usual num_speculative_tokens, validate's default k


@dataclass(frozen=True)
class Measured:
    candidate: Candidate
    reference: AcceptanceStats
    stats: AcceptanceStats
    paired: PairedRatio | None
    coverage: float | None

    @property
    def ratio(self) -> float | None:
        return self.paired.ratio if self.paired is not None else None

    def keeps(self, gate: float) -> bool:
        return self.ratio is not None and not math.isnan(self.ratio) and self.ratio >= gate


class _Swaps:
    """Replace modules/buffers of a runtime for one candidate and put the originals back."""

    def __init__(self, runtime) -> None:
        self.runtime, self.saved = runtime, []

    def set(self, name: str, value) -> None:
        parent_name, _, child = name.rpartition(".")
        parent = self.runtime.get_submodule(parent_name) if parent_name else self.runtime
        self.saved.append((parent, child, getattr(parent, child)))
        setattr(parent, child, value)

    def restore(self) -> None:
        for parent, child, value in reversed(self.saved):
            setattr(parent, child, value)
        self.saved.clear()


def measure_ladder(draft: DraftCheckpoint, ladder: Ladder, calib_path: Path, calibration: CalibrationSet,
                   exclude, device: str, counts: torch.Tensor,
                   progress: Callable[[Candidate], None] | None = None) -> list[Measured]:
    from eagle3_quant.runtime.loading import load_draft

    embedding = calibration_embedding(draft, calibration)
    reference = load_draft(draft.path, device, serving_numerics(draft.config.torch_dtype).dtype, embedding=embedding)
    candidate_runtime = copy.deepcopy(reference)
    native = load_draft(draft.path, device, embedding=embedding)   # the weights in the dtype Quark reads
    groups = linear_groups(draft)
    batches: list[dict] | None = None
    twins: dict[str, dict[str, torch.nn.Module]] = {}
    current = current_target_ids(draft)
    total = int(counts.sum())
    accepted_ref = chain_acceptance(reference, calibration, AUTO_K)
    ref_stats = acceptance_stats(accepted_ref, AUTO_K)
    measured = []
    for cand in ladder.candidates:
        if progress is not None:
            progress(cand)
        scheme = get_scheme(cand.scheme)
        if cand.scheme not in twins:
            if batches is None and not scheme.input.dynamic:
                batches = calibration_batches(calibration, device)
            twins[cand.scheme] = fp8_versions(native, scheme, batches or [], groups)
        swaps = _Swaps(candidate_runtime)
        for decision in make_plan(draft, scheme, exclude, cand.quantize_fc).quantized:
            swaps.set(decision.module, in_dtype(twins[cand.scheme][decision.module], reference.dtype))
        coverage = None
        if cand.draft_vocab is not None:
            keep = choose_vocab(current, counts, cand.draft_vocab).to(reference.lm_head.weight.device)
            kept_targets = current.to(keep.device)[keep]
            head = torch.nn.Linear(reference.lm_head.in_features, cand.draft_vocab, bias=False,
                                   dtype=reference.dtype, device=keep.device)
            head.weight = torch.nn.Parameter(reference.lm_head.weight[keep].clone(), requires_grad=False)
            swaps.set("lm_head", head)
            swaps.set("d2t", kept_targets - torch.arange(cand.draft_vocab, device=keep.device))
            coverage = int(counts[kept_targets.cpu()].sum()) / total
        try:
            accepted = chain_acceptance(candidate_runtime, calibration, AUTO_K)
        finally:
            swaps.restore()
        paired = paired_ratio(accepted_ref, accepted) if ref_stats.drafts else None
        measured.append(Measured(cand, ref_stats, acceptance_stats(accepted, AUTO_K), paired, coverage))
    return measured


def choose(measured: list[Measured], gate: float) -> Measured:
    """The cheapest candidate keeping the gate (the list is in ascending step bytes); else one clear error."""
    for m in measured:
        if m.keeps(gate):
            return m
    rated = [m for m in measured if m.ratio is not None and not math.isnan(m.ratio)]
    if not rated:
        raise AcceptanceGateError("--scheme auto: no chain start in the calibration set is a greedy continuation "
                                  "of the target, so no acceptance ratio could be measured (calibrate with "
                                  "generated tokens)", field="calib")
    best = max(rated, key=lambda m: m.ratio)
    low, high = best.paired.low, best.paired.high
    raise AcceptanceGateError(f"--scheme auto: no candidate keeps --min-acceptance-ratio {gate}; the best, "
                              f"{best.candidate.name}, has {best.ratio:.4f} (95% CI {interval(low, high)}); "
                              "nothing written", field="min_acceptance_ratio")


def auto_record(ladder: Ladder, measured: list[Measured], chosen: Measured, gate: float, engine: str,
                calib_path: Path, seconds: float, draft_dtype: str | None) -> AutoChoiceRecord:
    rows = []
    for m in measured:
        c, r = m.candidate, m.paired
        rows.append(AutoCandidateRecord(
            name=c.name, scheme=c.scheme, draft_vocab=c.draft_vocab, quantize_fc=c.quantize_fc,
            step_bytes=c.step_bytes, step_bytes_over_bf16=c.step_bytes / ladder.bf16_step_bytes,
            acceptance_ratio=r.ratio if r is not None else None,
            interval=[r.low, r.high] if r is not None else None, coverage=m.coverage, keeps_gate=m.keeps(gate),
            chosen=m is chosen, engines=list(c.engines)))
    return AutoChoiceRecord(
        min_acceptance_ratio=gate, gate=GATE_RULE, engine=engine, k=AUTO_K, calibration=public_name(calib_path),
        prediction=serving_numerics(draft_dtype).record(),
        drafts=chosen.reference.drafts, acceptance_length_bf16=chosen.reference.acceptance_length,
        bf16_step_bytes=ladder.bf16_step_bytes, candidates=rows, chosen=chosen.candidate.name, seconds=seconds,
        skipped=list(ladder.skipped))


def run_auto(draft: DraftCheckpoint, calib_path: Path, calibration: CalibrationSet, exclude, engine: str,
             gate: float, device: str, progress: Callable[[Candidate], None] | None = None,
             ) -> tuple[Candidate, AutoChoiceRecord]:
    """Build the ladder, measure it, choose: (the candidate to write, the manifest's record)."""
    started = time.perf_counter()
    counts = target_token_counts(calib_path, draft.config.vocab_size)
    ranked = int((counts[current_target_ids(draft)] > 0).sum())
    sizes, left_out = vocab_sizes(draft.config.draft_vocab_size, ranked)
    ladder = build_ladder(draft, exclude, engine, sizes)
    ladder = replace(ladder, skipped=(*left_out, *ladder.skipped))
    measured = measure_ladder(draft, ladder, calib_path, calibration, exclude, device, counts, progress)
    chosen = choose(measured, gate)
    return chosen.candidate, auto_record(ladder, measured, chosen, gate, engine, calib_path,
                                         time.perf_counter() - started, draft.config.torch_dtype)
