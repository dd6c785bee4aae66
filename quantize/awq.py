"""AWQ for ``w4a16_int4`` (its default rounding): Quark's activation-aware scale and clip search on the inputs the draft
sees in its own rollout, folded into a BF16 draft that the normal INT4 path then rounds to nearest.

Quark's ``AwqProcessor`` walks a decoder stack with cached layer inputs; an Eagle3 draft's linear inputs exist only
inside its rollout (step 0 on the target's states, later steps on its own hidden state). So the rollout is run on the
calibration set (``CALIBRATION_STEPS`` steps from every position, as static scales and GPTQ see it; at most
``MAX_SAMPLES`` samples, evenly spread over the set) with each planned linear's inputs kept (at most ``MAX_ROWS`` a
linear, evenly spread), and Quark's own per-layer steps run on them:
``_search_best_scale`` (a grid of 20 ratios r, scales ``mean|x|^r`` normalised, each judged by the error of the
group's outputs with Quark's INT4 fake-quantized weights), then ``_search_best_clip`` on the scaled weights and
inputs (Quark leaves q/k alone; its products computed as matmuls: awq_clip.py). A scale multiplies the readers'
weight columns and divides what produces their input (the sites of ``smooth.py``: norm weights, up_proj's rows, MLA
kv_b_proj's v rows), in the draft's dtype as Quark's ``apply_scale`` does; a clip bounds each group of weights. The
result is an ordinary BF16 draft with the same names, dtypes and shapes; its record (the manifest's ``smoothing``,
method AWQ) lists the BF16 tensors the scales changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import torch
from torch import nn

from eagle3_quant.errors import SchemeError
from eagle3_quant.plan import QuantPlan
from eagle3_quant.quantize.awq_clip import best_clip
from eagle3_quant.quantize.smooth import smooth_sites, smoothed_tensors, written_draft
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.pickle_source import BASE_BYTES
from eagle3_quant.records.public_names import public_name
from eagle3_quant.util.progress import SILENT, Progress
from eagle3_quant.util.resources import check_disk, check_memory, gb

MAX_ROWS = 4096          # inputs kept per linear (Quark's clip search samples 512 tokens of them)
MAX_SAMPLES = 32         # samples rolled out for them: ~4,000 rows a linear need no more (each adds positions x steps)


@dataclass(frozen=True)
class AwqRecord:
    """What AWQ did, for the manifest (``smoothing``, beside --smooth-alpha's record)."""

    calibration: str
    positions: int
    sites: dict[str, dict] = field(default_factory=dict)     # site -> {"ratio", "scale_min", "scale_max"}
    clipped: list[str] = field(default_factory=list)         # linears whose weights Quark's clip search bounded
    folded_tensors: list[str] = field(default_factory=list)  # BF16 tensors that differ from the source's
    method: str = "AWQ (Quark's AwqProcessor scale and clip search on the draft's own rollout)"

    def to_dict(self) -> dict:
        return asdict(self)


class LinearGroup(nn.Module):
    """The linears reading one input, their outputs side by side (what Quark's search compares)."""

    def __init__(self, linears: list[nn.Linear]) -> None:
        super().__init__()
        self.linears = nn.ModuleList(linears)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([linear(x) for linear in self.linears], dim=-1)


def _module(root, path: str):
    for part in path.split("."):
        root = getattr(root, part)
    return root


def spread(total: int, wanted: int) -> set[int]:
    """`wanted` indices of range(total) evenly spread (all of them when total <= wanted)."""
    return set(range(total)) if total <= wanted else {i * total // wanted for i in range(wanted)}


@torch.no_grad()
def capture_inputs(draft, names: list[str], calib, steps: int,
                   progress: Progress = SILENT) -> tuple[dict[str, torch.Tensor], int]:
    """Each linear's inputs over the rollout (steps 0..steps-1) of at most MAX_SAMPLES samples spread over the set,
    at most MAX_ROWS rows spread over their positions."""
    from eagle3_quant.runtime.drafting import draft_inputs

    kept: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    used = spread(calib.num_samples, MAX_SAMPLES)
    per_call = max(1, MAX_ROWS // max(1, len(used) * steps))
    hooks = []
    for name in names:
        def keep(_module, args, _out, name=name):
            rows = args[0].detach().reshape(-1, args[0].shape[-1]).float()
            stride = max(1, rows.shape[0] // per_call)
            kept[name].append(rows[::stride][:per_call])
        hooks.append(_module(draft.layer, name).register_forward_hook(keep))
    positions = 0
    try:
        with progress.task("AWQ: the draft's rollout", len(used), unit="samples") as advance:
            for index, sample in enumerate(calib.samples()):
                if index not in used:
                    continue
                advance(1, 0)
                if sample.input_ids.numel() < 2:
                    continue
                ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
                draft.propose_all(ids, aux, steps)
                positions += ids.shape[1]
    finally:
        for hook in hooks:
            hook.remove()
    return {n: torch.cat(rows)[:MAX_ROWS] for n, rows in kept.items()}, positions


def _quark_processor():
    """Quark's AwqProcessor with the state its per-layer steps read (no model walk: the rollout replaces it); its
    clip search's group outputs computed as matmuls (awq_clip.py)."""
    from quark.torch.algorithm.awq.awq import AwqProcessor

    processor = object.__new__(AwqProcessor)
    processor.using_accelerate = False
    processor.device = torch.device("cpu")
    processor._compute_best_clip = partial(best_clip, processor)
    return processor


def _attach_quantizers(draft, names: list[str], scheme) -> None:
    """Quark's INT4 weight fake-quantizer on each planned linear, where its AWQ steps look for it."""
    from quark.torch.quantization.tensor_quantize import FakeQuantizeBase

    from eagle3_quant.quantize.quark_file import _spec

    for name in names:
        _module(draft.layer, name).add_module("_weight_quantizer",
                                              FakeQuantizeBase.get_fake_quantize(_spec(scheme.weight, None)))


@torch.no_grad()
def awq_draft(draft_ckpt: DraftCheckpoint, calib_path: str | Path, plan: QuantPlan, steps: int,
              taps: tuple[int, ...] | None = None,
              progress: Progress = SILENT) -> tuple[dict[str, torch.Tensor], AwqRecord]:
    """(tensors of the AWQ-scaled and clipped BF16 draft, record)."""

    from eagle3_quant.quantize.calibration import calibration_embedding, check_calibration
    from eagle3_quant.quantize.quark_import import import_quark
    from eagle3_quant.records.calibration import load_calibration
    from eagle3_quant.runtime.loading import load_draft

    import_quark()
    calib = check_calibration(draft_ckpt, load_calibration(Path(calib_path)), taps)
    draft = load_draft(draft_ckpt.path, "cpu", torch.float32, embedding=calibration_embedding(draft_ckpt, calib))
    roles = {d.role for d in plan.quantized}
    prefix = draft.spec.layer_prefix
    # fc (--quantize-fc) sits outside the layer: no AWQ site scales it, Quark rounds it to nearest
    names = [d.module.removeprefix(prefix) for d in plan.quantized if d.module.startswith(prefix)]
    inputs, positions = capture_inputs(draft, names, calib, steps, progress)
    _attach_quantizers(draft, names, plan.scheme)
    processor = _quark_processor()
    sites = [s for s in smooth_sites(draft) if all(r.rsplit(".", 1)[-1] in roles for r in s.readers)]
    if sites and sites[0].name == "qkv" and draft.layer.norm_before_residual:
        sites = sites[1:]        # hidden_norm's output is also the residual: the qkv input cannot be scaled
    scales, record_sites, clips = {}, {}, {}
    searched = sum(len(site.readers) for site in sites) + len(names)
    with progress.task("AWQ: Quark's scale and clip search", searched, unit="linears") as advance:
        for site in sites:
            readers = [_module(draft.layer, r) for r in site.readers]
            x = inputs[site.readers[0]]
            _, _, best, ratio = processor._search_best_scale(draft.layer, readers[0], readers, x,
                                                             LinearGroup(readers))
            scales[site.name] = best.float()
            record_sites[site.name] = {"ratio": ratio, "scale_min": float(best.min()), "scale_max": float(best.max())}
            for reader, linear in zip(site.readers, readers, strict=True):      # Quark's apply_scale, then its clip
                linear.weight.mul_(scales[site.name][None, :])
                inputs[reader] = inputs[reader] / scales[site.name][None, :]
            advance(len(readers), 0)
        for name in names:          # one linear at a time, as Quark's own loop goes (it leaves q and k unclipped)
            clips.update(processor._search_best_clip({name: _module(draft.layer, name)}, inputs))
            advance(1, 0)
    tensors = draft_ckpt.checkpoint.load_tensors()
    new = smoothed_tensors(tensors, prefix, draft, sites, scales)
    # the tensors holding the scales (as --smooth-alpha's); clipping below only bounds weights that are quantized
    folded = sorted(n for n in tensors if new[n] is not tensors[n] and not torch.equal(new[n], tensors[n]))
    for name, max_val in clips.items():
        weight = new[f"{prefix}{name}.weight"]
        bounded = weight.float().reshape(*max_val.shape[:2], -1).clamp(-max_val, max_val)
        new[f"{prefix}{name}.weight"] = bounded.reshape(weight.shape).to(weight.dtype)
    if not sites and not clips:
        raise SchemeError("AWQ found no planned INT4 linear to scale or clip", field="scheme")
    return new, AwqRecord(public_name(Path(calib_path).resolve()), positions, record_sites, sorted(clips), folded)


@contextmanager
def awq_scaled(draft_ckpt: DraftCheckpoint, calib: str | Path, plan: QuantPlan, out: Path, steps: int,
               taps: tuple[int, ...] | None = None, progress: Progress = SILENT) -> Iterator[tuple[Path, AwqRecord]]:
    """Write the AWQ-scaled BF16 draft into a hidden folder beside OUT; yield (folder, record); always remove it."""
    total = draft_ckpt.checkpoint.total_bytes
    check_disk(out.parent, total, f"the AWQ-scaled BF16 draft ({gb(total)} at most)")
    check_memory(BASE_BYTES + 4 * total, f"AWQ (the draft held in memory, {gb(total)})", draft_ckpt.path)
    tensors, record = awq_draft(draft_ckpt, calib, plan, steps, taps, progress)
    with written_draft(draft_ckpt, tensors, out, "awq") as folder:
        yield folder, record
