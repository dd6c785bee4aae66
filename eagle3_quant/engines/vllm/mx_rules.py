"""Replay of vLLM 0.33's Quark choice for OCP MX configs, and whether the chosen class can be built.

Mirrors ``QuarkConfig._get_scheme_cls_from_config`` after the FP8 checks: ``_is_w4a8_mxfp4_fp8`` (MXFP4 weights,
static symmetric per-tensor FP8 input -> ``QuarkW4A8_MXFP4_FP8``), then ``_is_w_ocp_mx_a_x`` (any OCP MX weight
-> ``QuarkOCP_MX``). ``QuarkOCP_MX.__init__`` accepts only MX activation keys (mxfp4, mxfp6_e3m2, mxfp6_e2m3,
mxfp8_e4m3, all dynamic) or none: a dynamic FP8 input is parsed (``kFp8DynamicTensorSym``) and then refused
("Unsupported activation quant key"), and a static input other than the W4A8 one matches no class at all. With
MXFP6 weights the only kernel, ``EmulationMxfp6LinearKernel``, refuses MXFP8 inputs too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MX_BLOCK = 32
MX_WEIGHT_DTYPES = {"fp4": "mxfp4", "fp6_e3m2": "mxfp6_e3m2", "fp6_e2m3": "mxfp6_e2m3", "fp8_e4m3": "mxfp8_e4m3"}
MX_ACTIVATION_DTYPES = set(MX_WEIGHT_DTYPES.values())


def is_mx_weight(weight: Mapping[str, Any]) -> bool:
    return (weight.get("dtype") in MX_WEIGHT_DTYPES and weight.get("qscheme") == "per_group"
            and weight.get("group_size") == MX_BLOCK and weight.get("scale_format") == "e8m0")


def _is_w4a8_mxfp4_fp8(weight: Mapping[str, Any], inputs: Mapping[str, Any]) -> bool:
    return (weight.get("dtype") == "fp4" and is_mx_weight(weight) and not weight.get("is_dynamic")
            and inputs.get("dtype") == "fp8_e4m3" and inputs.get("qscheme") == "per_tensor"
            and not inputs.get("is_dynamic") and inputs.get("symmetric") is True)


def mx_scheme_choice(weight: Mapping[str, Any], inputs: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """(the vLLM scheme class chosen, why its construction fails) for an MX weight config; (None, None) if the
    weight is no OCP MX weight."""
    if inputs is not None and _is_w4a8_mxfp4_fp8(weight, inputs):
        return "QuarkW4A8_MXFP4_FP8", None
    if not is_mx_weight(weight):
        return None, None
    if inputs is None:
        return "QuarkOCP_MX", None
    if not inputs.get("is_dynamic"):
        return None, "OCP MX weights with static input scales match no vLLM Quark scheme (only MXFP4 weights " \
                     "with static symmetric per-tensor FP8 inputs do)"
    if inputs.get("dtype") == "fp8_e4m3" and inputs.get("qscheme") == "per_group" and \
            inputs.get("group_size") == MX_BLOCK:     # MXFP8 activations
        if str(weight.get("dtype")).startswith("fp6"):
            return "QuarkOCP_MX", ("init_mxfp6_linear_kernel finds no kernel: EmulationMxfp6LinearKernel 'only "
                                   "supports MXFP4 or MXFP6 or unquantized activations'")
        return "QuarkOCP_MX", None
    if inputs.get("dtype") == "fp8_e4m3":
        return "QuarkOCP_MX", ("QuarkOCP_MX.__init__ raises 'Unsupported activation quant key' for dynamic FP8 "
                               "activations: use MX activations or static FP8 (w_mxfp4_a_fp8)")
    if str(inputs.get("dtype")).replace("fp", "mxfp") not in MX_ACTIVATION_DTYPES:
        return "QuarkOCP_MX", f"unsupported MX input dtype {inputs.get('dtype')!r} (vLLM raises ValueError)"
    return "QuarkOCP_MX", None

