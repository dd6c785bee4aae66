"""SmoothQuant-style scale migration folded into the BF16 draft before quantization (``--smooth-alpha``).

For each FP8 input site, per input channel j: s_j = amax(X_j)^alpha / amax(W_:,j)^(1 - alpha), X the site's
input over every drafted position of the calibration set (steps 0..k-1, as ``calibration.CALIBRATION_STEPS``),
W every linear reading it; s is rounded to a power of two, so that dividing the producer by s and multiplying
W's columns by s is exact in BF16: the smoothed BF16 draft computes what the source computes, bit for bit in
exact arithmetic, and only the FP8 roundings move. The producer of each site (nothing else reads it):

- attention input ``cat(input_layernorm(embed), hidden_norm(h))``: both norms' weights (the hidden half only
  when ``norm_before_residual`` is false: otherwise hidden_norm's output is also the residual);
- MLA ``q_b_proj``: ``q_a_layernorm``; MLA ``o_proj``: the v rows of ``kv_b_proj`` (attention is linear in v);
- ``gate_proj``/``up_proj``: ``post_attention_layernorm``; ``down_proj``: the rows of ``up_proj``.

Sites whose readers all stay BF16 are left alone. The result is an ordinary draft checkpoint with the same
names, dtypes and shapes, so every engine loads it as it loads the source.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from eagle3_quant.errors import SchemeError
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.families import DraftFamily
from eagle3_quant.reading.pickle_source import BASE_BYTES
from eagle3_quant.records.public_names import public_name
from eagle3_quant.util.outdir import scratch_for
from eagle3_quant.util.progress import SILENT, Progress
from eagle3_quant.util.resources import check_disk, check_memory, gb

SCALE_LOG2_LIMIT = 8          # |log2 s| <= 8: a channel is never moved by more than 256x either way


@dataclass(frozen=True)
class SmoothSite:
    name: str                          # the FP8 group it feeds
    readers: tuple[str, ...]           # linears (layer-relative) whose columns are multiplied by s
    producers: tuple[str, ...]         # what is divided by s (layer-relative): norm weights or linear rows


@dataclass(frozen=True)
class Smoothing:
    """What the pre-pass did: alpha, the sites smoothed and the spread of their scales (log2)."""

    alpha: float
    calibration: str
    positions: int
    sites: dict[str, dict] = field(default_factory=dict)    # site -> {"log2_min", "log2_max", "channels_moved"}
    folded_tensors: list[str] = field(default_factory=list)  # BF16 tensors that differ from the source's

    def to_dict(self) -> dict:
        return asdict(self)


def smooth_sites(draft) -> list[SmoothSite]:
    """The sites of a runtime Eagle3Draft (``eagle3_quant.runtime.model``), in names relative to its layer."""
    layer = draft.layer
    attn = layer.self_attn
    hidden_half = () if layer.norm_before_residual else ("hidden_norm",)
    if draft.config.family is DraftFamily.MLA:
        qkv = ("self_attn.q_proj",) if hasattr(attn, "q_proj") else ("self_attn.q_a_proj",)
        sites = [SmoothSite("qkv", (*qkv, "self_attn.kv_a_proj_with_mqa"), ("input_layernorm", *hidden_half))]
        if hasattr(attn, "q_b_proj"):
            sites.append(SmoothSite("q_b_proj", ("self_attn.q_b_proj",), ("self_attn.q_a_layernorm",)))
        sites.append(SmoothSite("o_proj", ("self_attn.o_proj",), ("self_attn.kv_b_proj:v",)))
    else:
        sites = [SmoothSite("qkv", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                            ("input_layernorm", *hidden_half))]
    sites += [SmoothSite("gate_up_proj", ("mlp.gate_proj", "mlp.up_proj"), ("post_attention_layernorm",)),
              SmoothSite("down_proj", ("mlp.down_proj",), ("mlp.up_proj:rows",))]
    return sites


def _module(root, path: str):
    for part in path.split("."):
        root = getattr(root, part)
    return root


@torch.no_grad()
def input_amax(draft, sites: list[SmoothSite], calib, steps: int,
               progress: Progress = SILENT) -> tuple[dict[str, torch.Tensor], int]:
    """Per site, amax of its input per channel over every drafted position (steps 0..steps-1), counted in samples."""
    from eagle3_quant.runtime.drafting import draft_inputs

    amax: dict[str, torch.Tensor] = {}
    hooks = []
    for site in sites:
        def record(_module, args, _out, name=site.name):
            x = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(0).float()
            amax[name] = torch.maximum(amax[name], x) if name in amax else x
        hooks.append(_module(draft.layer, site.readers[0]).register_forward_hook(record))
    positions = 0
    try:
        with progress.task("SmoothQuant: the draft's rollout", calib.num_samples, unit="samples") as advance:
            for sample in calib.samples():
                advance(1, 0)
                if sample.input_ids.numel() < 2:
                    continue
                ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
                draft.propose_all(ids.to(draft.fc.weight.device), aux.to(draft.fc.weight.device), steps)
                positions += ids.shape[1]
    finally:
        for hook in hooks:
            hook.remove()
    return amax, positions


def site_scale(x_amax: torch.Tensor, weights: list[torch.Tensor], alpha: float) -> torch.Tensor:
    """Power-of-two s [K] for one site; 1 where a channel never saw a non-zero input or weight."""
    w_amax = torch.stack([w.float().abs().amax(0) for w in weights]).amax(0)
    ok = (x_amax > 0) & (w_amax > 0)
    raw = torch.where(ok, x_amax.clamp(min=1e-12).pow(alpha) / w_amax.clamp(min=1e-12).pow(1 - alpha),
                      torch.ones_like(x_amax))
    # SmoothQuant's s is free up to a common factor; centre it so the producers keep their overall magnitude
    log2 = torch.log2(raw)
    log2 = torch.where(ok, log2 - log2[ok].median() if ok.any() else log2, torch.zeros_like(log2))
    return torch.exp2(log2.round().clamp(-SCALE_LOG2_LIMIT, SCALE_LOG2_LIMIT))


def smoothed_tensors(tensors: dict[str, torch.Tensor], prefix: str, draft, sites: list[SmoothSite],
                     scales: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A new tensor dict with each site's scale folded in (the input dict is not modified)."""
    out = dict(tensors)
    hidden = draft.config.hidden_size
    for site in sites:
        s = scales[site.name]
        for reader in site.readers:
            name = f"{prefix}{reader}.weight"
            out[name] = (out[name].float() * s[None, :]).to(out[name].dtype)
        for producer in site.producers:
            if producer.endswith(":rows"):                                   # up_proj rows -> down_proj
                name = f"{prefix}{producer.removesuffix(':rows')}.weight"
                out[name] = (out[name].float() / s[:, None]).to(out[name].dtype)
                bias = name.removesuffix("weight") + "bias"
                if bias in out:
                    out[bias] = (out[bias].float() / s).to(out[bias].dtype)
            elif producer.endswith(":v"):                                    # kv_b_proj's v rows -> o_proj
                dims, heads = draft.config.mla, draft.config.num_attention_heads
                name = f"{prefix}{producer.removesuffix(':v')}.weight"
                w = out[name].float().view(heads, dims.qk_nope_head_dim + dims.v_head_dim, -1).clone()
                w[:, dims.qk_nope_head_dim:] /= s.view(heads, dims.v_head_dim)[:, :, None]
                out[name] = w.view(out[name].shape).to(out[name].dtype)
            else:                                                            # a norm weight
                name = f"{prefix}{producer}.weight"
                part = s
                if site.name == "qkv":
                    part = s[:hidden] if producer == "input_layernorm" else s[hidden:]
                out[name] = (out[name].float() / part).to(out[name].dtype)
    return out


