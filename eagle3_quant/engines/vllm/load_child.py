"""The ``vllm_load`` worker: ``python -m eagle3_quant.engines.vllm.load_child REQUEST.json RESULT.json``.

Runs in its own process (vLLM's import patches global state and takes seconds): builds the draft with vLLM's
own config and loader path (``EngineArgs(speculative_config=eagle3)`` -> gloo world of 1 -> ``get_model``),
records what vLLM made of each linear and each checkpoint tensor, then runs vLLM's ``combine_hidden_states``
-> ``forward`` -> ``compute_logits`` next to the project's runtime on the same inputs. Writes one JSON object.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from eagle3_quant.engines.vllm import cpu_patches
from eagle3_quant.engines.vllm.compare import compare_loaded, runtime_linears
from eagle3_quant.records.manifest import served_layers


def _engine_config(draft: Path, target: Path, dtype: str, mla: bool):
    from vllm.engine.arg_utils import EngineArgs

    # MLA: vLLM's reference CPU MLA backend, not the AMX one (it packs kv_b_proj with _C ops at load)
    backend = {"attention_backend": "CPU_MLA"} if mla else {}
    args = EngineArgs(model=str(target), skip_tokenizer_init=True, dtype=dtype, enforce_eager=True,
                      max_model_len=512, compilation_config={"custom_ops": ["none"]}, **backend,
                      speculative_config={"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3})
    return args.create_engine_config()


def _build(vllm_config, record: dict):
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
    from vllm.model_executor.model_loader import get_model
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    original = getattr(DefaultModelLoader, "_e3q_original_load_weights", DefaultModelLoader.load_weights)
    DefaultModelLoader._e3q_original_load_weights = original

    def load_weights(self, model, model_config):
        model_load = model.load_weights

        def capture(weights):
            names = []
            loaded = model_load((names.append(name) or (name, tensor)) for name, tensor in weights)
            record["given"] = names
            record["params"] = {n: p.detach().clone() for n, p in model.named_parameters()}
            return loaded

        model.load_weights = capture
        return original(self, model, model_config)

    DefaultModelLoader.load_weights = load_weights
    with set_current_vllm_config(vllm_config):
        if not torch.distributed.is_initialized():
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{cpu_patches.free_port()}")
        ensure_model_parallel_initialized(1, 1)
        return get_model(vllm_config=vllm_config, model_config=vllm_config.speculative_config.draft_model_config)


def fed_layers(vllm_config, num_layers: int) -> dict:
    """The target layers vLLM's own code feeds this draft: each model runner's reader of the draft's config
    (V1: ``GPUModelRunner._get_eagle3_aux_layers_from_config``, which the CPU runner runs; V2:
    ``eagle3_utils.get_eagle3_aux_layers_from_config``), else the target's defaults
    (``SupportsEagle3.get_eagle3_default_aux_hidden_state_layers``), as ``EagleModelMixin`` keeps them (sorted,
    each once). Ids are inputs of those layers (``_maybe_add_hidden_state`` before layer idx)."""
    from types import SimpleNamespace

    from vllm.model_executor.models.interfaces import EagleModelMixin, SupportsEagle3
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    spec = vllm_config.speculative_config
    target = SimpleNamespace(model=SimpleNamespace(layers=[None] * num_layers))
    defaults = SupportsEagle3.get_eagle3_default_aux_hidden_state_layers(target)
    runners = {}
    v1 = GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=spec))
    for name, ids in (("V1", v1), ("V2", get_eagle3_aux_layers_from_config(spec))):
        holder = EagleModelMixin()
        holder._set_aux_hidden_state_layers(tuple(ids) if ids else defaults)
        runners[name] = {"layers": [int(i) for i in holder.aux_hidden_state_layers],
                         "source": "the draft's config" if ids else f"defaults {list(defaults)}"}
    return {"target_layers": num_layers, "runners": runners}


def _inputs(request: dict, cfg: dict, num_aux: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """[(input_ids [T], aux [T, num_aux*Ht])]: calibration samples (the layers `taps` of them), else seeded random
    states."""
    layer = cfg.get("transformer_layer_config") or cfg
    if request.get("calib"):
        from eagle3_quant.records.calibration import load_calibration

        out = []
        calib = load_calibration(request["calib"])
        for sample in (calib.select(request["taps"]) if request.get("taps") else calib).samples():
            out.append((sample.input_ids[: request["positions"]], sample.aux_hidden_states[: request["positions"]]))
            if len(out) >= request["samples"]:
                break
        return out
    gen = torch.Generator().manual_seed(request["seed"])
    ht = int(cfg.get("target_hidden_size") or layer["hidden_size"])
    return [(torch.randint(0, int(layer["vocab_size"]), (request["positions"],), generator=gen),
             torch.randn(request["positions"], num_aux * ht, generator=gen)) for _ in range(request["samples"])]


def _compare_logits(model, ours, inputs, dtype: torch.dtype, d2t, kept: list | None = None) -> dict:
    top1 = total = 0
    max_diff = max_logit = 0.0
    finite = True
    draft_vocab = ours.config.draft_vocab_size
    targets = torch.arange(draft_vocab) + (d2t if d2t is not None else 0)
    with torch.no_grad():
        for ids, aux in inputs:
            aux = aux.to(dtype)
            positions = torch.arange(ids.shape[0])
            hidden = model.combine_hidden_states(aux)
            out, _ = model(ids, positions, hidden)
            theirs = model.compute_logits(out)[:, targets].float()
            if kept is not None:
                kept.append(theirs)
            mine = ours(ids[None], aux[None], positions[None])[0][0].float()
            finite = finite and bool(torch.isfinite(theirs).all())
            max_diff = max(max_diff, float((theirs - mine).abs().max()))
            max_logit = max(max_logit, float(theirs.abs().max()))
            top1 += int((theirs.argmax(-1) == mine.argmax(-1)).sum())
            total += ids.shape[0]
    rel = max_diff / max_logit if finite and max_logit > 0 else float("nan")
    return {"positions": total, "top1_agreement": top1 / total, "max_abs_dlogit": max_diff,
            "max_abs_logit": max_logit, "relative_dlogit": rel, "vllm_logits_finite": finite}


def _seeded(weight: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """What vLLM takes from the target (embedding, shared lm_head): the same seeded values on both sides."""
    with torch.no_grad():
        weight.copy_(torch.randn(weight.shape, generator=gen).to(weight.dtype) * 0.02)
    return weight.detach().clone()


def _compare_forms(model, ours, inputs, dtype, d2t, mla: bool) -> dict[str, dict]:
    """The logits comparison per attention form vLLM runs: one for the Llama/Qwen3 classes; for MLA its decode
    (absorbed W_UK/W_UV: every draft step of a decode batch) and prefill (kv_b_proj) forms, the runtime in the
    same form each time."""
    if not mla:
        return {"paged": _compare_logits(model, ours, inputs, dtype, d2t)}
    forms, kept = {}, {}
    from eagle3_quant.runtime.mla import set_mla_form

    for form in cpu_patches.MLA_FORMS:
        cpu_patches.MLA_FORM["form"] = form
        set_mla_form(ours, form)
        forms[form] = _compare_logits(model, ours, inputs, dtype, d2t, kept.setdefault(form, []))
    # how far vLLM's own two forms are apart: the rounding floor any single runtime form is measured against
    a, b = (torch.cat(kept[form]) for form in cpu_patches.MLA_FORMS)
    top = float(a.abs().max())
    forms["vllm_decode_vs_prefill"] = {"relative_dlogit": float((a - b).abs().max()) / top if top > 0 else float("nan"),
                                  "top1_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean())}
    return forms


def run(request: dict, artifact: Path) -> dict:
    started = time.perf_counter()
    cfg = json.loads((artifact / "config.json").read_text())
    weight = ((cfg.get("quantization_config") or {}).get("global_quant_config") or {}).get("weight") or {}
    mx = isinstance(weight, dict) and weight.get("dtype") in ("fp4", "fp6_e2m3", "fp6_e3m2")
    cpu_patches.apply_cpu_patches(mx_emulation=mx)
    import vllm

    from eagle3_quant.reading.families import DraftFamily, detect_family
    from eagle3_quant.runtime.loading import load_draft

    mla = detect_family(cfg, artifact / "config.json") is DraftFamily.MLA
    dtype_name = str((cfg.get("transformer_layer_config") or cfg).get("torch_dtype") or cfg.get("torch_dtype")
                     or "bfloat16")
    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype_name]
    with tempfile.TemporaryDirectory(prefix="e3q-vllm-target-") as tmp:
        target = cpu_patches.write_target_config(cfg, Path(tmp), request["target_layers"])
        vllm_config = _engine_config(artifact, target, dtype_name, mla)
        record: dict = {}
        model = _build(vllm_config, record)
    fed = {**fed_layers(vllm_config, request.get("num_target_layers") or request["target_layers"]),
           "intended": served_layers(artifact)}
    build_s = time.perf_counter() - started
    tensors = compare_loaded(artifact, record, model)
    linears = runtime_linears(model)
    gen = torch.Generator().manual_seed(request["seed"])
    own_embedding = any(n.endswith("embed_tokens.weight") for n in record["given"])
    # vLLM shares the target's embedding, and its lm_head when the draft has none (has_own_lm_head False,
    # set by process_eagle_weight; the proposer's _maybe_share_lm_head then swaps in the target's)
    own_lm_head = bool(getattr(model, "has_own_lm_head", False))
    embedding = None if own_embedding else _seeded(model.model.embed_tokens.weight, gen)
    lm_head = None if own_lm_head else _seeded(model.lm_head.weight, gen)
    ours = load_draft(artifact, "cpu", dtype, embedding=embedding, lm_head=lm_head)
    # the ids' states (a draft reading the final layer too gets it beside them: not counted here)
    fed["states_read"] = ours.config.num_aux - (1 if ours.config.aux_includes_final_layer else 0)
    d2t = getattr(model, "draft_id_to_target_id", None)
    forms = _compare_forms(model, ours, _inputs(request, cfg, ours.config.num_aux), dtype,
                           d2t.detach() if isinstance(d2t, torch.Tensor) else None, mla)
    inputs = "calibration set" if request.get("calib") else f"seeded random aux states (seed {request['seed']})"
    return {"vllm_version": vllm.__version__, "architecture": type(model).__name__, "dtype": dtype_name,
            "target_layers": request["target_layers"], "linears": linears, **tensors,
            "vllm_decode_vs_prefill": forms.pop("vllm_decode_vs_prefill", None),
            "logits": forms["decode" if mla else "paged"], "logits_by_form": forms,
            "attention": cpu_patches.MLA_ATTENTION_STAND_IN if mla else cpu_patches.ATTENTION_STAND_IN,
            **({"mx_kernel": cpu_patches.MX_STAND_IN if weight.get("dtype") == "fp4" else cpu_patches.MXFP6_STAND_IN}
               if mx else {}),
            "inputs": inputs, "fed_layers": fed,
            "embedding": "the draft's own" if own_embedding else "seeded random (vLLM shares the target's)",
            "lm_head": "the draft's own" if own_lm_head else "seeded random (vLLM shares the target's: "
                                                              "has_own_lm_head False)",
            "build_s": round(build_s, 2), "wall_s": round(time.perf_counter() - started, 2)}


def run_one(request: dict, artifact: Path) -> dict:
    try:
        return {"ok": True, **run(request, artifact)}
    except Exception as exc:  # noqa: BLE001 - reported to the parent as the check's failure reason
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def main(argv: list[str]) -> int:
    """REQUEST.json holds "artifacts" (several share one vLLM import); RESULT.json maps each to its result."""
    request = json.loads(Path(argv[0]).read_text())
    results = {}
    for artifact in request["artifacts"]:
        results[artifact] = run_one(request, Path(artifact))
        # internal child -> parent file, never published: a NaN logit is a finding to carry back
        Path(argv[1]).write_text(json.dumps(results, indent=1, allow_nan=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
