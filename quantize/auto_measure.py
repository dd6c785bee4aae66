"""How `quantize --scheme auto` measures one candidate, computing what every candidate shares once: the BF16
reference's chains, the calibration samples, and each scheme's weights.

A scheme's weights come one of two ways, both what its artifact holds:
- in memory, where the simulation computes Quark's bytes bit for bit (``IN_MEMORY_KINDS``: FP8, MXFP4/6, INT8,
  MXFP8, rounded to nearest): the twins of ``sensitivity.fp8_versions`` (vLLM's math) swapped into a copy of the
  BF16 draft, fused shards harmonized as vLLM does;
- written, for any other registered scheme (INT4 with AWQ, NVFP4, or one added later): Quark writes it (``quantize``
  itself, into a temporary folder) and the runtime loads the folder as `validate` loads an artifact.
A weight the forward dequantizes (MX, INT4, NVFP4) is dequantized once, not at every forward.
A pruned vocabulary slices ``lm_head`` and rebuilds ``d2t`` as ``--draft-vocab`` writes them
(``vocab_prune.choose_vocab`` on the same counts). Each candidate is then judged as `validate` judges its artifact
on the same set (``runtime.acceptance``: the same chains, starts, paired bootstrap, step-0 top-1 agreement) and
its lowest weight SQNR computed as `validate` computes it.
"""

from __future__ import annotations

import copy
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from eagle3_quant.plan import make_plan
from eagle3_quant.quantize.auto_ladder import Candidate
from eagle3_quant.quantize.calibration import calibration_batches, calibration_embedding
from eagle3_quant.quantize.sensitivity import fp8_versions, in_dtype, linear_groups, quark_weight
from eagle3_quant.quantize.vocab_prune import choose_vocab, current_target_ids
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.records.calibration import CalibrationSet
from eagle3_quant.runtime import fp8
from eagle3_quant.runtime.acceptance import (
    AcceptanceStats,
    Chains,
    PairedRatio,
    acceptance_stats,
    draft_chains,
    first_samples,
    joined,
    paired_ratio,
    top1_agreement,
    top1_upper_bound,
)
from eagle3_quant.runtime.serving import serving_numerics
from eagle3_quant.runtime.weight_sqnr import sqnr_db
from eagle3_quant.scheme_gates import SchemeGates, gates_for_scheme
from eagle3_quant.schemes import Scheme, get_scheme

IN_MEMORY_BYTES = 1 << 30     # a calibration set up to this size is read once and kept for every candidate


@dataclass(frozen=True)
class Trial:
    candidate: Candidate
    paired: PairedRatio | None
    top1: float
    min_sqnr_db: float | None
    coverage: float | None
    seconds: float
    probed: int | None = None       # stopped after this many samples: clearly failing there (None: all measured)
    stopped: str = ""               # why it was stopped there
    prepared_s: float = 0.0         # of `seconds`, building its weights (0 when another rung built them)


class _Samples:
    """A calibration set's samples read once (what `draft_chains` iterates)."""

    def __init__(self, calibration: CalibrationSet) -> None:
        self.kept = list(calibration.samples())

    def samples(self):
        return iter(self.kept)


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


IN_MEMORY_KINDS = ("fp8", "mx", "int8", "mxfp8")   # twins whose bytes equal Quark's export (sensitivity.fp8_versions)


def in_memory(scheme: Scheme) -> bool:
    """Whether the simulation builds this scheme's weights in memory, Quark's bytes bit for bit; else Quark writes
    them (AWQ's scales and NVFP4's observed input scale are its own run's)."""
    return scheme.weight.kind in IN_MEMORY_KINDS and scheme.rounding == "rtn"


