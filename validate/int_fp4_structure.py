"""Data-free check of an INT8, INT4, NVFP4 or MXFP8 draft's quantized linears (``reading/int_fp4_layout.py`` read
their layouts): one kind for all, float and FP8 scales finite and non-negative (global and per-channel ones
positive), no E8M0 NaN, codes in range, and the config declaring that kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from eagle3_quant.reading.artifact import quant_spec
from eagle3_quant.runtime.quant_linears import KIND_NAMES
from eagle3_quant.validate.report import Check, failed, passed

if TYPE_CHECKING:
    from eagle3_quant.reading.artifact import Fp8Artifact

SHOWN = 3
# the Quark config each kind's linears need: global_quant_config.weight dtype (the first entry for NVFP4's pair)
CONFIG_DTYPES = {"int8": ("int8",), "int4": ("int4", "uint4"), "nvfp4": ("fp4",), "mxfp8": ("fp8_e4m3",)}



def _scale_problem(name: str, info) -> str | None:
    values = info.load()
    if info.dtype == "U8":
        return f"{name} holds the E8M0 NaN (0xFF)" if bool((values == 255).any()) else None
    values = values.to(torch.float32)
    positive = info.numel == 1 or info.dtype != "F8_E4M3"
    ok = torch.isfinite(values).all() and ((values > 0) if positive else (values >= 0)).all()
    return None if bool(ok) else f"{name} holds non-finite or {'non-positive' if positive else 'negative'} values"


def config_weight_dtype(art: Fp8Artifact) -> str | None:
    return quant_spec(quant_spec(art.quant_config.get("global_quant_config")).get("weight")).get("dtype")


def check_quant_weights(art: Fp8Artifact) -> Check:
    tensors, problems = art.checkpoint.tensors, []
    kinds = {linear.kind for linear in art.quant_linears.values()}
    if len(kinds) > 1:
        problems.append(f"{' and '.join(sorted(KIND_NAMES[k] for k in kinds))} linears in one artifact (one "
                        "global_quant_config)")
    for module, linear in art.quant_linears.items():
        for name in linear.tensors:
            if not name.endswith("zero_point"):
                problem = _scale_problem(name, tensors[name])
                if problem:
                    problems.append(problem)
        if linear.kind == "int4":
            zero = tensors.get(module + ".weight_zero_point")
            if zero is None:
                problems.append(f"{module}.weight_zero_point is missing (asymmetric INT4: vLLM would keep zeros)")
    others = sorted(set(art.fp8_modules) - set(art.quant_linears))
    problems += [f"{m}.weight is FP8 or MX beside {KIND_NAMES[next(iter(kinds))]} linears" for m in others if kinds]
    kind = next(iter(kinds), None)
    dtype = config_weight_dtype(art)
    if kind is not None and dtype not in CONFIG_DTYPES[kind]:
        problems.append(f"config.json's weight dtype is {dtype!r}, the checkpoint holds {KIND_NAMES[kind]} weights")
    if problems:
        more = f" (+{len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
        return failed("quant_weights", "; ".join(problems[:SHOWN]) + more)
    return passed("quant_weights", f"{len(art.quant_linears)} {KIND_NAMES[kind]} weights with finite scales as "
                                   "vLLM's Quark scheme loads them", modules=list(art.quant_linears))
