"""Quark's AWQ clip search (``AwqProcessor._compute_best_clip``, Quark 0.13) with its group outputs computed as one
batched matmul per group instead of the broadcast product ``(input_feat * w).sum(-1)``.

The search is Quark's: the same tokens (every ``rows // n_sample_token``-th input row), the same grid of
``max_shrink * n_grid`` clip ratios, Quark's own INT4 fake-quantizer (``pseudo_quantize_tensor``), the same error
(mean over tokens of each group's squared output error) and the same strict-improvement rule. Only the sum over a
group's inputs changes: the broadcast builds an [outputs, tokens, groups, group size] float32 tensor per output
batch and grid point; a matmul never does, and is 6-15x faster on a draft's linears on a CPU. The sums' order
differs, so a group whose two best grid points tie within float rounding may pick either (tests/test_awq_clip.py:
every group equal to Quark's own method's on this machine, and the real pair's AWQ artifact byte-identical).
"""

from __future__ import annotations

import torch

OUTPUT_ELEMENTS = 1 << 24    # outputs x tokens x groups per batch (64 MiB of float32): Quark batches outputs too


def _group_outputs(inputs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """inputs [groups, tokens, group size] and weight [outputs, 1, groups, group size] -> [outputs, tokens, groups]:
    each group's partial output (Quark's ``(input_feat * w).sum(dim=-1)``)."""
    per_group = weight.reshape(weight.shape[0], weight.shape[2], weight.shape[3]).permute(1, 2, 0)
    return torch.bmm(inputs, per_group).permute(2, 1, 0)


@torch.no_grad()
def best_clip(processor, linear: torch.nn.Linear, input_feat: torch.Tensor, n_grid: int = 20,
              max_shrink: float = 0.5, n_sample_token: int = 512) -> torch.Tensor:
    """Quark's ``_compute_best_clip(linear, input_feat)``: each weight group's best clip bound, [outputs, groups, 1]."""
    weight = linear.weight
    group_size = linear._weight_quantizer.group_size
    group_size = group_size if group_size is not None and group_size > 0 else weight.shape[1]
    rows = input_feat.reshape(-1, input_feat.shape[-1])
    rows = rows[0::rows.shape[0] // min(rows.shape[0], n_sample_token)]
    inputs = rows.reshape(rows.shape[0], -1, group_size).transpose(0, 1).contiguous().to(weight.device)
    weight = weight.reshape(weight.shape[0], 1, -1, group_size)
    batch = max(1, OUTPUT_ELEMENTS // (inputs.shape[0] * inputs.shape[1]))
    bounds = []
    for start in range(0, weight.shape[0], batch):
        w = weight[start:start + batch]
        org_max_val = w.abs().amax(dim=-1, keepdim=True)
        best_max_val = org_max_val.clone()
        min_errs = torch.ones_like(org_max_val) * 1e9
        org_out = _group_outputs(inputs, w)
        for step in range(int(max_shrink * n_grid)):
            max_val = org_max_val * (1 - step / n_grid)
            q_w = processor.pseudo_quantize_tensor(torch.clamp(w, -max_val, max_val), linear)
            err = (_group_outputs(inputs, q_w) - org_out).pow(2).mean(dim=1).view(min_errs.shape)
            better = err < min_errs
            min_errs = torch.where(better, err, min_errs)
            best_max_val = torch.where(better, max_val, best_max_val)
        bounds.append(best_max_val)
    return torch.cat(bounds, dim=0).squeeze(1)
