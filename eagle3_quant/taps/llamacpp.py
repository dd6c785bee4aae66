"""Which target layers llama.cpp feeds an Eagle3 draft, and the ids `gguf` writes so that it feeds the layers the
draft was trained on.

llama.cpp's converter writes the draft config's top-level ``eagle_aux_hidden_state_layer_ids`` unchanged into
``eagle3.target_layers``, else ``[2, L//2, L-3]`` (conversion/llama.py:77-81); it never reads the nested
``eagle_config`` ids (SpecForge's, which count layer outputs). At run time id k is the input of target layer k
(common/speculative.cpp:486-560, ``llama_set_embeddings_layer_inp``): transformers' ``hidden_states[k]``, vLLM's
count (engines/llamacpp/names.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.taps.candidates import trained_taps
from eagle3_quant.taps.conventions import AUX_KEY
from eagle3_quant.taps.engine_rules import default_ids

CODE = ("llama.cpp conversion/llama.py:77-81 (top-level ids, else [2, L//2, L-3]); common/speculative.cpp:486-560 "
        "(id k: the input of layer k)")


@dataclass(frozen=True)
class LlamaCppTaps:
    """The ids written into the GGUF, and why."""

    ids: tuple[int, ...]                  # eagle3.target_layers: hidden_states indices (input of layer id)
    trained: tuple[int, ...] | None       # the layers the draft was trained on (None: its config names none)
    as_converted: tuple[int, ...]         # what llama.cpp's converter alone would write for this config
    origin: str                           # in words

    @property
    def corrected(self) -> bool:
        """The converter alone would have fed other layers."""
        return self.as_converted != self.ids

    def to_dict(self) -> dict:
        return {"target_layers": list(self.ids), "trained": None if self.trained is None else list(self.trained),
                "converter_alone": list(self.as_converted), "origin": self.origin, "code": CODE}


def converter_ids(config: DraftConfig, num_layers: int) -> tuple[int, ...]:
    """What llama.cpp's converter writes for this config."""
    top = config.raw.get(AUX_KEY)
    return tuple(int(i) for i in top) if top else default_ids(num_layers)


def llamacpp_taps(config: DraftConfig, num_layers: int) -> LlamaCppTaps:
    """The trained layers as llama.cpp ids; a draft whose config names none gets the defaults every engine uses."""
    trained = trained_taps(config, num_layers)
    alone = converter_ids(config, num_layers)
    if trained is None:
        ids = default_ids(num_layers)
        return LlamaCppTaps(ids, None, alone, f"the draft names no layers: the engines' defaults [2, L//2, L-3] for "
                                              f"a {num_layers}-layer target")
    return LlamaCppTaps(tuple(trained.indices), tuple(trained.indices), alone,
                        f"trained on hidden_states{list(trained.indices)} ({trained.origin})")