def smooth_draft(draft_ckpt: DraftCheckpoint, calib_path: str | Path, alpha: float, quantized_roles: set[str],
                 steps: int, taps: tuple[int, ...] | None = None,
                 progress: Progress = SILENT) -> tuple[dict[str, torch.Tensor], Smoothing]:
    """(tensors of the smoothed BF16 draft, record). `quantized_roles`: the planned FP8 roles (q_a_proj, ...)."""

    from eagle3_quant.quantize.calibration import calibration_embedding, check_calibration
    from eagle3_quant.records.calibration import load_calibration
    from eagle3_quant.runtime.loading import load_draft

    calib = check_calibration(draft_ckpt, load_calibration(Path(calib_path)), taps)
    draft = load_draft(draft_ckpt.path, "cpu", torch.float32, embedding=calibration_embedding(draft_ckpt, calib))
    sites = [s for s in smooth_sites(draft) if any(r.rsplit(".", 1)[-1] in quantized_roles for r in s.readers)]
    if not sites:
        raise SchemeError("--smooth-alpha: no planned FP8 linear reads a smoothable input", field="smooth_alpha")
    amax, positions = input_amax(draft, sites, calib, steps, progress)
    scales = {s.name: site_scale(amax[s.name], [_module(draft.layer, r).weight for r in s.readers], alpha)
              for s in sites}
    if "qkv" in scales and draft.layer.norm_before_residual:     # hidden_norm's output is the residual too
        scales["qkv"][draft.config.hidden_size:] = 1.0
    tensors = draft_ckpt.checkpoint.load_tensors()
    prefix = draft.spec.layer_prefix
    new = smoothed_tensors(tensors, prefix, draft, sites, scales)
    folded = sorted(n for n in tensors if new[n] is not tensors[n] and not torch.equal(new[n], tensors[n]))
    record = Smoothing(alpha, public_name(Path(calib_path).resolve()), positions, {
        s.name: {"log2_min": int(torch.log2(scales[s.name]).min()), "log2_max": int(torch.log2(scales[s.name]).max()),
                 "channels_moved": int((scales[s.name] != 1).sum()), "channels": int(scales[s.name].numel())}
        for s in sites}, folded)
    return new, record


