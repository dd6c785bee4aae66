"""What the BLAS libraries' logs and the profiler's kernel names say ran for the FP8 linears.

The library's own log comes first. cuBLASLt's trace (``CUBLASLT_LOG_LEVEL=2``) prints every ``[cublasLtMatmul]``
with its operand descriptors (``Adesc=[type=R_8F_E4M3 ...]``) and scale modes (``cublasLtMatmulMatrixScale_t``:
``aScaleMode=OUTER_VEC_32F`` is one fp32 scale per row or column, what rowwise ``torch._scaled_mm`` passes;
``SCALAR_32F``, or scale pointers with no mode, one scale per tensor). hipBLASLt's trace (``HIPBLASLT_LOG_LEVEL=2``)
prints ``[rocblaslt_matmul]`` lines with the same ``Adesc=[type=...]`` descriptors and no scale mode; its bench
lines (log mask 32) print ``--a_type f8_r ... --scaleA N`` with hipBLASLt's bench numbering (1 scalar, 2 vector =
rowwise, 3 block; older builds ``s``/``v``). rocBLAS's trace (``ROCBLAS_LAYER=1``) shows a fallback GEMM.
The profiler's kernel names come second, by family: cuBLASLt's Hopper ``nvjet_sm90_*`` (FP8 ones typed ``qq...``,
``nvjet_sm90_qqtst_...``), CUTLASS (ATen's rowwise ``f8f8bf16``, ``float_e4m3_t``), cuBLAS ``*xmma*gemm*``, Tensile's
``Cijk_*`` (rocBLAS and hipBLASLt alike, so proof of nothing on its own); a name shows FP8 or it does not count as
an FP8 GEMM. Every other kernel (the per-token quantization's elementwise, reduce and copy kernels) is counted only.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

HIPBLASLT_LINE = re.compile(r"hipblasLtMatmul|rocblaslt_matmul|hipblaslt", re.IGNORECASE)
HIPBLASLT_TRACE_CALL = re.compile(r"(\[rocblaslt_matmul\]|hipblasLtMatmul\b).*Adesc=\[type=")
ROCBLAS_GEMM_LINE = re.compile(r"rocblas_\w*gemm", re.IGNORECASE)
CUBLASLT_LINE = re.compile(r"\[cublasLtMatmul\]|\bcublasLtMatmul\(")     # not cublasLtMatmulAlgoGetHeuristic etc.
DESC_TYPES = {"R_8F_E4M3": "E4M3", "R_8F_E5M2": "E5M2", "R_8F_E4M3_FNUZ": "E4M3 (fnuz)",
              "R_8F_E5M2_FNUZ": "E5M2 (fnuz)", "R_16BF": "BF16", "R_16F": "FP16", "R_32F": "FP32"}
BENCH_TYPES = {"f8_r": "E4M3", "f8_fnuz_r": "E4M3 (fnuz)", "bf8_r": "E5M2", "bf8_fnuz_r": "E5M2 (fnuz)",
               "bf16_r": "BF16", "f16_r": "FP16", "f32_r": "FP32"}
CUBLASLT_SCALES = {"OUTER_VEC_32F": "rowwise", "SCALAR_32F": "tensorwise", "PER_BATCH_SCALAR_32F": "tensorwise",
                   "VEC16_UE4M3": "block of 16 (UE4M3)", "VEC32_UE8M0": "block of 32 (UE8M0)",
                   "VEC128_32F": "block of 128", "BLK128x128_32F": "128x128 block"}
BENCH_SCALES = {"1": "tensorwise", "2": "rowwise", "3": "block", "1001": "block", "s": "tensorwise", "v": "rowwise"}
SCALE_WORDS = {"rowwise": "rowwise fp32 scales", "tensorwise": "one fp32 scale per tensor", "none": "no scales",
               None: "scale mode not logged"}
FP8_TYPES = {"E4M3", "E5M2", "E4M3 (fnuz)", "E5M2 (fnuz)"}
GEMM_FAMILIES = (("nvjet", re.compile(r"^(nvjet(?:_sm\d+)?)_")),
                 ("CUTLASS", re.compile(r"cutlass|f8f8bf16", re.I)),
                 ("Cijk (Tensile)", re.compile(r"^(Cijk)_")),
                 ("cuBLAS xmma", re.compile(r"xmma\w*gemm|gemm\w*xmma", re.I)),
                 ("gemm", re.compile(r"gemm", re.I)))
NVJET_FP8 = re.compile(r"^nvjet(?:_sm\d+)?_qq")                     # type code qq...: FP8 A and B (qqtst, qqhsh)
TENSILE_FP8 = re.compile(r"_(?:F8|B8)")                            # Cijk_..._F8F8BS_..., _F8NBS_, _B8F8...
NAMED_FP8 = re.compile(r"e4m3|e5m2|f8f8|fp8|float8", re.I)


@dataclass(frozen=True)
class MatmulCall:
    """One matmul of a BLAS library's log: operand and output types, scale mode."""

    library: str                  # cuBLASLt | hipBLASLt
    a_type: str | None
    b_type: str | None
    out_type: str | None
    scale_mode: str | None        # rowwise | tensorwise | block ... | "none" (no scales) | None (not logged)

    @property
    def fp8(self) -> bool:
        return self.a_type in FP8_TYPES and self.b_type in FP8_TYPES

    @property
    def operands(self) -> str:
        return f"{self.a_type} x {self.b_type}"

    def describe(self) -> str:
        """"E4M3 x E4M3 -> BF16, rowwise fp32 scales"."""
        return f"{self.operands} -> {self.out_type}, {scale_words(self.scale_mode)}"


