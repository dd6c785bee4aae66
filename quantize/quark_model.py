"""The runtime draft seen as a transformers model, which is what Quark's in-memory path and export accept."""

from __future__ import annotations

import torch
from transformers import PretrainedConfig, PreTrainedModel

from eagle3_quant.runtime.model import Eagle3Draft


class Eagle3QuarkModel(PreTrainedModel):
    """Adopts the draft's children and vocab maps, so module and tensor names are the checkpoint's own
    (``fc``, ``midlayer.*`` or ``layers.0.*``, ...). A forward runs `steps` greedy draft steps from every
    position (step 0 on the target's aux states, then the draft's own hidden), so static input scales
    cover what vLLM runs with ``num_speculative_tokens = steps``."""

    config_class = PretrainedConfig
    base_model_prefix = ""
    _no_split_modules: list[str] = []

    def __init__(self, config: PretrainedConfig, draft: Eagle3Draft, steps: int = 3) -> None:
        super().__init__(config)
        for name, child in draft.named_children():
            self.add_module(name, child)
        for name in ("d2t", "t2d"):
            if getattr(draft, name) is not None:
                self.register_buffer(name, getattr(draft, name))
        self._draft = (draft,)          # a tuple: not registered as a submodule
        self.steps = steps

    def forward(self, input_ids: torch.Tensor, aux_hidden_states: torch.Tensor) -> torch.Tensor:
        draft = self._draft[0]
        # Quark swaps a quantized top-level linear (fc, lm_head) on this object; the draft must use it too.
        for name, child in self.named_children():
            draft._modules[name] = child
        return draft.propose_all(input_ids, aux_hidden_states, self.steps).draft_ids
