"""Run the target on prompts: the aux hidden states at the taps and its argmax next tokens, and with generation its
greedy continuation, whose states come from the decoding passes themselves (no second pass).

One prompt runs as it is (`capture`); several run as one batch (`capture_batch`): left-padded to the longest, with
an attention mask and position ids that skip the padding, and one KV cache for the batch, so each row computes what
it computes alone, up to the rounding of differently shaped kernels (`tests/test_calib_batch.py` measures it)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from eagle3_quant.calib.target import input_device
from eagle3_quant.records.calibration import CalibrationSample


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
        return self._aux_rows(hidden_states)[0]

    def _aux_rows(self, hidden_states) -> torch.Tensor:
        """[B, T, n*H] on the model's device: the taps of one batched pass, ascending."""
        return torch.cat([self._pre_norm["state"] if k == self.final else hidden_states[k] for k in self.taps], dim=-1)

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

    @torch.inference_mode()
    def capture_batch(self, prompts: list[tuple[int, ...]], generate_tokens: int = 0) -> list[Captured]:
        """`capture` of each prompt, run as one left-padded batch (one prompt: `capture` itself)."""
        if len(prompts) == 1:
            return [self.capture(prompts[0], generate_tokens)]
        ids, mask, positions, pads = _left_padded(prompts, self.device)
        cache = {self.cache_keyword: _new_cache(self.model)} if generate_tokens > 0 else {}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, output_hidden_states=True,
                         use_cache=bool(cache), **cache)
        first_aux, first_next = self._aux_rows(out.hidden_states), out.logits.argmax(-1)
        auxes = [[first_aux[i, pad:]] for i, pad in enumerate(pads)]
        nexts = [[first_next[i, pad:]] for i, pad in enumerate(pads)]
        active = [True] * len(prompts)
        for _ in range(generate_tokens):
            if not any(active):
                break
            token = torch.stack([row[-1][-1:] for row in nexts])              # [B, 1]: each row's argmax
            mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)
            positions = positions[:, -1:] + 1
            out = self.model(input_ids=token, attention_mask=mask, position_ids=positions, output_hidden_states=True,
                             use_cache=True, **cache)
            aux, step_next = self._aux_rows(out.hidden_states)[:, -1:], out.logits[:, -1:].argmax(-1)
            for i in (i for i, on in enumerate(active) if on):   # a row that fed its EOS stops, as `decode` does
                auxes[i].append(aux[i])
                nexts[i].append(step_next[i])
                active[i] = not (self.eos_token_ids and int(token[i]) in self.eos_token_ids)
        return [self._captured(prompt, torch.cat(a), torch.cat(n), generate_tokens)
                for prompt, a, n in zip(prompts, auxes, nexts, strict=True)]

    def _captured(self, prompt: tuple[int, ...], aux: torch.Tensor, next_ids: torch.Tensor,
                  generate_tokens: int) -> Captured:
        ids = torch.tensor(prompt, dtype=torch.int64)
        next_ids = next_ids.to("cpu", torch.int64)
        aux = aux.to("cpu", self.dtype)
        if generate_tokens <= 0:
            return Captured(CalibrationSample(ids, aux, next_ids), 0, False)
        full = torch.cat([ids, next_ids[len(ids) - 1:-1]])
        start = len(prompt)
        return Captured(CalibrationSample(full, aux, next_ids, start if len(full) > start else None),
                        len(full) - start, False)

    def capture(self, prompt: tuple[int, ...], generate_tokens: int = 0) -> Captured:
        ids = torch.tensor(prompt, dtype=torch.int64)
        if generate_tokens <= 0:
            aux, next_ids = self.forward(ids)
            return Captured(CalibrationSample(ids, aux, next_ids), 0, False)
        full, aux, next_ids = self.decode(ids, generate_tokens)
        start = len(prompt)
        return Captured(CalibrationSample(full, aux, next_ids, start if len(full) > start else None),
                        len(full) - start, False)


def _left_padded(prompts: list[tuple[int, ...]], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
    """ids [B, L] (padding: token 0, masked), attention mask [B, L], position ids counting real tokens only, and
    each row's padding length."""
    longest = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), longest, dtype=torch.int64)
    mask = torch.zeros(len(prompts), longest, dtype=torch.int64)
    pads = [longest - len(p) for p in prompts]
    for i, (prompt, pad) in enumerate(zip(prompts, pads, strict=True)):
        ids[i, pad:] = torch.tensor(prompt, dtype=torch.int64)
        mask[i, pad:] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device), pads


def _new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)