def _dequantize_once(twin: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A linear whose forward dequantizes its weight (MX, INT4, NVFP4) doing it once for `dtype`: the same function,
    called once instead of at every forward."""
    if hasattr(twin, "dequantized_weight"):
        weight = twin.dequantized_weight(dtype)
        original = twin.dequantized_weight
        twin.dequantized_weight = lambda wanted: weight if wanted == dtype else original(wanted)
    return twin


def _written_weight(weight: torch.Tensor, scheme: Scheme, twin: torch.nn.Module) -> torch.Tensor:
    """The weight as the artifact stores it, dequantized in fp32 (what `weight_sqnr` reads back from the file):
    FP8 as Quark writes it (a twin's per-tensor weights are requantized as vLLM fuses them), else the twin's own."""
    if not hasattr(twin, "dequantized_weight"):
        return fp8.dequantize(*quark_weight(weight, scheme))
    return twin.dequantized_weight(torch.float32)


@dataclass
class _Weights:
    """One scheme's linears as its artifact runs them, and each linear's weight SQNR."""

    linears: dict[str, torch.nn.Module] = field(default_factory=dict)
    sqnr: dict[str, float] = field(default_factory=dict)
    runtime: object | None = None        # written: the whole artifact, loaded (AWQ folds scales into the norms)


def clearly_failing(early: PairedRatio | None, top1_high: float, probe: int, samples: int, gate: float,
                    own: SchemeGates) -> str:
    """Why a candidate measured on the first `probe` of `samples` samples cannot keep the gate on all of them
    ("" when it still may). The whole set's ratio lies, at 97.5%, under the probe's upper bound, and its interval is
    narrower by sqrt(probe / samples): if even that ratio would leave the lower bound under the gate, the rest of the
    samples cannot lift it. The same for validate's top-1 gate on the point agreement."""
    if early is not None and not math.isnan(early.ratio):
        half_width = (early.high - early.low) / 2 * math.sqrt(probe / samples)
        if early.high - half_width < gate:
            return (f"ratio at most {early.high:.4f} (95% CI {early.low:.4f}..{early.high:.4f}), so the whole set's "
                    f"lower bound at most {early.high - half_width:.4f} < {gate}")
    if not math.isnan(top1_high) and top1_high < own.min_top1_agreement:
        return f"top-1 at most {top1_high:.3f} < {own.min_top1_agreement} (validate)"
    return ""


class Measurer:
    """Everything the candidates share, computed once, and the measurement of one candidate."""

    def __init__(self, draft: DraftCheckpoint, calibration: CalibrationSet, calib_path: Path, counts: torch.Tensor,
                 exclude, engine: str, device: str, k: int, serve_taps: str = "trained",
                 write: Callable[..., object] | None = None, reference: Chains | None = None) -> None:
        """`write(src, out, options)`: quantize's own path, for the schemes Quark writes (passed in: the API calls
        this stage). `reference`: the BF16 draft's chains on this set with k steps, when already drafted (the
        serve-taps measurement drafts them)."""
        from eagle3_quant.runtime.loading import load_draft

        self.draft, self.calibration, self.calib_path, self.counts = draft, calibration, calib_path, counts
        self.exclude, self.engine, self.device, self.k, self.serve_taps = exclude, engine, device, k, serve_taps
        self.write = write
        self.embedding = calibration_embedding(draft, calibration)
        self.dtype = serving_numerics(draft.config.torch_dtype).dtype
        self.reference = load_draft(draft.path, device, self.dtype, embedding=self.embedding)
        self.copy = copy.deepcopy(self.reference)
        self.native = load_draft(draft.path, device, embedding=self.embedding)   # the dtype Quark reads
        self.groups = linear_groups(draft)
        state_bytes = calibration.num_tokens * len(calibration.info.aux_layer_ids) * \
            calibration.info.target_hidden_size * 2
        self.samples = _Samples(calibration) if state_bytes <= IN_MEMORY_BYTES else calibration
        self.current = current_target_ids(draft)
        self.weights: dict[tuple[str, bool], _Weights] = {}
        self.batches: list[dict] | None = None
        self.workdir: tempfile.TemporaryDirectory | None = None
        self.ref_chains: Chains | None = reference

    def has_reference(self) -> bool:
        return self.ref_chains is not None

    def drafts(self, on_sample: Callable[[], None] | None = None) -> Chains:
        """The BF16 reference's chains, drafted once and paired with every candidate."""
        if self.ref_chains is None:
            self.ref_chains = draft_chains(self.reference, self.samples, self.k, on_sample=on_sample)
        elif on_sample is not None:
            for _ in self.ref_chains.accepted:
                on_sample()
        return self.ref_chains

    def reference_stats(self) -> AcceptanceStats:
        return acceptance_stats(self.drafts().accepted, self.k)

    def close(self) -> None:
        if self.workdir is not None:
            self.workdir.cleanup()

    def _in_memory_weights(self, scheme: Scheme) -> _Weights:
        if self.batches is None and not scheme.input.dynamic:
            self.batches = calibration_batches(self.calibration, self.device)
        twins = fp8_versions(self.native, scheme, self.batches or [], self.groups)
        return _Weights({name: _dequantize_once(in_dtype(twin, self.dtype), self.dtype)
                         for name, twin in twins.items()})

    def _written_weights(self, scheme: Scheme, fc: bool) -> _Weights:
        from eagle3_quant.quantize.options import QuantizeOptions
        from eagle3_quant.records.artifact import open_artifact
        from eagle3_quant.runtime.loading import load_draft
        from eagle3_quant.runtime.weight_sqnr import weight_sqnr

        if self.workdir is None:
            self.workdir = tempfile.TemporaryDirectory(prefix="eagle3-quant-auto-")
        out = Path(self.workdir.name) / f"{scheme.name}{'-fc' if fc else ''}"
        self.write(self.draft.path, out, QuantizeOptions(
            scheme=scheme.name, quantize_fc=fc, exclude=tuple(self.exclude), calib=self.calib_path,
            device=self.device, engine=self.engine, serve_taps=self.serve_taps))     # as the chosen one is written
        artifact = open_artifact(out)
        folded = artifact.smoothed_tensors      # weights holding AWQ's scales: validate leaves them out, as here
        sqnr = {row["module"]: row["sqnr_db"] for row in weight_sqnr(artifact.files, self.draft)
                if row["module"] + ".weight" not in folded}
        runtime = load_draft(out, self.device, self.dtype, embedding=self.embedding)
        for linear in runtime.linears().values():
            _dequantize_once(linear, self.dtype)
        return _Weights(sqnr=sqnr, runtime=runtime)

    @staticmethod
    def _key(scheme: Scheme, fc: bool) -> tuple[str, bool]:
        return scheme.name, fc and not in_memory(scheme)     # in memory: one set of twins serves both fc choices

    def weights_key(self, cand: Candidate) -> tuple[str, bool]:
        """Rungs with the same key share their weights (built once)."""
        return self._key(get_scheme(cand.scheme), cand.quantize_fc)

    def writes(self, cand: Candidate) -> bool:
        """Whether measuring `cand` first has Quark write its scheme (not yet written)."""
        scheme = get_scheme(cand.scheme)
        return not in_memory(scheme) and self._key(scheme, cand.quantize_fc) not in self.weights

    def prepared(self, cand: Candidate) -> bool:
        """Whether `cand`'s weights are already built (by a rung of the same scheme)."""
        return self.weights_key(cand) in self.weights

    def _weights(self, scheme: Scheme, fc: bool) -> _Weights:
        key = self._key(scheme, fc)
        if key not in self.weights:
            self.weights[key] = self._in_memory_weights(scheme) if in_memory(scheme) else \
                self._written_weights(scheme, fc)
        return self.weights[key]

    def measure(self, cand: Candidate, on_sample: Callable[[], None] | None = None, probe: int | None = None,
                gate: float | None = None) -> Trial:
        """`cand` on the calibration set. With `probe` and `gate` a candidate that clearly fails stops early: before
        any sample when its lowest weight SQNR misses its scheme's validate gate, else after the first `probe`
        samples when `clearly_failing` says the rest could not lift it."""
        import time

        started = time.perf_counter()
        scheme = get_scheme(cand.scheme)
        own = gates_for_scheme(cand.scheme)
        weights = self._weights(scheme, cand.quantize_fc)
        prepared_s = time.perf_counter() - started
        modules = [d.module for d in make_plan(self.draft, scheme, self.exclude, cand.quantize_fc).quantized]
        sqnr = [v for v in (self._sqnr(weights, scheme, m) for m in modules) if v is not None]
        min_sqnr = min(sqnr) if sqnr else None
        early_stop = probe is not None and gate is not None
        if early_stop and min_sqnr is not None and min_sqnr < own.min_weight_sqnr_db:
            return Trial(cand, None, math.nan, min_sqnr, None, time.perf_counter() - started, probed=0,
                         stopped=f"weight SQNR {min_sqnr:.1f} dB < {own.min_weight_sqnr_db} (validate)",
                         prepared_s=prepared_s)
        runtime = weights.runtime if weights.runtime is not None else self.copy
        swaps = _Swaps(runtime)
        if weights.runtime is None:
            for module in modules:
                swaps.set(module, weights.linears[module])
        coverage = None
        if cand.draft_vocab is not None:
            coverage = self._prune(swaps, runtime, cand.draft_vocab)
        reference, probed, stopped = self.drafts(), None, ""
        try:
            if early_stop and probe < len(reference.accepted):
                chains = draft_chains(runtime, self.samples, self.k, max_samples=probe, on_sample=on_sample)
                head = first_samples(reference, probe)
                early = paired_ratio(head.accepted, chains.accepted) \
                    if acceptance_stats(head.accepted, self.k).drafts else None
                stopped = clearly_failing(early, top1_upper_bound(head, chains), probe, len(reference.accepted),
                                          gate, own)
                if stopped:
                    reference, probed = head, probe
                else:
                    chains = joined(chains, draft_chains(runtime, self.samples, self.k, on_sample=on_sample,
                                                         start=probe))
            else:
                chains = draft_chains(runtime, self.samples, self.k, on_sample=on_sample)
        finally:
            swaps.restore()
        paired = paired_ratio(reference.accepted, chains.accepted) if acceptance_stats(reference.accepted,
                                                                                       self.k).drafts else None
        return Trial(cand, paired, top1_agreement(reference, chains), min_sqnr, coverage,
                     time.perf_counter() - started, probed, stopped, prepared_s)

    def _sqnr(self, weights: _Weights, scheme: Scheme, module: str) -> float | None:
        """The module's weight SQNR as `validate` computes it from the written file (in memory: from the weight
        Quark writes); None where the written file holds no counterpart."""
        if weights.runtime is None and module not in weights.sqnr:
            weight = self.native.get_submodule(module).weight.detach()
            weights.sqnr[module] = sqnr_db(weight, _written_weight(weight, scheme, weights.linears[module]))
        return weights.sqnr.get(module)

    def _prune(self, swaps: _Swaps, runtime, n: int) -> float:
        """lm_head and d2t as --draft-vocab N writes them; returns the share of target tokens the N cover."""
        head = runtime.lm_head
        keep = choose_vocab(self.current, self.counts, n).to(head.weight.device)
        kept_targets = self.current.to(keep.device)[keep]
        sliced = torch.nn.Linear(head.in_features, n, bias=False, dtype=head.weight.dtype, device=keep.device)
        sliced.weight = torch.nn.Parameter(head.weight[keep].clone(), requires_grad=False)
        swaps.set("lm_head", sliced)
        swaps.set("d2t", kept_targets - torch.arange(n, device=keep.device))
        total = int(self.counts.sum())
        return int(self.counts[kept_targets.cpu()].sum()) / total if total else math.nan
