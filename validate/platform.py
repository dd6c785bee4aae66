"""Which accelerator runs the FP8 GEMMs here, and what FP8 flavour it needs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eagle3_quant.devices import gpu_arch

GPU_MODELS = {"gfx950": "MI355X", "gfx942": "MI300X"}


@dataclass(frozen=True)
class Platform:
    kind: str                 # "cpu" | "rocm" | "cuda"
    device: str               # torch device string
    name: str                 # device name as the driver reports it
    arch: str | None          # gfx950, gfx942, sm_90, ...
    torch_version: str
    runtime_version: str | None   # HIP or CUDA version torch was built with

    @property
    def model(self) -> str | None:
        return GPU_MODELS.get(self.arch or "")

    @property
    def needs_fnuz(self) -> bool:
        """gfx942 (MI300X) runs e4m3fnuz: vLLM converts e4m3fn checkpoints (values halve, scales double)."""
        return self.kind == "rocm" and (self.arch or "").startswith("gfx942")

    @property
    def scaled_mm_supported(self) -> bool:
        if self.kind == "cpu":
            return True
        if self.kind == "rocm":
            return (self.arch or "").startswith(("gfx942", "gfx950", "gfx12"))
        return _sm(self.arch) >= (8, 9)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "device": self.device, "name": self.name, "arch": self.arch,
                "model": self.model, "torch": self.torch_version, "runtime": self.runtime_version}


def _sm(arch: str | None) -> tuple[int, int]:
    digits = (arch or "sm_00").removeprefix("sm_")
    return int(digits[:-1] or 0), int(digits[-1:] or 0)


def detect_platform(device: str | None = None) -> Platform:
    """The platform of `device` (default: the first GPU if any, else the CPU)."""
    wanted = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if wanted.type != "cuda" or not torch.cuda.is_available():
        return Platform("cpu", "cpu", "cpu", None, torch.__version__, None)
    index = wanted.index if wanted.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    kind, runtime = ("rocm", torch.version.hip) if torch.version.hip else ("cuda", torch.version.cuda)
    return Platform(kind, f"cuda:{index}", props.name, gpu_arch(props), torch.__version__, runtime)
