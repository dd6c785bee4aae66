"""Replay vLLM's Quark loading rules offline: which runtime layer vLLM would quantize, and how.

Mirrors vLLM 0.33: ``QuarkConfig.from_config`` (needs ``export`` with ``kv_cache_group`` and
``pack_method``), ``should_ignore_layer`` (exact name, or ``re:`` + ``re.match``) and ``_is_fp8_w8a8``
(-> ``QuarkW8A8Fp8``), INT8, INT4 and NVFP4 (``int_fp4_rules``), then the OCP MX classes (``mx_rules``:
``QuarkW4A8_MXFP4_FP8``, ``QuarkOCP_MX``).
A draft's QuarkConfig has an empty packed-modules mapping (``get_draft_quant_config`` builds a fresh one), so a
fused layer (``qkv_proj``, ``gate_up_proj``) is matched by its fused runtime name only: per-shard patterns
(``q_proj``) leave it quantized.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eagle3_quant.engines.vllm.int_fp4_rules import int_fp4_scheme_choice
from eagle3_quant.engines.vllm.mx_rules import mx_scheme_choice
from eagle3_quant.engines.vllm.names import CHECK_DEPTHS, RuntimeLayer, runtime_layers
from eagle3_quant.reading.config import DraftConfig
from eagle3_quant.reading.families import DraftFamily


@dataclass(frozen=True)
class LayerLoad:
    depth: int
    runtime_name: str
    roles: tuple[str, ...]
    quantized: bool
    scheme: str | None
    intended: bool | None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class LoaderCheck:
    depths: tuple[int, ...]
    layers: tuple[LayerLoad, ...]
    config_problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.config_problems and all(layer.ok for layer in self.layers)

    @property
    def problems(self) -> list[str]:
        return [*self.config_problems, *(f"{x.runtime_name}: {x.problem}" for x in self.layers if x.problem)]


def _matches(name: str, exclude: Iterable[str]) -> bool:
    for target in exclude:
        if target.startswith("re:"):
            if re.match(target[3:], name):
                return True
        elif target == name:
            return True
    return False


def _ignored(layer: RuntimeLayer, exclude: list[str]) -> bool:
    return _matches(layer.name, exclude)


def vllm_scheme_choice(global_config: Mapping[str, Any], pack_method: Any = "reorder",
                       ) -> tuple[str | None, str | None]:
    """(the scheme class vLLM's Quark parser picks, why vLLM cannot build it) for a global config (`pack_method`:
    the config's export.pack_method, which INT4 needs)."""
    weight, inputs = global_config.get("weight"), global_config.get("input_tensors")
    int_fp4 = int_fp4_scheme_choice(weight, inputs, pack_method)
    if int_fp4 is not None:
        return int_fp4
    if not isinstance(weight, dict) or not (inputs is None or isinstance(inputs, dict)):
        return None, None
    if isinstance(inputs, dict):
        fp8 = weight.get("dtype") == "fp8_e4m3" and inputs.get("dtype") == "fp8_e4m3"
        weight_ok = not weight.get("is_dynamic") and weight.get("qscheme") in ("per_tensor", "per_channel")
        input_ok = bool(inputs.get("is_dynamic")) or inputs.get("qscheme") == "per_tensor"
        if fp8 and weight_ok and input_ok:
            return "QuarkW8A8Fp8", None
    return mx_scheme_choice(weight, inputs)


def vllm_scheme_name(global_config: Mapping[str, Any]) -> str | None:
    return vllm_scheme_choice(global_config)[0]


def _config_problems(qc: Mapping[str, Any]) -> list[str]:
    problems = []
    if qc.get("quant_method") != "quark":
        problems.append(f"quant_method is {qc.get('quant_method')!r}, vLLM needs 'quark'")
    export = qc.get("export")
    if not isinstance(export, dict):
        problems.append("'export' is missing: vLLM's QuarkConfig.from_config raises")
    else:
        if not isinstance(export.get("kv_cache_group"), list):
            problems.append("export.kv_cache_group must be a list")
        if not isinstance(export.get("pack_method"), str):
            problems.append("export.pack_method must be a string")
    for key in ("layer_quant_config", "layer_type_quant_config"):
        if not isinstance(qc.get(key), dict):
            problems.append(f"'{key}' must be an object ({{}} when empty)")
    if not isinstance(qc.get("exclude"), list):
        problems.append("'exclude' must be a list")
    return problems


def loader_family(cfg: DraftConfig) -> dict[str, Any]:
    """The `family` and `fused_q_a` arguments of `check_loader_compat` for a draft's config."""
    return {"family": cfg.family, "fused_q_a": cfg.mla is None or cfg.mla.q_lora_rank is not None}


def check_loader_compat(quant_config: Mapping[str, Any], intended: Mapping[str, bool] | None = None,
                        depths: Iterable[int] = CHECK_DEPTHS, family: DraftFamily = DraftFamily.LLAMA,
                        fused_q_a: bool = True) -> LoaderCheck:
    """Per runtime layer of `family`'s vLLM class and target depth: would vLLM quantize it, with which
    scheme, as intended? (`fused_q_a`: see `runtime_layers`.)"""
    depths = tuple(depths)
    problems = _config_problems(quant_config)
    exclude = [e for e in quant_config.get("exclude") or [] if isinstance(e, str)]
    global_config = quant_config.get("global_quant_config") or {}
    scheme, unbuildable = vllm_scheme_choice(global_config, (quant_config.get("export") or {}).get("pack_method"))
    layers = []
    for depth in depths:
        for layer in runtime_layers(depth, family, fused_q_a):
            quantized = not _ignored(layer, exclude)
            want = None if intended is None else intended.get(layer.roles[0])   # None: not in the draft
            problem = None
            if want is not None and quantized != want:
                problem = (f"vLLM would {'quantize' if quantized else 'leave BF16'} it, but it was "
                           f"{'quantized' if want else 'kept BF16'} in the checkpoint")
            elif quantized and unbuildable:
                problem = unbuildable
            elif quantized and scheme is None:
                problem = "global_quant_config is no scheme vLLM's Quark loader builds (FP8, INT8, INT4, NVFP4, OCP MX)"
            layers.append(LayerLoad(depth, layer.name, layer.roles, quantized,
                                    scheme if quantized else None, want, problem))
    return LoaderCheck(depths, tuple(layers), tuple(problems))