def scale_words(mode: str | None) -> str:
    return SCALE_WORDS.get(mode) or f"{mode} scales"


def _field(pattern: str, line: str) -> str | None:
    found = re.search(pattern, line)
    return found.group(1) if found else None


def _desc_type(line: str, desc: str) -> str | None:
    raw = _field(desc + r"=\[type=(\w+)", line)
    return DESC_TYPES.get(raw, raw) if raw else None


def _one_mode(a: str | None, b: str | None) -> str:
    modes = sorted({m for m in (a, b) if m})
    return modes[0] if len(modes) == 1 else f"A {a or 'none'} / B {b or 'none'}"


def parse_cublaslt(line: str) -> MatmulCall:
    a_mode, b_mode = _field(r"aScaleMode=(\w+)", line), _field(r"bScaleMode=(\w+)", line)
    if a_mode or b_mode:
        scale = _one_mode(*(CUBLASLT_SCALES.get(m, m) if m else None for m in (a_mode, b_mode)))
    else:
        scale = "tensorwise" if "aScalePointer" in line or "bScalePointer" in line else "none"
    return MatmulCall("cuBLASLt", _desc_type(line, "Adesc"), _desc_type(line, "Bdesc"), _desc_type(line, "Ddesc"),
                      scale)


def parse_hipblaslt(line: str) -> MatmulCall:
    """A hipblaslt-bench line (``--a_type f8_r ... --scaleA 2``) or a level-2 trace line (``Adesc=[type=...]``,
    no scale mode)."""
    if "--a_type" not in line:
        return MatmulCall("hipBLASLt", _desc_type(line, "Adesc"), _desc_type(line, "Bdesc"),
                          _desc_type(line, "Ddesc"), None)

    def typed(flag: str) -> str | None:
        raw = _field(rf"--{flag}\s+(\w+)", line)
        return BENCH_TYPES.get(raw, raw) if raw else None

    a_scale, b_scale = _field(r"--scaleA\s+(\w+)", line), _field(r"--scaleB\s+(\w+)", line)
    scale = _one_mode(*(BENCH_SCALES.get(s, f"bench code {s}") if s else None for s in (a_scale, b_scale))) \
        if a_scale or b_scale else "none"
    return MatmulCall("hipBLASLt", typed("a_type"), typed("b_type"), typed("d_type") or typed("c_type"), scale)


def kernel_family(name: str) -> str | None:
    """The GEMM family of a kernel name, None for any other kernel (quantization, copies, reductions)."""
    for family, pattern in GEMM_FAMILIES:
        found = pattern.search(name)
        if found:
            return found.group(1) if found.groups() else family
    return None


