"""Which serving engines load a quantized Eagle3 ``lm_head``: none today, read from their code.

vLLM 0.33.0 and SGLang 0.5.23 build every Eagle3 draft's head as a ``ParallelLMHead``, a
``VocabParallelEmbedding``, never a ``LinearBase``. Their ``QuarkConfig`` hands a quantized method only to
linear, attention (KV cache) and MoE layers, and returns None for anything else; the head then gets
``UnquantizedEmbeddingMethod`` and a BF16 weight parameter, whatever the config's ``exclude`` says. An FP8
``lm_head`` would be cast into that BF16 parameter without its scale (or refused for an unexpected
``lm_head.weight_scale``). So ``--quantize-lm-head`` is refused for every architecture, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.errors import SchemeError


@dataclass(frozen=True)
class LmHeadSupport:
    engine: str
    architecture: str          # the engine's draft class
    loads_quantized: bool
    evidence: str              # file:line inside the engine's package


VLLM_QUARK = ("vllm/model_executor/layers/quantization/quark/quark.py:240-266 (get_quant_method_target: "
              "None for a layer that is not LinearBase, Attention or RoutedExperts); "
              "vllm/model_executor/layers/vocab_parallel_embedding.py:318-321 (None -> UnquantizedEmbeddingMethod)")
SGLANG_QUARK = ("sglang/srt/layers/quantization/quark/quark.py:468-534 (get_quant_method: None for a layer that "
                "is not LinearBase, RadixAttention or FusedMoE); "
                "sglang/srt/layers/vocab_parallel_embedding.py:302-306 (None -> UnquantizedEmbeddingMethod)")

LM_HEAD_SUPPORT: tuple[LmHeadSupport, ...] = (
    LmHeadSupport("vLLM 0.33.0", "Eagle3LlamaForCausalLM", False,
                  "vllm/model_executor/models/llama_eagle3.py:329-334 (ParallelLMHead, quant_config passed); "
                  + VLLM_QUARK),
    LmHeadSupport("vLLM 0.33.0", "Eagle3Qwen3ForCausalLM", False,
                  "vllm/model_executor/models/qwen3_eagle3.py:308-313 (ParallelLMHead, quant_config passed); "
                  + VLLM_QUARK),
    LmHeadSupport("vLLM 0.33.0", "Eagle3DeepseekV2ForCausalLM", False,
                  "vllm/model_executor/models/deepseek_eagle3.py:299-303 (ParallelLMHead, no quant_config)"),
    LmHeadSupport("SGLang 0.5.23", "LlamaForCausalLMEagle3", False,
                  "sglang/srt/models/llama_eagle3.py:309-314 (ParallelLMHead, quant_config passed); " + SGLANG_QUARK),
    LmHeadSupport("SGLang 0.5.23", "Eagle3DeepseekV2ForCausalLM", False,
                  "sglang/srt/models/kimi_k25_eagle3.py:359-364 (ParallelLMHead, quant_config passed); "
                  + SGLANG_QUARK),
)


def engines_loading_quantized_lm_head() -> tuple[LmHeadSupport, ...]:
    return tuple(s for s in LM_HEAD_SUPPORT if s.loads_quantized)


def check_quantize_lm_head(architecture: str) -> None:
    """Refuse --quantize-lm-head unless an engine loads a quantized head; the error names the engine code."""
    if engines_loading_quantized_lm_head():
        return
    engines = sorted({s.engine for s in LM_HEAD_SUPPORT})
    raise SchemeError(
        f"no engine loads a quantized lm_head for {architecture} or any other Eagle3 draft: "
        f"{' and '.join(engines)} build it as ParallelLMHead (a VocabParallelEmbedding), and their QuarkConfig "
        f"quantizes only linear, attention and MoE layers ({VLLM_QUARK.split(' (')[0]}, "
        f"{SGLANG_QUARK.split(' (')[0]}), so an FP8 lm_head would load wrong",
        field="quantize_lm_head", hint="keep lm_head BF16 (the default); --draft-vocab N shrinks it instead")
