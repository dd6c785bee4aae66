"""The draft's logits with SGLang's own linears inside this project's runtime forward (runs in the sglang_load child).

SGLang's full draft forward needs its attention backend and a forward batch; its linears do not. So the runtime's
draft (`load_draft` on the same artifact) is run twice on seeded inputs: as is, and with every linear SGLang built
for the decoder layer and ``fc`` (after its ``process_weights_after_loading``) put in place of the runtime's, a
fused SGLang linear answering for each of its shards. Norms, attention, RoPE and ``lm_head`` are the runtime's on
both sides, so a logit difference is the linears' (their weights as SGLang loaded them, their math as SGLang runs
it).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from torch import nn

from eagle3_quant.engines.sglang.compare import FUSED, model_dtype, read_checkpoint

SUBSTITUTED = (*FUSED, "o_proj", "down_proj", "fc")     # SGLang's runtime linears that stand in for the runtime's


class SglangShard(nn.Module):
    """Output columns [start, stop) of an SGLang linear, on the runtime's [..., in] activations."""

    def __init__(self, linear: nn.Module, start: int, stop: int) -> None:
        super().__init__()
        self.linear, self.start, self.stop = linear, start, stop

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        out = self.linear(x.reshape(-1, x.shape[-1]))
        out = out[0] if isinstance(out, tuple) else out
        return out[:, self.start:self.stop].reshape(*x.shape[:-1], self.stop - self.start)


def _runtime_linears(draft: nn.Module, role: str) -> list[tuple[nn.Module, str]]:
    """(parent, attribute) of each runtime linear named `role` (a Llama Eagle3 draft has one decoder layer)."""
    found = []
    for name, module in draft.named_modules():
        parent, _, last = name.rpartition(".")
        if last == role and hasattr(module, "weight"):
            found.append((draft.get_submodule(parent) if parent else draft, last))
    return found


def with_sglang_linears(ours: nn.Module, model) -> tuple[nn.Module, list[str]]:
    """A copy of the runtime draft whose linears are SGLang's; the SGLang modules put in place."""
    theirs = copy.deepcopy(ours)
    placed = []
    for path, module in model.named_modules():
        last = path.rsplit(".", 1)[-1]
        if last not in SUBSTITUTED or not hasattr(module, "weight"):
            continue
        start = 0
        for role in FUSED.get(last, (last,)):
            targets = _runtime_linears(theirs, role)
            if len(targets) != 1:
                raise ValueError(f"{path}: the runtime draft has {len(targets)} linears named {role}")
            parent, attr = targets[0]
            width = getattr(parent, attr).out_features
            setattr(parent, attr, SglangShard(module, start, start + width))
            start += width
        placed.append(path)
    return theirs, placed


def compare_forward(model, artifact: Path, tokens: int = 16, seed: int = 0) -> dict:
    """Logits of the runtime draft with SGLang's linears vs the runtime alone: top-1 agreement, max |dlogit|."""
    from eagle3_quant.runtime.loading import load_draft

    dtype = model_dtype(model)
    names = set(read_checkpoint(artifact))
    gen = torch.Generator().manual_seed(seed)
    config = json.loads((artifact / "config.json").read_text())
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    # what SGLang takes from the target when the draft lacks it: the same seeded values on both sides
    embedding = None if any(n.endswith("embed_tokens.weight") for n in names) else \
        torch.randn(vocab, hidden, generator=gen).to(dtype)
    lm_head = None if "lm_head.weight" in names else \
        torch.randn(config.get("draft_vocab_size") or vocab, hidden, generator=gen).to(dtype)
    ours = load_draft(artifact, "cpu", dtype, embedding=embedding, lm_head=lm_head)
    theirs, placed = with_sglang_linears(ours, model)
    aux = torch.randn(1, tokens, ours.spec.num_aux * ours.config.target_hidden_size, generator=gen).to(dtype)
    ids = torch.randint(0, vocab, (1, tokens), generator=gen)
    with torch.no_grad():
        mine, _ = ours(ids, aux)
        sglang, _ = theirs(ids, aux)
    mine, sglang = mine.float(), sglang.float()
    top = float(mine.abs().max())
    diff = float((sglang - mine).abs().max())
    return {"positions": tokens, "sglang_linears": placed,
            "top1_agreement": float((sglang.argmax(-1) == mine.argmax(-1)).float().mean()),
            "max_abs_dlogit": diff, "max_abs_logit": top, "relative_dlogit": diff / top if top > 0 else float("nan"),
            "logits_finite": bool(torch.isfinite(sglang).all())}
