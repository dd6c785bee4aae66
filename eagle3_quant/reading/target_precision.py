"""The precision a target is served in: read from its config's ``quantization_config`` (AMD Quark, compressed-tensors,
vLLM's FP8 checkpoints) or asked of vLLM at load (``--target-quantization fp8``: vLLM's online quantization of a
BF16 target). What every record keeps beside the target's name, and what decides whether an engine on this platform
can serve it (`serve_refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ONLINE_METHODS = ("fp8",)          # vLLM's --quantization values this toolkit passes for a BF16 target
METHOD_NAMES = {"quark": "AMD Quark", "compressed-tensors": "compressed-tensors", "fp8": "vLLM FP8"}
MX_DTYPES = {"fp4": "MXFP4", "fp6_e2m3": "MXFP6 E2M3", "fp6_e3m2": "MXFP6 E3M2"}


@dataclass(frozen=True)
class TargetPrecision:
    method: str | None                 # None: not quantized; "quark", "compressed-tensors", "fp8", ...
    weights: str                       # "bf16", "fp8 per-channel", "mxfp4", "int8 per-channel", ...
    activations: str                   # "bf16", "fp8 per-token dynamic", "mxfp4 dynamic", ...
    online: bool = False               # vLLM quantizes the BF16 checkpoint at load

    @property
    def quantized(self) -> bool:
        return self.method is not None

    @property
    def mx(self) -> bool:
        return self.weights.startswith("mx")

    def describe(self) -> str:
        if not self.quantized:
            return self.weights
        how = f"vLLM's online {self.method.upper()} quantization" if self.online else \
            f"{METHOD_NAMES.get(self.method, self.method)} checkpoint"
        return f"{how}: weights {self.weights}, activations {self.activations}"

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "weights": self.weights, "activations": self.activations,
                "online": self.online}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TargetPrecision:
        return cls(data.get("method"), str(data.get("weights")), str(data.get("activations")),
                   bool(data.get("online", False)))


def _quark_tensor(spec: Mapping[str, Any] | None, role: str) -> str:
    if not spec:
        return "bf16"
    dtype = str(spec.get("dtype"))
    if dtype in MX_DTYPES:
        name = MX_DTYPES[dtype].lower()
    else:
        name = dtype.removesuffix("_e4m3").replace("fp8_e5m2", "fp8 e5m2")
        scheme = str(spec.get("qscheme"))
        granularity = {"per_tensor": "per-tensor", "per_group": f"per-group {spec.get('group_size')}"}.get(
            scheme, "per-token" if role == "input" else "per-channel")
        name = f"{name} {granularity}"
    return f"{name} dynamic" if spec.get("is_dynamic") and role == "input" else name


def _ct_tensor(spec: Mapping[str, Any] | None, role: str) -> str:
    if not spec:
        return "bf16"
    kind = "fp8" if spec.get("type") == "float" and spec.get("num_bits") == 8 else \
        f"{spec.get('type', 'int')}{spec.get('num_bits')}"
    strategy = {"channel": "per-channel", "tensor": "per-tensor", "token": "per-token", "group": "per-group",
                "block": "per-block"}.get(str(spec.get("strategy")), str(spec.get("strategy")))
    return f"{kind} {strategy}" + (" dynamic" if spec.get("dynamic") and role == "input" else "")


def read_precision(config: Mapping[str, Any], online: str | None = None, dtype: str = "bfloat16") -> TargetPrecision:
    """The precision of a target whose config.json is `config`; `online`: vLLM's --quantization for a BF16 one."""
    quant = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config")
    if online:
        if quant:
            raise ValueError("the target is already quantized; online quantization is for a BF16 target")
        return TargetPrecision(online, "fp8 per-tensor", "fp8 per-tensor dynamic", online=True)
    if not quant:
        return TargetPrecision(None, dtype, dtype)
    method = str(quant.get("quant_method"))
    if method == "quark":
        layer = quant.get("global_quant_config") or {}
        return TargetPrecision(method, _quark_tensor(layer.get("weight"), "weight"),
                               _quark_tensor(layer.get("input_tensors"), "input"))
    if method == "compressed-tensors":
        group = next(iter((quant.get("config_groups") or {}).values()), {})
        return TargetPrecision(method, _ct_tensor(group.get("weights"), "weight"),
                               _ct_tensor(group.get("input_activations"), "input"))
    if method == "fp8":
        dynamic = quant.get("activation_scheme", "dynamic") == "dynamic"
        blocks = quant.get("weight_block_size")
        return TargetPrecision(method, f"fp8 per-block {blocks}" if blocks else "fp8 per-tensor",
                               "fp8 " + ("per-token-group dynamic" if blocks else
                                         "per-tensor dynamic" if dynamic else "per-tensor static"))
    return TargetPrecision(method, "unknown", "unknown")


def serve_refusal(precision: TargetPrecision, cpu: bool, engine_has_quark: bool) -> str | None:
    """Why vLLM on this platform cannot serve a target of this precision (None: it can, as far as known)."""
    if not precision.quantized:
        return None
    if precision.method not in ("quark", "compressed-tensors", "fp8"):
        return f"quantization method {precision.method!r} is not one this toolkit runs targets with"
    if "unknown" in (precision.weights, precision.activations):
        return f"its {precision.method} scheme is not one this toolkit reads"
    if precision.mx and cpu and not engine_has_quark:
        return ("an MX target runs on vLLM's CPU build only through vLLM's MX emulation kernels, which import "
                "amd-quark, and the engine's environment has none (`make setup-engine` installs it)")
    return None
