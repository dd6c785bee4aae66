"""vLLM 0.33's own QuarkConfig, built from the config.json Quark and this project export, decides for every
runtime layer of each family's Eagle3 class whether it is quantized: it must be exactly the plan, for every
exclusion the CLI accepts, and the offline replay (engines/loader_compat.py) must say the same.
Skipped, with the reason, where vLLM is not importable."""

from __future__ import annotations

import json
import os

import pytest

from eagle3_quant.engines.vllm.loader_compat import check_loader_compat, loader_family
from eagle3_quant.errors import SchemeError
from eagle3_quant.plan import PART_ALIASES, make_plan
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.layout import fused_groups
from eagle3_quant.schemes import get_scheme
from fixtures.synthetic import write_synthetic_draft

pytestmark = pytest.mark.slow
DEPTH = 61
SHAPES = ("tiny", "tiny-qwen3", "tiny-mla", "tiny-mla-no-qlora")


def _vllm():
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    try:
        from vllm.model_executor.layers import linear
        from vllm.model_executor.layers.quantization.quark.quark import QuarkConfig
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
    except Exception as exc:  # noqa: BLE001 - any import failure means the check cannot run here
        pytest.skip(f"vLLM 0.33 is not importable here ({type(exc).__name__}: {exc}); "
                    "install it with --no-deps as docs/development.md says")
    return QuarkConfig, linear, ParallelLMHead


def _layer_class(name: str, linear, lm_head):
    """The vLLM layer class behind each runtime name (llama_eagle3.py, qwen3_eagle3.py, deepseek_v2.py)."""
    last = name.rsplit(".", 1)[-1]
    if last == "lm_head":
        return lm_head
    if last == "qkv_proj":
        return linear.QKVParallelLinear
    if last in ("gate_up_proj", "fused_qkv_a_proj"):
        return linear.MergedColumnParallelLinear
    if last in ("o_proj", "down_proj"):
        return linear.RowParallelLinear
    if last in ("q_b_proj", "kv_b_proj", "q_proj"):
        return linear.ColumnParallelLinear
    return linear.ReplicatedLinear          # model.fc, kv_a_proj_with_mqa without q_lora


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One real Quark export per family: (draft, exported quantization_config)."""
    from eagle3_quant.quantize.api import quantize_draft

    _vllm()                                   # skip before any Quark run when vLLM is not importable
    out = {}
    for shape in SHAPES:
        root = tmp_path_factory.mktemp(shape)
        src = write_synthetic_draft(root / "src", shape)
        with pytest.MonkeyPatch.context() as patch:
            if shape == "tiny-mla-no-qlora":   # no engine serves it (quantize refuses); its Quark config still
                patch.setattr("eagle3_quant.engines.choice.check_draft_engines", lambda *args: None)   # matches vLLM's
            quantize_draft(src, root / "out", device="cpu", engine="vllm")
        out[shape] = (read_draft(src), json.loads((root / "out" / "config.json").read_text())["quantization_config"])
    return out


def _accepted_exclusions(draft) -> list[tuple[str, ...]]:
    names = [lin.role for lin in draft.layout.linears] + list(fused_groups(draft.config)) + list(PART_ALIASES)
    names.append(draft.layout.linear("down_proj").module)
    return [(), *[(n,) for n in dict.fromkeys(names)], ("attention", "mlp")]


@pytest.mark.parametrize("shape", SHAPES)
def test_vllm_quark_config_picks_exactly_the_plan(exported, shape):
    from eagle3_quant.quantize.export_config import vllm_exclude

    QuarkConfig, linear, lm_head = _vllm()
    draft, quant_config = exported[shape]
    checked = 0
    for exclude in _accepted_exclusions(draft):
        try:
            plan = make_plan(draft, get_scheme("ptpc_fp8"), list(exclude))
        except SchemeError:
            continue                       # refused by the CLI (half a fused layer): nothing to export
        config = {**quant_config, "exclude": vllm_exclude(plan)}
        vllm_config = QuarkConfig.from_config(config)
        assert dict(vllm_config.packed_modules_mapping) == {}     # as vLLM's draft QuarkConfig has it
        intended = plan.intended()
        replay = check_loader_compat(config, intended, depths=[DEPTH], **loader_family(draft.config))
        assert replay.ok, (exclude, replay.problems)
        for layer in replay.layers:
            cls = _layer_class(layer.runtime_name, linear, lm_head)
            _, _, method = vllm_config.get_quant_method_target(layer.runtime_name, cls)
            if cls is lm_head:
                assert method is None          # Quark never quantizes a ParallelLMHead
                continue
            vllm_quantizes = method.__name__ == "QuarkLinearMethod"
            assert vllm_quantizes is intended[layer.roles[0]] is layer.quantized, (exclude, layer.runtime_name)
            if vllm_quantizes:
                assert vllm_config.get_scheme_cls(cls, layer.runtime_name)[2].__name__ == "QuarkW8A8Fp8"
        checked += 1
    assert checked >= 8


def test_vllm_quantizes_qwen3_qkv_under_a_llama_style_exclude(exported):
    """The failure the Qwen3 names guard against, shown by vLLM itself: an exact Llama-class name or a
    per-shard pattern leaves Qwen3's qkv_proj FP8 (over BF16 weights); the family pattern keeps it BF16."""
    QuarkConfig, linear, _ = _vllm()
    _, quant_config = exported["tiny-qwen3"]
    qkv = f"model.layers.{DEPTH}.qkv_proj"
    for exclude, quantized in (([f"model.layers.{DEPTH}.self_attn.qkv_proj"], True),
                               ([r"re:(.*\.)?self_attn\.(q|k|v)_proj$"], True),
                               ([r"re:(.*\.)?(q_proj|qkv_proj)$"], False)):
        vllm_config = QuarkConfig.from_config({**quant_config, "exclude": exclude})
        method = vllm_config.get_quant_method_target(qkv, linear.QKVParallelLinear)[2]
        assert (method.__name__ == "QuarkLinearMethod") is quantized, exclude


