"""Child process of the `sglang_load` check: SGLang's own code builds and loads the draft; JSON comes back.

``python -m eagle3_quant.engines.sglang.load_child REQUEST.json RESULT.json`` (the protocol of
``eagle3_quant/engines/runner.py``; REQUEST: ``{"artifact": PATH, "num_target_layers": N|null}`` or
``{"probe": true}``). Path (SGLang 0.5.23):
``ServerArgs`` + a world-size-1 gloo group -> ``ModelConfig(ARTIFACT, is_draft_model=True)`` ->
``_get_quantization_config`` (its ``QuarkConfig``) -> ``_initialize_model`` (``LlamaForCausalLMEagle3``) ->
``DefaultModelLoader.load_weights_only`` (the model's ``load_weights``) -> the parameters are compared with the
checkpoint -> ``postprocess_weights`` (``process_weights_after_loading``) -> each quantized linear's forward ->
the runtime draft's logits with SGLang's linears in place (`forward.py`); and the target layers SGLang's
own code feeds the draft (`taps.py`).
Only the CPU patches of `cpu_patches.py` stand in for GPU code.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

from eagle3_quant.engines.sglang.compare import compare_linears, compare_parameters, layer_decisions
from eagle3_quant.engines.sglang.forward import compare_forward


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _runtime(artifact: str):
    from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
    from sglang.srt.runtime_context import derive_spawn_ranks, get_context, get_parallel
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=artifact, speculative_algorithm="EAGLE3", speculative_draft_model_path=artifact,
                      device="cpu", skip_tokenizer_init=True)
    get_context().set_server_args(args)
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
    initialize_model_parallel()
    ranks = derive_spawn_ranks(world_rank=0, tp_size=1, ep_join_rank_offset=0, attn_cp_size=1, attn_tp_size=1,
                               moe_dp_size=1, moe_ep_size=1)
    get_parallel().override_permanently(**ranks, attn_tp_rank=0, attn_dp_rank=0)
    return args


def _record_runtime_names(quant_config) -> dict[int, str]:
    """SGLang matches `exclude` against the prefix each layer hands its quant config: keep it per layer."""
    names: dict[int, str] = {}
    original = quant_config.get_quant_method

    def get_quant_method(layer, prefix):
        names[id(layer)] = prefix
        return original(layer, prefix)

    quant_config.get_quant_method = get_quant_method
    return names


def load(artifact: str, num_layers: int | None = None) -> dict:
    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import loader

    from eagle3_quant.engines.sglang.taps import fed_layers
    from eagle3_quant.reading.artifact import read_artifact

    args = _runtime(artifact)
    fed = fed_layers(artifact, args, num_layers)
    config = read_artifact(Path(artifact)).config
    fed["states_read"] = config.num_aux - (1 if config.aux_includes_final_layer else 0)
    model_config = ModelConfig(artifact, trust_remote_code=False, is_draft_model=True, dtype="auto",
                               speculative_algorithm="EAGLE3")
    load_config = LoadConfig()
    quant_config = loader._get_quantization_config(model_config, load_config)
    names = _record_runtime_names(quant_config) if quant_config is not None else {}
    cpu = torch.device("cpu")
    with loader.set_default_torch_dtype(model_config.dtype), cpu:
        model = loader._initialize_model(model_config, load_config, quant_config)
    weights = loader.DefaultModelLoader(load_config)._get_all_weights(model_config, model)
    loader.DefaultModelLoader.load_weights_only(model, weights, cpu)
    parameters = compare_parameters(model, Path(artifact))
    decisions = layer_decisions(model, names, Path(artifact))
    loader.DefaultModelLoader.postprocess_weights(model, cpu)
    linears = compare_linears(model, Path(artifact))
    try:
        forward = compare_forward(model, Path(artifact))
    except Exception as exc:  # noqa: BLE001 - the loader's findings above still come back
        forward = {"problem": f"{type(exc).__name__}: {exc}"}
    return {"architecture": type(model).__name__, "dtype": str(model_config.dtype).removeprefix("torch."),
            "quant_config": type(quant_config).__name__ if quant_config is not None else None,
            "layers": decisions, "parameters": parameters, "linears": linears,
            "forward": forward, "fed_layers": fed}


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    request = json.loads(Path(request_path).read_text())
    artifact = "--probe" if request.get("probe") else request["artifact"]
    started = time.perf_counter()
    from eagle3_quant.engines.sglang.cpu_patches import PATCHES, patch_sglang, stub_torchvision

    stub_torchvision()
    import sglang

    patch_sglang()
    result = {"sglang": sglang.__version__, "patches": list(PATCHES)}
    if artifact == "--probe":
        import sglang.srt.model_loader.loader  # noqa: F401
        import sglang.srt.models.llama_eagle3  # noqa: F401
    else:
        result.update(load(artifact, request.get("num_target_layers")))
    result["seconds"] = round(time.perf_counter() - started, 2)
    # internal child -> parent file, never published: a NaN is a finding to carry back
    Path(result_path).write_text(json.dumps(result, indent=1, allow_nan=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
