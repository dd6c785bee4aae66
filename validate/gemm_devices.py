"""The GEMM each scheme's quantized linears should run on each device the kernel check knows, what the check runs
there to see it, and what that GEMM leaves in the logs.

Read from the scheme registry (eagle3_quant/schemes.py), never restated: the GEMM (`gemm_forms.scheme_gemm`), the
device profiles whose vLLM 0.33 kernels run it natively (``Scheme.native_devices``) and what vLLM runs per vendor
(``Scheme.gemm``). Added here, each with its source:
- what PyTorch can call to make the vendor's BLAS run that GEMM, and where (`PROBES`): ``torch._scaled_mm`` for
  FP8; ``torch._int_mm`` for INT8 (pytorch aten/src/ATen/native/cuda/Blas.cpp ``_int_mm_out_cuda`` ->
  aten/src/ATen/cuda/CUDABlas.cpp @0040fe0d ``int8_gemm``: ``CUDA_R_8I`` operands, ``CUDA_R_32I`` out, compute
  ``CUBLAS_COMPUTE_32I``, no scales; CUDA >= 11.7, ROCm >= 6.0 through hipBLASLt); ``torch._scaled_mm`` with block
  scales (ROCm/pytorch aten/src/ATen/cuda/CUDABlas.cpp @03c1b488 ``get_scale_mode``: ``float8_e8m0fnu`` scales
  per 32 -> ``VEC32_UE8M0`` on CUDA >= 12.8 and hipBLASLt on ROCm >= 7.0 (gfx950: M, N multiples of 16, K of 128);
  ``float8_e4m3fn`` scales per 16 -> ``VEC16_UE4M3``, CUDA only); MXFP4 on gfx950 stays AITER's GEMM, as vLLM runs
  it (validate/mx_kernel_probe.py);
- the log lines and kernel names of that GEMM, from the readers' own tables (validate/blas_log_lines.py,
  validate/kernel_names.py), so a row and the parser cannot disagree;
- for W4A16, the kernels vLLM runs instead of any vendor BLAS (`W4A16_KERNELS`), which this check does not run.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.devices import DEVICE_PROFILES
from eagle3_quant.schemes import SCHEMES, Scheme
from eagle3_quant.validate.blas_log_lines import BENCH_SCALES, BENCH_TYPES, CUBLASLT_SCALES, CUBLASLT_TYPES
from eagle3_quant.validate.gemm_forms import AMBIGUOUS, FP8_ELEMENTS, ExpectedGemm, scheme_gemm
from eagle3_quant.validate.kernel_names import MX_SCALE_TYPES, TENSILE_ELEMENTS

# the devices the check knows, by architecture: vendor, and the device profiles of that architecture
DEVICES = {arch: (vendor, tuple(p.name for p in DEVICE_PROFILES.values() if p.arch == arch))
           for arch, vendor in {p.arch: p.vendor for p in DEVICE_PROFILES.values()}.items()}
VENDORS = {"rocm": "amd", "cuda": "nvidia"}      # schemes.Scheme.gemm's vendor keys
SCALED_MM = "torch._scaled_mm"
INT_MM = "torch._int_mm"
BLOCK_MM = "torch._scaled_mm with block scales"
NATIVE_MXFP4 = "AITER gemm_afp4wfp4 (vLLM 0.33's AiterMxfp4LinearKernel, Triton path)"
# weight layout (TensorQuantSpec.kind) -> {device: what the check runs}
PROBES = {"fp8": dict.fromkeys(DEVICES, SCALED_MM), "int8": dict.fromkeys(DEVICES, INT_MM),
          "mx": {"gfx950": NATIVE_MXFP4, "sm_100": BLOCK_MM}, "mxfp8": {"gfx950": BLOCK_MM, "sm_100": BLOCK_MM},
          "nvfp4": {"sm_100": BLOCK_MM}}
# vLLM 0.33 kernels/linear/__init__.py _POSSIBLE_KERNELS and each kernel's can_implement (mixed_precision/machete.py:
# compute capability 9.0 only; marlin.py: CUDA; triton_w4a16.py: CUDA or ROCm; exllama.py: float16 activations only);
# kernel symbols: vllm-project/vllm csrc/quantization/machete/machete_mm_kernel.cuh, csrc/quantization/gptq_marlin/
# kernel.h @99a3e137 (marlin::Marlin), triton_w4a16.py (triton_w4a16_gemm_kernel)
W4A16_KERNELS = {"sm_90": "Machete's CUTLASS kernels (machete_mm), else Marlin (marlin::Marlin<...>)",
                 "sm_100": "Marlin (marlin::Marlin<...>)",
                 "gfx950": "TritonW4A16LinearKernel (triton_w4a16_gemm_kernel)",
                 "gfx942": "TritonW4A16LinearKernel (triton_w4a16_gemm_kernel)"}
FALLBACKS = {"cuda": "BF16 GEMMs (type=R_16BF: dequantized weights, as vLLM's emulation kernels run), or other scales",
             "rocm": "BF16 GEMMs (bf16_r, Tensile BBS: dequantized weights), rocBLAS, or other scales"}


@dataclass(frozen=True)
class DeviceGemm:
    """One scheme on one device: what should run, what the check runs to see it, what it would read."""

    scheme: str
    device: str                   # gfx950, gfx942, sm_90, sm_100
    native: bool                  # the registry: vLLM 0.33 runs the scheme's GEMM natively here
    vllm_runs: str                # the registry's GEMM for this vendor
    expected: ExpectedGemm        # resolved for the device (FP8 is fnuz on gfx942)
    probe: str | None             # what the check runs here, None when it can run nothing
    evidence: str                 # what a native GEMM leaves in the log lines and kernel names
    fallback: str
    reason: str = ""              # why the check runs nothing here


def _key(table: dict, value: str) -> str:
    return next(k for k, v in table.items() if v == value)


def _evidence(expected: ExpectedGemm, vendor: str) -> str:
    """What the expected GEMM's log lines and kernel names say, in the libraries' own spelling."""
    element, mode = expected.element.split()[0], expected.scale_mode
    if vendor == "cuda":
        scales = {"none": "no scale pointers", "tensorwise": "scale pointers, no scale mode"}.get(
            mode) or f"aScaleMode={_key(CUBLASLT_SCALES, mode)}"
        return f"cuBLASLt trace type={_key(CUBLASLT_TYPES, element)}, {scales}"
    ambiguous = element + AMBIGUOUS if element in FP8_ELEMENTS else element
    tensile = _key(TENSILE_ELEMENTS, expected.element if expected.element in TENSILE_ELEMENTS.values() else ambiguous)
    if mode.startswith("block"):
        size, scale = mode.removeprefix("block").split("_")
        scales = f", MXA{_key({k: v for k, v in MX_SCALE_TYPES.items() if k}, scale)}B{size}"
    else:
        scales = {"rowwise": ", SABV", "tensorwise": ", SAB"}.get(mode, "")
    return f"hipBLASLt bench --a_type {_key(BENCH_TYPES, ambiguous)} --scaleA {_key(BENCH_SCALES, mode)}; Tensile " \
           f"{tensile} operands{scales}"


def _no_probe(scheme: Scheme, device: str, native: bool, vllm_runs: str) -> str:
    profiles = ", ".join(scheme.native_devices) or "no device"
    if not native:
        return f"{scheme.name} on {device}: vLLM 0.33 runs no native GEMM for it here ({vllm_runs}); natively on " \
               f"{profiles}"
    if scheme.weight.kind == "int4":
        return f"{scheme.name} on {device}: vLLM runs its own W4A16 kernels, {W4A16_KERNELS[device]}, not a vendor " \
               "BLAS GEMM (no vendor BLAS has INT4 x BF16); this check runs none of them and cannot judge this path"
    return f"{scheme.name} on {device}: vLLM runs {vllm_runs}, which this check does not run; it cannot judge " \
           "this path"


def device_gemm(name: str, arch: str | None) -> DeviceGemm | None:
    """The row of scheme `name` for device `arch` (gfx950, sm_90 ...); None for a device the check does not know."""
    if arch not in DEVICES:
        return None
    scheme, (vendor, profiles) = SCHEMES[name], DEVICES[arch]
    native = bool(set(profiles) & set(scheme.native_devices))
    vllm_runs = dict(scheme.gemm)[VENDORS[vendor]]
    expected = scheme_gemm(scheme).on(arch)
    mixed = scheme.input.quantized and scheme.input.kind != scheme.weight.kind
    probe = None if mixed or not native else PROBES.get(scheme.weight.kind, {}).get(arch)
    if scheme.weight.kind == "int4":
        evidence = W4A16_KERNELS[arch] + " kernel names (vLLM's own, no BLAS log line)"
    else:
        evidence = _evidence(expected, vendor) if not mixed else vllm_runs
    return DeviceGemm(name, arch, native, vllm_runs, expected, probe, evidence, FALLBACKS[vendor],
                      "" if probe else _no_probe(scheme, arch, native, vllm_runs))


GEMM_TABLE = {(name, arch): device_gemm(name, arch) for name in SCHEMES for arch in DEVICES}
