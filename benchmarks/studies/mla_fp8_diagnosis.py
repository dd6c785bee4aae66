"""Where PTPC FP8 costs the tiny MLA draft its acceptance (docs/families.md, issue 12): per layer group, the
weight side alone, the activation side alone and both, measured in memory with the runtime's FP8 math
(vLLM's per-channel weight / per-token input FP8) on the tiny pair's calibration set; plus each group's input
statistics (per-token FP8 SQNR, channel outliers) and the error of the chained MLA low-rank path.

    .venv/bin/python -m benchmarks.studies.mla_fp8_diagnosis WORKDIR
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from benchmarks.studies.mx_tiny_pair import PAIR, calibration
from eagle3_quant.runtime import fp8
from eagle3_quant.runtime.acceptance import accepted_counts, paired_ratio, valid_starts
from eagle3_quant.runtime.drafting import draft_inputs
from eagle3_quant.runtime.fp8_linear import quantize_linear
from eagle3_quant.runtime.loading import load_draft

MLA_DRAFT = PAIR.parent / "tiny_pair_mla" / "draft"
K = 3
# vLLM runtime layer -> the checkpoint linears it fuses (midlayer.*)
GROUPS = {"fused_qkv_a_proj": ("self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"),
          "q_b_proj": ("self_attn.q_b_proj",), "kv_b_proj": ("self_attn.kv_b_proj",),
          "o_proj": ("self_attn.o_proj",), "gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
          "down_proj": ("mlp.down_proj",)}
DEFAULT_FP8 = ("fused_qkv_a_proj", "q_b_proj", "o_proj", "gate_up_proj", "down_proj")


class ActivationOnly(nn.Module):
    """The float linear on a per-token FP8 quantize-dequantize of its input (no weight error)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        q, scale = fp8.quantize_per_token(x2)
        return self.linear((q.to(torch.float32) * scale).to(x.dtype).reshape(x.shape))


def weight_only(linear: nn.Linear) -> nn.Linear:
    q, scale = fp8.quantize_weight_per_channel(linear.weight.detach())
    out = nn.Linear(linear.in_features, linear.out_features, bias=False, dtype=linear.weight.dtype)
    out.weight.data = (q.to(torch.float32) * scale[:, None]).to(linear.weight.dtype)
    return out


SIDES: dict[str, Callable[[nn.Linear], nn.Module]] = {
    "W8A8": lambda lin: quantize_linear(lin, mode="dequant"), "W8 only": weight_only, "A8 only": ActivationOnly}


def load(folder: Path = MLA_DRAFT):
    return load_draft(folder, "cpu", torch.float32, embedding=PAIR / "target")


def replace_linears(draft, groups, side: Callable[[nn.Linear], nn.Module]):
    layer = draft.layer
    for group in groups:
        for path in GROUPS[group]:
            parent_name, name = path.split(".")
            parent = getattr(layer, parent_name)
            setattr(parent, name, side(getattr(parent, name)))
    return draft


