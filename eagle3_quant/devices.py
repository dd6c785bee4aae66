"""The GPUs a draft is served on: peak bandwidth for the cost model's floor, and which one this machine has.

Which schemes a device runs natively is each scheme's fact (``schemes.Scheme.native_devices``, read from vLLM's
kernel tables); ``quantize --scheme auto --device-profile NAME`` keeps those. ``current`` names the GPU this
machine has, found by the name its driver reports ("NVIDIA H200", "AMD Instinct MI355X") or, on ROCm, by its
architecture (gfx950, gfx942).
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.errors import SchemeError
from eagle3_quant.schemes import DEVICE_PROFILE_NAMES, Scheme

CURRENT = "current"      # --device-profile current: the GPU of this machine


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    device: str
    hbm_bytes_per_s: float     # peak HBM bandwidth, public spec sheet
    arch: str                  # gfx950, gfx942 (ROCm); sm_90, sm_100 (CUDA)

    @property
    def vendor(self) -> str:
        return "rocm" if self.arch.startswith("gfx") else "cuda"


DEVICE_PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (
    DeviceProfile("mi355x", "AMD Instinct MI355X", 8.0e12, "gfx950"),
    DeviceProfile("mi300x", "AMD Instinct MI300X", 5.3e12, "gfx942"),
    DeviceProfile("h200", "NVIDIA H200", 4.8e12, "sm_90"),
    DeviceProfile("h100", "NVIDIA H100 SXM", 3.35e12, "sm_90"),
    DeviceProfile("b200", "NVIDIA B200", 8.0e12, "sm_100"),
)}
PROFILE_CHOICES = (*DEVICE_PROFILE_NAMES, CURRENT)


def get_device_profile(name: str) -> DeviceProfile:
    try:
        return DEVICE_PROFILES[name]
    except KeyError:
        raise SchemeError(f"unknown device profile {name!r}; valid profiles: {', '.join(DEVICE_PROFILES)}",
                          field="device_profile") from None


def profile_of(device_name: str, arch: str | None = None) -> DeviceProfile | None:
    """The profile whose short name the driver's device name holds ("NVIDIA H200" -> h200), else the one of a
    ROCm architecture (gfx942 -> mi300x); None for any other device."""
    upper = device_name.upper()
    named = next((p for p in DEVICE_PROFILES.values() if p.name.upper() in upper), None)
    if named is not None or not (arch or "").startswith("gfx"):
        return named
    return next((p for p in DEVICE_PROFILES.values() if p.arch == arch), None)


def gpu_arch(props) -> str:
    """The architecture of a GPU from torch's device properties: gfx950 on ROCm (its gcnArchName before the
    feature flags), sm_90 on CUDA."""
    import torch

    return props.gcnArchName.split(":")[0] if torch.version.hip else f"sm_{props.major}{props.minor}"


def current_profile() -> DeviceProfile:
    """The profile of this machine's first GPU; refused, naming the valid profiles, without one or for another."""
    import torch

    choose = f"name one of {', '.join(DEVICE_PROFILES)}"
    if not torch.cuda.is_available():
        raise SchemeError(f"--device-profile {CURRENT}: this machine has no GPU; {choose}", field="device_profile")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    arch = gpu_arch(props)
    profile = profile_of(props.name, arch)
    if profile is None:
        raise SchemeError(f"--device-profile {CURRENT}: {props.name} ({arch}) is none of the profiles; {choose}",
                          field="device_profile")
    return profile


def resolve_profile(name: str | None) -> DeviceProfile | None:
    """--device-profile NAME as a profile (`current`: this machine's GPU); None when not given."""
    if name is None:
        return None
    return current_profile() if name == CURRENT else get_device_profile(name)


def not_native(scheme: Scheme, profile: DeviceProfile) -> str | None:
    """Why `profile` leaves `scheme` out (its GEMM runs natively elsewhere, or nowhere), else None."""
    if profile.name in scheme.native_devices:
        return None
    where = f"native on {', '.join(scheme.native_devices)}" if scheme.native_devices else "native on no device"
    return f"{profile.name} runs no {scheme.name} GEMM natively ({where})"
