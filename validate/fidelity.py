"""How close the FP8 draft stays to its BF16 reference: weight SQNR (data-free), and on calibration data the
step-0 logits (KL, top-1 agreement) and the simulated acceptance of greedy k-step chains (``acceptance.py``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from eagle3_quant.calib.format import CalibrationSet
from eagle3_quant.validate.acceptance import (
    AcceptanceStats,
    PairedRatio,
    acceptance_stats,
    accepted_counts,
    paired_ratio,
    valid_starts,
)
from eagle3_quant.validate.structure import Fp8Artifact
from safetensors import safe_open

from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.runtime.drafting import draft_inputs
from eagle3_quant.runtime.model import Eagle3Draft
from eagle3_quant.runtime.mx import dequantize_mxfp4


def _tensor(info) -> torch.Tensor:
    with safe_open(str(info.file), framework="pt") as fh:
        return fh.get_tensor(info.name)


def sqnr_db(reference: torch.Tensor, approx: torch.Tensor) -> float:
    """10 log10(|ref|^2 / |approx - ref|^2) in fp64; inf when identical."""
    ref = reference.to(torch.float64)
    noise = float((approx.to(torch.float64) - ref).pow(2).sum())
    signal = float(ref.pow(2).sum())
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def weight_sqnr(art: Fp8Artifact, reference: DraftCheckpoint) -> list[dict]:
    """Per FP8 linear: SQNR of the dequantized weight against the reference weight."""
    layers = []
    for module in art.fp8_modules:
        info = art.checkpoint.tensors[module + ".weight"]
        ref_info = reference.checkpoint.tensors.get(module + ".weight")
        packed = module in art.mx_modules
        if ref_info is None or ref_info.shape != (info.shape[0], info.shape[1] * 2 if packed else info.shape[1]):
            continue
        if module in art.mx_modules:
            dequantized = dequantize_mxfp4(_tensor(info), _tensor(art.checkpoint.tensors[module + ".weight_scale"]),
                                           torch.float32)
        else:
            weight = _tensor(info).to(torch.float32)
            scale = _tensor(art.checkpoint.tensors[module + ".weight_scale"]).to(torch.float32)
            dequantized = weight * (scale.reshape(-1, 1) if scale.numel() > 1 else scale.reshape(()))
        layers.append({"module": module, "role": art.role_of(module), "shape": list(ref_info.shape),
                       "sqnr_db": sqnr_db(_tensor(ref_info), dequantized)})
    return layers


@dataclass(frozen=True)
class Fidelity:
    positions: int
    top1_agreement: float
    kl: float
    reference: AcceptanceStats
    candidate: AcceptanceStats
    ratio: PairedRatio | None

    def metrics(self) -> dict:
        m = {"k": self.reference.k, "drafts": self.reference.drafts, "positions": self.positions,
             "top1_agreement": self.top1_agreement, "kl": self.kl,
             "acceptance_length_bf16": self.reference.acceptance_length,
             "acceptance_length_fp8": self.candidate.acceptance_length,
             "per_position_acceptance_bf16": list(self.reference.per_position),
             "per_position_acceptance_fp8": list(self.candidate.per_position)}
        if self.ratio is not None:
            m.update({"acceptance_ratio": self.ratio.ratio,
                      "acceptance_ratio_interval": [self.ratio.low, self.ratio.high],
                      "acceptance_ratio_confidence": self.ratio.confidence,
                      "acceptance_ratio_method": self.ratio.to_dict()["method"]})
        return m


@torch.no_grad()
def calibration_fidelity(candidate: Eagle3Draft, reference: Eagle3Draft, calib: CalibrationSet, k: int,
                         max_samples: int | None = None) -> Fidelity:
    """Both drafts on every calibration sample: step-0 logits compared at every position, and greedy k-step
    chains judged against the target's next tokens on the same starts."""
    device = reference.fc.weight.device
    agree = kl_sum = positions = 0.0
    accepted_ref, accepted_cand = [], []
    for index, sample in enumerate(calib.samples()):
        if max_samples is not None and index >= max_samples:
            break
        ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
        ids, aux = ids.to(device), aux.to(device)
        ref = reference.propose_all(ids, aux, k, return_logits=True)
        cand = candidate.propose_all(ids, aux, k, return_logits=True)
        if ref.logits.shape[-1] == cand.logits.shape[-1]:
            log_ref = torch.log_softmax(ref.logits[0, :, 0].float(), dim=-1)
            log_cand = torch.log_softmax(cand.logits[0, :, 0].float(), dim=-1)
            kl_sum += float((log_ref.exp() * (log_ref - log_cand)).sum())
            agree += float((log_ref.argmax(-1) == log_cand.argmax(-1)).sum())
        else:   # a pruned vocabulary: no KL between different supports; top-1 compared as target ids
            kl_sum = math.nan
            agree += float((ref.target_ids[0, :, 0] == cand.target_ids[0, :, 0]).sum())
        positions += ref.target_ids.shape[1]
        starts = valid_starts(sample.input_ids, sample.target_next_ids, k)
        accepted_ref.append(accepted_counts(ref.target_ids[0].cpu(), sample.target_next_ids, starts))
        accepted_cand.append(accepted_counts(cand.target_ids[0].cpu(), sample.target_next_ids, starts))
    ref_stats, cand_stats = acceptance_stats(accepted_ref, k), acceptance_stats(accepted_cand, k)
    ratio = paired_ratio(accepted_ref, accepted_cand) if ref_stats.drafts else None
    return Fidelity(int(positions), agree / positions if positions else math.nan,
                    kl_sum / positions if positions else math.nan, ref_stats, cand_stats, ratio)
