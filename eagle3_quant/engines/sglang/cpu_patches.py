"""The CPU patches that let SGLang 0.5.23's own loader run on a machine without a GPU (child process only).

Each patch replaces a device probe or a GPU-only kernel; the model classes, the Quark config, the weight
loaders and the FP8 linear math above them are SGLang's own. `PATCHES` names them for the report.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

PATCHES = (
    "torchvision: an import stub (the PyPI wheel's torchvision::nms op fails against a CPU torch; not on this path)",
    "QuarkConfig's get_device_capability -> (9, 0) (on CPU it returns None and _check_scheme_supported fails)",
    "rotary embedding _is_cpu = True (else it imports vllm._custom_ops)",
    "per_token_group_quant_fp8 in torch, the Triton kernel's math (its launch needs a GPU driver)",
    "static_quant_fp8 (static FP8 inputs) in torch, the Triton kernel's math",
    "scaled_fp8_quant (requantizing fused per-tensor weights) in torch, SGLang's own ROCm fallback math "
    "(the CUDA branch calls sgl-kernel)",
    "dynamic_mxfp4_quant and gemm_afp4wfp4 (QuarkW4A4MXFP4's AITER kernels, defined only on ROCm) in torch: "
    "MXFP4 activations with Quark's even E8M0 scale and an fp32 GEMM of the dequantized operands "
    "(eagle3_quant/runtime/mx.py, bit-exact to Quark's MX math)",
)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        sub = _stub(f"{self.__name__}.{name}")
        setattr(self, name, sub)
        return sub

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is an import stub")


def _stub(name: str) -> types.ModuleType:
    module = _StubModule(name)
    module.__path__ = []
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    sys.modules[name] = module
    return module


class _TorchvisionStub:
    def find_spec(self, name, path, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _stub(spec.name)

    def exec_module(self, module):
        pass


def stub_torchvision() -> None:
    """Before importing sglang: transformers first records torchvision as absent, then imports of it get stubs."""
    import transformers.utils.import_utils as import_utils

    for probe in ("is_torchvision_available", "is_torchvision_v2_available"):
        if hasattr(import_utils, probe):
            getattr(import_utils, probe)()
    sys.meta_path.insert(0, _TorchvisionStub())


def per_token_group_quant_fp8(x, group_size, eps=1e-10, *args, **kwargs):
    """SGLang's `_per_token_group_quant_8bit` kernel in torch: absmax per group (floored at eps) / 448."""
    import torch

    fp8 = torch.float8_e4m3fn
    fp8_max = torch.finfo(fp8).max
    groups = x.float().reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)
    scale = groups.abs().amax(-1, keepdim=True).clamp(min=eps) / fp8_max
    q = (groups * (1.0 / scale)).clamp(-fp8_max, fp8_max).to(fp8).reshape(x.shape)
    return q, scale.squeeze(-1).contiguous()


def static_quant_fp8(x, x_s, repeat_scale=False):
    """SGLang's `_static_quant_fp8` Triton kernel in torch: x * (1 / scale), clamped, cast."""
    import torch

    fp8 = torch.float8_e4m3fn
    fp8_max = torch.finfo(fp8).max
    scale = x_s.reshape(()).float()
    q = (x.float() * (1.0 / scale)).clamp(-fp8_max, fp8_max).to(fp8)
    rows = x.numel() // x.shape[-1]
    return q, (scale.expand(rows, 1).contiguous() if repeat_scale else x_s)


def scaled_fp8_quant(input, scale=None, num_token_padding=None, use_per_token_if_dynamic=False):
    """SGLang's `scaled_fp8_quant` with its ROCm-branch native fallbacks (`_native_*_quant_fp8`)."""
    import torch

    fp8 = torch.float8_e4m3fn
    fp8_max = torch.finfo(fp8).max
    if scale is None:
        dims = (1,) if use_per_token_if_dynamic else (0, 1)
        scale = (input.abs().amax(dim=dims, keepdim=use_per_token_if_dynamic).clamp(min=1e-12) / fp8_max).float()
        scale = scale if use_per_token_if_dynamic else scale.reshape(1)
    output = torch.clamp(input / scale, -fp8_max, fp8_max).to(fp8)
    if num_token_padding and num_token_padding > output.shape[0]:
        output = torch.cat([output, output.new_zeros(num_token_padding - output.shape[0], output.shape[1])])
    return output, scale


def dynamic_mxfp4_quant(x):
    """AITER's ``dynamic_mxfp4_quant``: [M, N] -> (packed E2M1 uint8 [M, N/2], E8M0 uint8 [M, N/32])."""
    from eagle3_quant.runtime.mx import quantize_mxfp4

    return quantize_mxfp4(x)


def gemm_afp4wfp4(x, w, x_scales, w_scales, dtype, y):
    """AITER's ``gemm_afp4wfp4``: y = dequant(x) @ dequant(w).T, accumulated in fp32, written into `y`."""
    import torch

    from eagle3_quant.runtime.mx import dequantize_mxfp4

    a = dequantize_mxfp4(x, x_scales, torch.float32)
    b = dequantize_mxfp4(w, w_scales, torch.float32)
    y.copy_((a @ b.T).to(y.dtype))
    return y


def patch_sglang() -> None:
    import sglang.srt.layers.quantization.fp8_utils as fp8_utils
    import sglang.srt.layers.quantization.quark.quark as quark
    import sglang.srt.layers.quantization.quark.schemes.quark_w4a4_mxfp4 as w4a4
    import sglang.srt.layers.quantization.utils as quant_utils
    import sglang.srt.layers.rotary_embedding.base as rotary

    quark.get_device_capability = lambda *args, **kwargs: (9, 0)
    rotary._is_cpu = True
    fp8_utils.per_token_group_quant_fp8 = per_token_group_quant_fp8
    fp8_utils.static_quant_fp8 = static_quant_fp8
    fp8_utils.scaled_fp8_quant = scaled_fp8_quant
    quant_utils.scaled_fp8_quant = scaled_fp8_quant
    w4a4.dynamic_mxfp4_quant = dynamic_mxfp4_quant
    w4a4.gemm_afp4wfp4 = gemm_afp4wfp4