def fp8_by_name(name: str) -> bool:
    """Does this GEMM kernel's name show FP8 operands? nvjet: a ``qq`` type code; Tensile: ``F8``/``B8`` types;
    CUTLASS and cuBLAS: e4m3/e5m2/f8f8 in the template or name."""
    if name.startswith("nvjet"):
        return bool(NVJET_FP8.search(name))
    if name.startswith("Cijk_"):
        return bool(TENSILE_FP8.search(name))
    return bool(NAMED_FP8.search(name))


@dataclass(frozen=True)
class KernelEvidence:
    """What ran, from the logs first and the kernel names second."""

    cublaslt: tuple[MatmulCall, ...] = ()
    hipblaslt_lines: int = 0
    hipblaslt: tuple[MatmulCall, ...] = ()                          # bench lines if logged, else trace lines
    rocblas_gemm_lines: int = 0
    gemm_families: dict[str, int] = field(default_factory=dict)    # family -> launches
    fp8_gemm_families: dict[str, int] = field(default_factory=dict)  # family -> launches whose name shows FP8
    other_kernels: int = 0
    sample: tuple[str, ...] = ()

    @classmethod
    def read(cls, lines: list[str], kernel_counts: dict[str, int]) -> KernelEvidence:
        hip = [ln for ln in lines if HIPBLASLT_LINE.search(ln)]
        rocblas = [ln for ln in lines if ROCBLAS_GEMM_LINE.search(ln)]
        cublaslt = [ln for ln in lines if CUBLASLT_LINE.search(ln)]
        hip_calls = [ln for ln in hip if "--a_type" in ln] or [ln for ln in hip if HIPBLASLT_TRACE_CALL.search(ln)]
        families: Counter[str] = Counter()
        fp8_families: Counter[str] = Counter()
        other = 0
        for name, count in kernel_counts.items():
            family = kernel_family(name)
            if family is None:
                other += count
                continue
            families[family] += count
            if fp8_by_name(name):
                fp8_families[family] += count
        return cls(tuple(map(parse_cublaslt, cublaslt)), len(hip), tuple(map(parse_hipblaslt, hip_calls)),
                   len(rocblas), dict(families), dict(fp8_families), other, tuple((hip or cublaslt or rocblas)[:3]))

    @property
    def library(self) -> str | None:
        """The BLAS library whose log shows matmuls: cuBLASLt, hipBLASLt, or None."""
        if self.cublaslt:
            return "cuBLASLt"
        return "hipBLASLt" if self.hipblaslt_lines else None

    @property
    def calls(self) -> tuple[MatmulCall, ...]:
        return self.cublaslt or self.hipblaslt

    def fp8_calls(self) -> list[MatmulCall]:
        return [c for c in self.calls if c.fp8]

    def form(self) -> MatmulCall | None:
        """The commonest matmul of the log, among its FP8 ones if it has any."""
        calls = self.fp8_calls() or self.calls
        return Counter(calls).most_common(1)[0][0] if calls else None

    def describe_kernels(self) -> str:
        """"GEMM kernels: nvjet_sm90 x7; other kernels: 70" - the line a person reads; names stay in the JSON."""
        gemms = ", ".join(f"{family} x{count}" for family, count in sorted(self.gemm_families.items()))
        return f"GEMM kernels: {gemms or 'none'}; other kernels: {self.other_kernels}"

    def to_dict(self) -> dict:
        """The report's ``log_evidence``: the counts it always had, the library and its commonest FP8 form, every
        parsed form with its count."""
        form = self.form()
        forms = Counter(f"{c.library}: {c.describe()}" for c in self.calls)
        return {"library": self.library, "hipblaslt_matmul_lines": self.hipblaslt_lines,
                "rocblas_gemm_lines": self.rocblas_gemm_lines, "cublaslt_matmul_lines": len(self.cublaslt),
                "matmul_calls": len(self.calls), "fp8_matmul_calls": len(self.fp8_calls()),
                "operand_types": [form.a_type, form.b_type] if form else None,
                "output_type": form.out_type if form else None, "scale_mode": form.scale_mode if form else None,
                "matmul_forms": dict(forms), "gemm_families": self.gemm_families,
                "fp8_gemm_families": self.fp8_gemm_families, "other_kernels": self.other_kernels,
                "sample": list(self.sample)}
