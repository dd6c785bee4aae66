"""Run the target on one prompt: the three aux hidden states at the taps and its argmax next tokens."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from eagle3_quant.calib.format import CalibrationSample
from eagle3_quant.calib.target import input_device


@dataclass(frozen=True)
class Captured:
    sample: CalibrationSample
    generated: int          # tokens the target appended
    cut: bool               # the continuation was cut where the full pass disagreed with generate()


class TargetRunner:
    def __init__(self, model, taps: tuple[int, ...], dtype: torch.dtype, eos_token_ids: list[int] | None = None):
        self.model, self.taps, self.dtype = model, taps, dtype
        self.device = input_device(model)
        self.eos_token_ids = eos_token_ids
        # Tap L (the layer count) is the last layer's output. transformers' hidden_states[L] is after the final
        # norm, but vLLM (``_maybe_add_hidden_state``) feeds the draft the state before it: read the norm's input.
        self.final = model.config.num_hidden_layers
        self._pre_norm: dict[str, torch.Tensor] = {}
        if self.final in taps:
            model.get_decoder().norm.register_forward_pre_hook(
                lambda _module, args: self._pre_norm.__setitem__("state", args[0]))

    def _state(self, hidden_states, k: int) -> torch.Tensor:
        return self._pre_norm["state"][0] if k == self.final else hidden_states[k][0]

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """aux [T, n*H] (the taps concatenated in order, on CPU in self.dtype) and argmax next ids [T]."""
        out = self.model(input_ids=ids[None].to(self.device), output_hidden_states=True, use_cache=False)
        aux = torch.cat([self._state(out.hidden_states, k).to("cpu", self.dtype) for k in self.taps], dim=-1)
        return aux, out.logits[0].argmax(-1).to("cpu", torch.int64)

    @torch.inference_mode()
    def generate(self, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
        from transformers import GenerationConfig

        config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=self.eos_token_ids,
                                  pad_token_id=(self.eos_token_ids or [0])[0])
        out = self.model.generate(ids[None].to(self.device), generation_config=config)
        return out[0].to("cpu", torch.int64)

    def capture(self, prompt: tuple[int, ...], generate_tokens: int = 0) -> Captured:
        ids = torch.tensor(prompt, dtype=torch.int64)
        if generate_tokens <= 0:
            aux, next_ids = self.forward(ids)
            return Captured(CalibrationSample(ids, aux, next_ids), 0, False)
        full = self.generate(ids, generate_tokens)
        aux, next_ids = self.forward(full)
        start = len(prompt)
        # generate() decodes with a KV cache; keep the continuation only as far as the full pass agrees with it
        agree = full[start:] == next_ids[start - 1:-1]
        keep = start + (int(agree.long().cumprod(0).sum()) if len(agree) else 0)
        cut = keep < len(full)
        sample = CalibrationSample(full[:keep].clone(), aux[:keep].clone(), next_ids[:keep].clone(),
                                   start if keep > start else None)
        return Captured(sample, keep - start, cut)
