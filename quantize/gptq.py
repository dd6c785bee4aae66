"""`quantize --gptq`: Quark's GPTQ rounds the FP8, INT8 or INT4 weights on the inputs the draft really sees.

Quark's own ``GptqProcessor`` walks a decoder stack with one forward per layer; an Eagle3 draft is one layer run
``CALIBRATION_STEPS`` times per position (step 0 on the target's aux states, later steps on its own hidden state),
so its inputs exist only inside the draft's rollout. Here the rollout drives Quark's per-layer algorithm
(``quark.torch.algorithm.gptq.gptq.GPTQ``: the Hessian of each linear's inputs, then its column-by-column
rounding with error feedback) on the linears Quark prepared: one layer group at a time, in forward order,
each group's Hessians taken with the groups before it already rounded (GPTQ's sequential form). The per-channel
(or per-tensor) scales stay Quark's ``max|w| / 448``; only which FP8 code each weight gets changes. Freeze and
export are Quark's, so the artifact has the same tensors, dtypes and config as without GPTQ.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch

from eagle3_quant.plan import QuantPlan
from eagle3_quant.quantize.calibration import batch_positions, counted_forwards
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.util.progress import SILENT, Progress

DAMP_PERCENT = 0.01     # Quark's GPTQConfig defaults
BLOCK_SIZE = 128
ACT_ORDER = True


@dataclass(frozen=True)
class GptqRecord:
    """What `--gptq` did, for the manifest."""

    samples: int
    positions: int                       # draft positions per step, over every sample
    steps: int                           # draft steps each position ran (their inputs are in the Hessians)
    order: list[list[str]]               # layer groups in the order they were rounded (checkpoint modules)
    damp_percent: float = DAMP_PERCENT
    block_size: int = BLOCK_SIZE
    act_order: bool = ACT_ORDER
    seconds: float = 0.0
    method: str = "Quark GPTQ (quark.torch.algorithm.gptq), Hessians from the draft's own rollout"
    prediction: dict | None = None       # the numerics the rollout ran in (runtime/serving.py)

    def to_dict(self) -> dict:
        return asdict(self)


def rounding_order(draft: DraftCheckpoint, plan: QuantPlan) -> list[list[str]]:
    """The quantized modules grouped as vLLM fuses them (one input each), in forward order."""
    from eagle3_quant.quantize.sensitivity import linear_groups

    quantized = {d.module for d in plan.quantized}
    groups = [[m for m in modules if m in quantized] for _, modules in linear_groups(draft).values()]
    return [g for g in groups if g]


def _hessian_hook(algorithm, name: str):
    def hook(_module, args, out):
        algorithm.add_batch_quantized(args[0].data, out.data, name)
    return hook


@torch.no_grad()
def round_with_gptq(model: torch.nn.Module, order: Sequence[Sequence[str]], batches: list[dict],
                    steps: int, scale_dtype: torch.dtype | None = None, progress: Progress = SILENT) -> GptqRecord:
    """Run GPTQ on `model` (Quark-prepared: each quantized linear has its weight quantizer) in place; each layer
    group's rollout over the batches counted on `progress`.

    `scale_dtype`: Quark's GPTQ sets its group scales in float32 (computed from the float32 weight); INT4 scales are
    exported in the model's dtype, the one vLLM holds them in, so they are cast back to it before the export rounds
    the weights to codes with them."""
    started = time.perf_counter()
    modules = dict(model.named_modules())
    task = f"GPTQ: Hessians, one rollout per layer group ({len(order)} groups)"
    with counted_forwards(model, progress, task, len(order) * len(batches)):
        for group in order:
            _round_group(model, modules, group, batches, scale_dtype)
    return GptqRecord(len(batches), batch_positions(batches), steps, [list(g) for g in order],
                      seconds=round(time.perf_counter() - started, 2))


def _round_group(model: torch.nn.Module, modules: dict[str, torch.nn.Module], group: Sequence[str],
                 batches: list[dict], scale_dtype: torch.dtype | None) -> None:
    """One layer group: its linears' Hessians over the rollout, then Quark's rounding of each."""
    from quark.torch.algorithm.gptq.gptq import GPTQ

    algorithms = {name: GPTQ(modules[name]) for name in group}
    hooks = [modules[name].register_forward_hook(_hessian_hook(algorithms[name], name)) for name in group]
    try:
        for batch in batches:
            model(**batch)
    finally:
        for hook in hooks:
            hook.remove()
    for name in group:
        layer = modules[name]
        algorithms[name].quantize(BLOCK_SIZE, DAMP_PERCENT, layer._weight_quantizer.group_size, ACT_ORDER,
                                  True, False, {})
        algorithms[name].free()
        if scale_dtype is not None:
            layer._weight_quantizer.scale.data = layer._weight_quantizer.scale.data.to(scale_dtype)
