"""The four CPU patches that let SGLang 0.5.23's own loader run on a machine without a GPU (child process only).

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


def patch_sglang() -> None:
    import sglang.srt.layers.quantization.fp8_utils as fp8_utils
    import sglang.srt.layers.quantization.quark.quark as quark
    import sglang.srt.layers.rotary_embedding.base as rotary

    quark.get_device_capability = lambda *args, **kwargs: (9, 0)
    rotary._is_cpu = True
    fp8_utils.per_token_group_quant_fp8 = per_token_group_quant_fp8