@torch.no_grad()
def run(draft, calib) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(accepted steps per valid chain start per sample, step-0 top-1 draft ids of every position)."""
    accepted, top1 = [], []
    for sample in calib.samples():
        ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
        proposal = draft.propose_all(ids, aux, K, return_logits=True)
        starts = valid_starts(sample.input_ids, sample.target_next_ids, K)
        accepted.append(accepted_counts(proposal.target_ids[0], sample.target_next_ids, starts))
        top1.append(proposal.logits[0, :, 0].argmax(-1))
    return accepted, torch.cat(top1)


def row(label: str, reference, candidate) -> str:
    ratio = paired_ratio(reference[0], candidate[0])
    agree = float((reference[1] == candidate[1]).double().mean())
    return f"| {label} | {ratio.ratio:.4f} ({ratio.low:.4f}..{ratio.high:.4f}) | {agree:.4f} |"


@torch.no_grad()
def input_statistics(calib, max_samples: int = 32) -> list[str]:
    """Per group input, over every drafted position (steps 0..k-1): per-token FP8 SQNR of the input, and the
    channel-outlier ratio (largest channel amax / median channel amax)."""
    draft = load()
    seen: dict[str, list[torch.Tensor]] = {g: [] for g in GROUPS}
    layer = draft.layer
    for group, paths in GROUPS.items():
        parent_name, name = paths[0].split(".")
        getattr(getattr(layer, parent_name), name).register_forward_hook(
            lambda _m, args, _out, g=group: seen[g].append(args[0].reshape(-1, args[0].shape[-1]).float()))
    for index, sample in enumerate(calib.samples()):
        if index >= max_samples:
            break
        ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
        draft.propose_all(ids, aux, K)
    lines = ["| input of | tokens | per-token FP8 SQNR dB (mean, worst 1%) | channel amax max/median | "
             "per-token amax / rms (median) |", "|---|---|---|---|---|"]
    for group, chunks in seen.items():
        x = torch.cat(chunks)
        q, scale = fp8.quantize_per_token(x)
        noise = (q.float() * scale - x).pow(2).sum(-1)
        sqnr = 10 * torch.log10(x.pow(2).sum(-1) / noise.clamp(min=1e-30))
        channel = x.abs().amax(0)
        crest = x.abs().amax(-1) / x.pow(2).mean(-1).sqrt()
        lines.append(f"| {group} | {len(x)} | {float(sqnr.mean()):.2f}, {float(sqnr.quantile(0.01)):.2f} | "
                     f"{float(channel.max() / channel.median()):.1f} | {float(crest.median()):.1f} |")
    return lines


@torch.no_grad()
def chained_error(calib, max_samples: int = 32) -> list[str]:
    """Relative L2 error along the MLA path with the default FP8 plan (W8A8), step 0, every position."""
    ref, cand = load(), replace_linears(load(), DEFAULT_FP8, SIDES["W8A8"])
    taps = ("self_attn.q_a_proj", "self_attn.q_a_layernorm", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
            "self_attn.kv_a_layernorm", "self_attn.kv_b_proj", "self_attn", "mlp.gate_proj", "mlp.down_proj")
    outs: dict[str, dict[str, list[torch.Tensor]]] = {"ref": {t: [] for t in taps}, "cand": {t: [] for t in taps}}
    for which, draft in (("ref", ref), ("cand", cand)):
        for tap in taps:
            module = draft.layer
            for part in tap.split("."):
                module = getattr(module, part)
            module.register_forward_hook(lambda _m, _a, out, w=which, t=tap: outs[w][t].append(out.float()))
    signal = {t: 0.0 for t in taps}
    noise = {t: 0.0 for t in taps}
    for index, sample in enumerate(calib.samples()):
        if index >= max_samples:
            break
        ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
        ref(ids, aux)
        cand(ids, aux)
        for tap in taps:
            r, c = outs["ref"][tap].pop(), outs["cand"][tap].pop()
            signal[tap] += float(r.pow(2).sum())
            noise[tap] += float((c - r).pow(2).sum())
    return ["| output of | relative L2 error (default W8A8 plan) |", "|---|---|"] + [
        f"| {t} | {math.sqrt(noise[t] / signal[t]):.4f} |" for t in taps]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.mla_fp8_diagnosis")
    parser.add_argument("workdir", type=Path)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    from eagle3_quant.records.calibration import load_calibration

    calib = load_calibration(calibration(args.workdir))
    torch.set_num_threads(1)
    reference = run(load(), calib)
    print("| FP8 on (in memory) | acceptance ratio (95% CI) | step-0 top-1 |\n|---|---|---|", flush=True)
    for side, make in SIDES.items():
        print(row(f"default plan, {side}", reference, run(replace_linears(load(), DEFAULT_FP8, make), calib)),
              flush=True)
    for group in GROUPS:
        for side, make in SIDES.items():
            print(row(f"{group} alone, {side}", reference, run(replace_linears(load(), (group,), make), calib)),
                  flush=True)
    print("\n".join(input_statistics(calib)), flush=True)
    print("\n".join(chained_error(calib)), flush=True)


if __name__ == "__main__":
    main()
