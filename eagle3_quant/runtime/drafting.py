"""Multi-step greedy drafting: feed the draft's own hidden back, extend the KV cache.

- :func:`propose`: k tokens after the last position, as vLLM drafts during decoding.
- :func:`propose_all`: k tokens from every position at once (for acceptance simulation on a calibration set);
  the chain started at position t equals ``propose`` on the prefix ending at t.
- :func:`draft_inputs`: a calibration sample aligned the way the draft reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from eagle3_quant.runtime.attention import CausalContext, ChainContext, KVCache

if TYPE_CHECKING:
    from eagle3_quant.runtime.model import Eagle3Draft  # model imports this module when it drafts


@dataclass(frozen=True)
class Proposal:
    draft_ids: torch.Tensor    # [B, k] (propose) or [B, T, k] (propose_all)
    target_ids: torch.Tensor   # same shape, in the target's vocabulary
    logits: torch.Tensor | None  # [..., k, V_draft] when asked for


def _positions(input_ids: torch.Tensor, position_ids: torch.Tensor | None) -> torch.Tensor:
    if position_ids is not None:
        return position_ids
    b, t = input_ids.shape
    return torch.arange(t, device=input_ids.device).expand(b, t)


@torch.no_grad()
def propose(draft: Eagle3Draft, input_ids: torch.Tensor, aux_hidden_states: torch.Tensor, k: int,
            position_ids: torch.Tensor | None = None) -> Proposal:
    """Greedy k draft tokens following the last position of every row."""
    positions = _positions(input_ids, position_ids)
    context = CausalContext(KVCache())
    logits, hidden = draft(input_ids, aux_hidden_states, positions, context)
    logits, hidden = logits[:, -1:], hidden[:, -1:]
    tokens, step_logits = [], []
    for j in range(k):
        token = logits.argmax(-1)
        tokens.append(token)
        step_logits.append(logits)
        if j + 1 < k:
            logits, hidden = draft.step(draft.to_target_ids(token), hidden, positions[:, -1:] + j + 1, context)
    ids = torch.cat(tokens, dim=1)
    return Proposal(ids, draft.to_target_ids(ids), torch.cat(step_logits, dim=1))


@torch.no_grad()
def propose_all(draft: Eagle3Draft, input_ids: torch.Tensor, aux_hidden_states: torch.Tensor, k: int,
                position_ids: torch.Tensor | None = None, return_logits: bool = False) -> Proposal:
    """Greedy k-token chains started at every position: ids [B, T, k]."""
    positions = _positions(input_ids, position_ids)
    prefix = CausalContext(KVCache())
    logits, hidden = draft(input_ids, aux_hidden_states, positions, prefix)
    chain = ChainContext(prefix.cache.keys, prefix.cache.values)
    tokens, step_logits = [], []
    for j in range(k):
        token = logits.argmax(-1)
        tokens.append(token)
        if return_logits:
            step_logits.append(logits)
        if j + 1 < k:
            logits, hidden = draft.step(draft.to_target_ids(token), hidden, positions + j + 1, chain)
    ids = torch.stack(tokens, dim=-1)
    return Proposal(ids, draft.to_target_ids(ids), torch.stack(step_logits, dim=-2) if return_logits else None)


def draft_inputs(input_ids: torch.Tensor, aux_hidden_states: torch.Tensor, target_next_ids: torch.Tensor,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One calibration sample (``eagle3_quant/records/calibration.py`` alignment) -> batch of one the draft reads.

    The draft step at t reads aux[t] and the token at t+1 and predicts the token at t+2, which the
    target predicted as ``target_next_ids[t+1]``. Returns (input_ids [1, T-1], aux [1, T-1, 3Ht],
    targets [1, T-1]).
    """
    return input_ids[None, 1:], aux_hidden_states[None, :-1], target_next_ids[None, 1:]
