"""The target's predictions from the final layer's state an engine exported (before the final norm, as vLLM's models
return it): the target's final RMSNorm (``model.norm.weight``, ``rms_norm_eps``), then its lm_head's argmax."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from eagle3_quant.calib.lm_head import _tensor_files, argmax_logits, load_lm_head
from eagle3_quant.errors import CheckpointFileError, SourceNotFoundError
from eagle3_quant.reading.hub_errors import hub_failure
from eagle3_quant.reading.hub_reach import reach_hub_for

NORM_SUFFIX = "model.norm.weight"


@dataclass(frozen=True)
class TargetHead:
    norm_weight: torch.Tensor    # [H]
    eps: float
    lm_head: torch.Tensor        # [V, H]

    def next_ids(self, final_state: torch.Tensor) -> torch.Tensor:
        """argmax of lm_head(norm(state)), the norm computed as vLLM's RMSNorm does (float32, then the state's
        dtype, times the weight)."""
        x = final_state.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        normed = x.to(final_state.dtype) * self.norm_weight.to(final_state.dtype)
        return argmax_logits(normed, self.lm_head)


def _rms_norm_eps(target: str) -> float:
    from transformers import AutoConfig

    reach_hub_for(target)
    try:
        text = AutoConfig.from_pretrained(target).get_text_config()
    except (OSError, ValueError) as exc:
        raise hub_failure(exc, target) or SourceNotFoundError(f"cannot read the target's config ({exc})",
                                                              path=target) from exc
    eps = getattr(text, "rms_norm_eps", None)
    if not isinstance(eps, int | float) or isinstance(eps, bool) or eps <= 0:
        raise CheckpointFileError("the target's config has no positive rms_norm_eps (its final norm is not an "
                                  "RMSNorm this import knows)", path=target, field="rms_norm_eps")
    return float(eps)


def load_final_norm(target: str) -> torch.Tensor:
    """[H] weight of the target's final norm: the shortest tensor name ending in model.norm.weight."""
    names, folder = _tensor_files(target)
    found = sorted((n for n in names if n.endswith(NORM_SUFFIX)), key=len)
    if not found:
        raise CheckpointFileError(f"has no {NORM_SUFFIX} (the final norm)", path=target)
    shard = names[found[0]]
    if not isinstance(shard, str) or Path(shard).is_absolute() or ".." in Path(shard).parts:
        raise CheckpointFileError(f"the shard index places {found[0]} in {shard!r}, outside the target folder",
                                  path=folder, field="weight_map")
    file = folder / shard
    if not file.exists():
        from huggingface_hub import hf_hub_download

        file = Path(hf_hub_download(target, shard))
    with safe_open(str(file), framework="pt") as fh:
        return fh.get_tensor(found[0])


def load_target_head(target: str) -> TargetHead:
    weight, lm_head = load_final_norm(target), load_lm_head(target)
    if weight.dim() != 1 or weight.shape[0] != lm_head.shape[1]:
        raise CheckpointFileError(f"the final norm has shape {tuple(weight.shape)}, the lm_head reads width "
                                  f"{lm_head.shape[1]}", path=target, field=NORM_SUFFIX)
    return TargetHead(weight, _rms_norm_eps(target), lm_head)
