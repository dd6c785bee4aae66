"""Run the target on one prompt: the aux hidden states at the taps and its argmax next tokens, and with
generation its greedy continuation, whose states come from the decoding passes themselves (no second pass)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from eagle3_quant.calib.format import CalibrationSample
from eagle3_quant.calib.target import input_device


@dataclass(frozen=True)
class Captured:
    sample: CalibrationSample
    generated: int          # tokens the target appended
    cut: bool               # always False: every generated token is the argmax of the state stored before it


class TargetRunner:
    def __init__(self, model, taps: tuple[int, ...], dtype: torch.dtype, eos_token_ids: list[int] | None = None):
        if list(taps) != sorted(set(taps)):
            raise ValueError(f"taps {list(taps)} must be ascending and distinct: the order vLLM and SGLang feed them")
        self.model, self.taps, self.dtype = model, taps, dtype
        self.device = input_device(model)
        self.eos_token_ids = set(eos_token_ids or ())
        # transformers 5.24 renamed the forward's ``past_key_values`` to ``cache``; remote code may keep the old name
        self.cache_keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        # Tap L (the layer count) is the last layer's output. transformers' hidden_states[L] is after the final
        # norm, but vLLM (``_maybe_add_hidden_state``) feeds the draft the state before it: read the norm's input.
        self.final = model.config.num_hidden_layers
        self._pre_norm: dict[str, torch.Tensor] = {}
        if self.final in taps:
            model.get_decoder().norm.register_forward_pre_hook(
                lambda _module, args: self._pre_norm.__setitem__("state", args[0]))

    def _aux(self, hidden_states) -> torch.Tensor:
        """[T, n*H] on the model's device: the taps of one pass, ascending."""
        return torch.cat([self._pre_norm["state"][0] if k == self.final else hidden_states[k][0] for k in self.taps],
                         dim=-1)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """aux [T, n*H] (the taps concatenated in ascending order, on CPU in self.dtype) and argmax next ids [T]."""
        out = self.model(input_ids=ids[None].to(self.device), output_hidden_states=True, use_cache=False)
        return self._aux(out.hidden_states).to("cpu", self.dtype), out.logits[0].argmax(-1).to("cpu", torch.int64)

    @torch.inference_mode()
    def decode(self, ids: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Greedy decoding with a KV cache, as the engines verify: the prompt in one pass, then one pass per token.
        Returns the prompt and its continuation (at most `new_tokens`, through an EOS) [T], the taps of every
        position [T, n*H] and the argmax after each [T]: each appended token is the argmax of the position before
        it, and each pass's states are kept, so no second pass over the sequence is needed."""
        cache = {self.cache_keyword: _new_cache(self.model)}     # updated in place by each pass
        out = self.model(input_ids=ids[None].to(self.device), output_hidden_states=True, use_cache=True, **cache)
        auxes, nexts = [self._aux(out.hidden_states)], [out.logits[0].argmax(-1)]
        for _ in range(new_tokens):
            token = nexts[-1][-1:]
            out = self.model(input_ids=token[None], output_hidden_states=True, use_cache=True, **cache)
            auxes.append(self._aux(out.hidden_states))
            nexts.append(out.logits[0, -1:].argmax(-1))
            if self.eos_token_ids and int(token) in self.eos_token_ids:
                break
        next_ids = torch.cat(nexts).to("cpu", torch.int64)
        full = torch.cat([ids, next_ids[len(ids) - 1:-1]])
        return full, torch.cat(auxes).to("cpu", self.dtype), next_ids

    def capture(self, prompt: tuple[int, ...], generate_tokens: int = 0) -> Captured:
        ids = torch.tensor(prompt, dtype=torch.int64)
        if generate_tokens <= 0:
            aux, next_ids = self.forward(ids)
            return Captured(CalibrationSample(ids, aux, next_ids), 0, False)
        full, aux, next_ids = self.decode(ids, generate_tokens)
        start = len(prompt)
        return Captured(CalibrationSample(full, aux, next_ids, start if len(full) > start else None),
                        len(full) - start, False)


def _new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)
