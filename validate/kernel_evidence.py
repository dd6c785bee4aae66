"""What the BLAS libraries' logs and the profiler's kernel names say ran for the FP8 linears.

The library's own log comes first: cuBLASLt's trace (``CUBLASLT_LOG_LEVEL=2``) prints every ``cublasLtMatmul``
with its operand descriptors (``Adesc=[type=R_8F_E4M3 ...]``) and scale modes (``aScaleMode=OUTER_VEC_32F``: one
fp32 scale per row or column, what rowwise ``torch._scaled_mm`` passes; ``SCALAR_32F`` or none: one scale per
tensor); hipBLASLt's log (``HIPBLASLT_LOG_LEVEL=2``) prints its matmul calls and hipblaslt-bench lines with
``--a_type f8_r ... --scaleA N``; rocBLAS's trace (``ROCBLAS_LAYER=1``) a fallback GEMM. The profiler's kernel names
come second, by family: cuBLASLt's Hopper kernels ``nvjet_sm90_*``, CUTLASS (ATen's own rowwise ``f8f8bf16``),
cuBLAS ``*xmma*gemm*``, Tensile's ``Cijk_*`` (rocBLAS and hipBLASLt alike).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

HIPBLASLT_LINE = re.compile(r"hipblasLtMatmul|rocblaslt_matmul|hipblaslt", re.IGNORECASE)
ROCBLAS_GEMM_LINE = re.compile(r"rocblas_\w*gemm", re.IGNORECASE)
CUBLASLT_LINE = re.compile(r"cublasLtMatmul\]|\[cublasLtMatmul|cublasLtMatmul\(", re.IGNORECASE)
CUBLASLT_TYPES = {"R_8F_E4M3": "E4M3", "R_8F_E5M2": "E5M2", "R_16BF": "BF16", "R_16F": "FP16", "R_32F": "FP32"}
HIPBLASLT_TYPES = {"f8_r": "E4M3", "f8_fnuz_r": "E4M3 (fnuz)", "bf8_r": "E5M2", "bf8_fnuz_r": "E5M2 (fnuz)",
                   "bf16_r": "BF16", "f16_r": "FP16", "f32_r": "FP32"}
CUBLASLT_SCALES = {"OUTER_VEC_32F": "rowwise", "SCALAR_32F": "tensorwise", "VEC16_UE4M3": "block of 16 (UE4M3)",
                   "VEC32_UE8M0": "block of 32 (UE8M0)", "VEC128_32F": "block of 128", "BLK128x128_32F": "128x128"}
FP8_TYPES = {"E4M3", "E5M2", "E4M3 (fnuz)", "E5M2 (fnuz)"}
GEMM_FAMILIES = (("nvjet", re.compile(r"^(nvjet_sm\d+)")),
                 ("CUTLASS", re.compile(r"cutlass|f8f8bf16", re.I)),
                 ("Cijk (Tensile)", re.compile(r"^(Cijk)_")),
                 ("cuBLAS xmma", re.compile(r"xmma\w*gemm|gemm\w*xmma", re.I)),
                 ("gemm", re.compile(r"gemm", re.I)))


@dataclass(frozen=True)
class MatmulCall:
    """One matmul line of a BLAS library's log."""

    library: str                  # cuBLASLt | hipBLASLt
    a_type: str | None
    b_type: str | None
    out_type: str | None
    scale_mode: str | None        # rowwise | tensorwise | block ... | hipBLASLt's "scaleA=N scaleB=M" | None

    @property
    def fp8(self) -> bool:
        return self.a_type in FP8_TYPES and self.b_type in FP8_TYPES


def _field(pattern: str, line: str) -> str | None:
    found = re.search(pattern, line)
    return found.group(1) if found else None


def parse_cublaslt(line: str) -> MatmulCall:
    def typed(desc: str) -> str | None:
        raw = _field(desc + r"=\[type=(\w+)", line)
        return CUBLASLT_TYPES.get(raw, raw) if raw else None

    a_mode, b_mode = _field(r"aScaleMode=(\w+)", line), _field(r"bScaleMode=(\w+)", line)
    if a_mode or b_mode:
        modes = {CUBLASLT_SCALES.get(m, m) for m in (a_mode, b_mode) if m}
        scale = modes.pop() if len(modes) == 1 else "/".join(sorted(modes))
    else:
        scale = "tensorwise" if "aScalePointer" in line else None
    return MatmulCall("cuBLASLt", typed("Adesc"), typed("Bdesc"), typed("Ddesc"), scale)