@pytest.mark.parametrize("scaling", [
    None,
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 32, "beta_fast": 32, "beta_slow": 1,
     "mscale": 1.0, "mscale_all_dim": 0.5},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "attention_factor": 1.0},
])
def test_mla_rope_equals_vllms_own(scaling):
    """The runtime's MLA RoPE against vLLM 0.33's own rotary embedding, built as deepseek_v2.py builds it
    (non-default types renamed to deepseek_yarn / deepseek_llama_scaling, is_neox_style=False)."""
    import torch

    _vllm()
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    from eagle3_quant.runtime.mla import DeepseekRope, apply_rope_interleaved

    theta, rope_dim = 50000.0, 16
    params = {"rope_type": "default", "rope_theta": theta, **(scaling or {})}
    if params["rope_type"] != "default":
        params["rope_type"] = "deepseek_llama_scaling" if params.get("attention_factor") == 1.0 else "deepseek_yarn"
    with set_current_vllm_config(VllmConfig()):
        rope = get_rope(rope_dim, max_position=256, rope_parameters=params, is_neox_style=False, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    positions = torch.arange(0, 64, 3)        # vLLM caches original_max_position_embeddings x factor positions
    q = torch.randn(len(positions), 4, rope_dim, generator=gen)
    k = torch.randn(len(positions), 1, rope_dim, generator=gen)
    vllm_q, vllm_k = rope.forward_native(positions, q.clone(), k.clone())
    mine = DeepseekRope.from_config(rope_dim, theta, scaling)
    cos, sin = mine.cos_sin(positions[None], torch.float32)
    for x, expected in ((q, vllm_q), (k, vllm_k)):
        got = apply_rope_interleaved(x.transpose(0, 1)[None], cos, sin)[0].transpose(0, 1)
        torch.testing.assert_close(got, expected.view_as(got), rtol=1e-5, atol=1e-5)
