"""Which target layers SGLang 0.5.23's own code feeds the draft (run inside the `sglang_load` child).

SGLang's ``resolve_spec_aux_hidden_state_config`` reads the draft's config as its model runner does (only the nested
``eagle_config.eagle_aux_hidden_state_layer_ids``), and ``LlamaForCausalLM.set_eagle3_layers_to_capture`` turns
the ids into the layers its target captures (id + 1; none: its defaults). A captured index i is the input of
layer i (``LlamaModel.forward`` appends before running layer i), i.e. transformers' ``hidden_states[i]``.
"""

from __future__ import annotations

from types import SimpleNamespace


def fed_layers(artifact: str, server_args, num_layers: int | None) -> dict:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.models.llama import LlamaForCausalLM
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    target = ModelConfig(artifact, trust_remote_code=False, is_draft_model=False, dtype="auto")  # its depth unused
    config = resolve_spec_aux_hidden_state_config(server_args=server_args, model_config=target,
                                                  spec_algorithm=SpeculativeAlgorithm.EAGLE3, is_draft_worker=False)
    ids = config.eagle_aux_hidden_state_layer_ids
    if ids is None and num_layers is None:
        return {"ids": None, "layers": None, "source": "SGLang's defaults: the target's depth is not known",
                "target_layers": None}
    holder = SimpleNamespace(pp_group=SimpleNamespace(is_last_rank=True), model=SimpleNamespace(),
                             config=SimpleNamespace(num_hidden_layers=num_layers or 0))
    LlamaForCausalLM.set_eagle3_layers_to_capture(holder, ids)
    return {"ids": None if ids is None else list(ids), "layers": sorted(set(holder.model.layers_to_capture)),
            "source": "eagle_config ids + 1" if ids is not None else "SGLang's defaults",
            "target_layers": num_layers}