def parse_hipblaslt(line: str) -> MatmulCall:
    def typed(flag: str) -> str | None:
        raw = _field(rf"--{flag}\s+(\w+)", line)
        return HIPBLASLT_TYPES.get(raw, raw) if raw else None

    a_scale, b_scale = _field(r"--scaleA\s+(\d+)", line), _field(r"--scaleB\s+(\d+)", line)
    scale = f"scaleA={a_scale} scaleB={b_scale}" if a_scale or b_scale else None
    return MatmulCall("hipBLASLt", typed("a_type"), typed("b_type"), typed("d_type") or typed("c_type"), scale)


def kernel_family(name: str) -> str | None:
    """The GEMM family of a kernel name, None for any other kernel (quantization, copies, reductions)."""
    for family, pattern in GEMM_FAMILIES:
        found = pattern.search(name)
        if found:
            return found.group(1) if found.groups() else family
    return None


@dataclass(frozen=True)
class KernelEvidence:
    """What ran, from the logs first and the kernel names second."""

    cublaslt: list[MatmulCall] = field(default_factory=list)
    hipblaslt_lines: int = 0
    hipblaslt: list[MatmulCall] = field(default_factory=list)      # the lines that carry operand types
    rocblas_gemm_lines: int = 0
    gemm_families: dict[str, int] = field(default_factory=dict)    # family -> launches
    other_kernels: int = 0
    sample: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, lines: list[str], kernel_counts: dict[str, int]) -> KernelEvidence:
        hip = [ln for ln in lines if HIPBLASLT_LINE.search(ln)]
        rocblas = [ln for ln in lines if ROCBLAS_GEMM_LINE.search(ln)]
        cublaslt = [ln for ln in lines if CUBLASLT_LINE.search(ln)]
        families: Counter[str] = Counter()
        other = 0
        for name, count in kernel_counts.items():
            family = kernel_family(name)
            if family is None:
                other += count
            else:
                families[family] += count
        return cls([parse_cublaslt(ln) for ln in cublaslt], len(hip),
                   [parse_hipblaslt(ln) for ln in hip if "--a_type" in ln], len(rocblas), dict(families), other,
                   (hip or cublaslt or rocblas)[:3])

    @property
    def calls(self) -> list[MatmulCall]:
        return self.cublaslt or self.hipblaslt

    def fp8_calls(self) -> list[MatmulCall]:
        return [c for c in self.calls if c.fp8]

    def describe_calls(self, calls: list[MatmulCall]) -> str:
        """"E4M3 x E4M3 -> BF16, rowwise fp32 scales" for the commonest form of `calls`."""
        form = Counter((c.a_type, c.b_type, c.out_type, c.scale_mode) for c in calls).most_common(1)[0][0]
        a, b, out, scale = form
        scales = {"rowwise": "rowwise fp32 scales", "tensorwise": "one fp32 scale per tensor"}.get(scale or "", scale)
        return f"{a} x {b} -> {out}" + (f", {scales}" if scales else "")

    def describe_kernels(self) -> str:
        gemms = ", ".join(f"{family} x{count}" for family, count in sorted(self.gemm_families.items()))
        return f"GEMM kernels: {gemms or 'none'}; other kernels: {self.other_kernels}"

    def to_dict(self) -> dict:
        """The report's ``log_evidence``: the counts it always had, plus the parsed calls by form."""
        forms = Counter(f"{c.library}: {c.a_type} x {c.b_type} -> {c.out_type}, scales {c.scale_mode}"
                        for c in self.calls)
        return {"hipblaslt_matmul_lines": self.hipblaslt_lines, "rocblas_gemm_lines": self.rocblas_gemm_lines,
                "cublaslt_matmul_lines": len(self.cublaslt), "fp8_matmul_calls": len(self.fp8_calls()),
                "matmul_forms": dict(forms), "gemm_families": self.gemm_families,
                "other_kernels": self.other_kernels, "sample": self.sample}


def library_of(evidence: KernelEvidence) -> str | None:
    if evidence.cublaslt:
        return "cuBLASLt"
    if evidence.hipblaslt_lines:
        return "hipBLASLt"
    return None