@contextmanager
def smoothed(draft_ckpt: DraftCheckpoint, calib: str | Path, alpha: float, quantized_roles: set[str], out: Path,
             steps: int, taps: tuple[int, ...] | None = None,
             progress: Progress = SILENT) -> Iterator[tuple[Path, Smoothing]]:
    """Write the smoothed BF16 draft into a hidden folder beside OUT; yield (folder, record); always remove it."""
    total = draft_ckpt.checkpoint.total_bytes
    check_disk(out.parent, total, f"the smoothed BF16 draft ({gb(total)} at most)")
    check_memory(BASE_BYTES + 3 * total, f"smoothing (the draft held in memory, {gb(total)})", draft_ckpt.path)
    tensors, record = smooth_draft(draft_ckpt, calib, alpha, quantized_roles, steps, taps, progress)
    with written_draft(draft_ckpt, tensors, out, "smooth") as folder:
        yield folder, record


@contextmanager
def written_draft(draft_ckpt: DraftCheckpoint, tensors: dict[str, torch.Tensor], out: Path, name: str,
                  ) -> Iterator[Path]:
    """`tensors` as a BF16 draft (one shard, the source's config and side files) in a hidden folder beside OUT,
    removed on exit; `tensors` is emptied once written."""
    from safetensors.torch import save_file

    from eagle3_quant.quantize.side_files import copy_side_files

    with scratch_for(out, name) as folder:
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
        tensors.clear()
        (folder / "config.json").write_text(json.dumps(draft_ckpt.config.raw, indent=2, allow_nan=False) + "\n")
        copy_side_files(draft_ckpt.path, folder)
        yield folder
