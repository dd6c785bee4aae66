"""The BLAS libraries' log lines for one GEMM, read as GemmForm. Each reader follows the library's own format code;
tests/fixtures/rocm/make_fixtures.py builds test lines from the same code and cites it.

- cuBLASLt trace (``CUBLASLT_LOG_LEVEL`` >= 2): ``[date][cublasLt][pid][Trace][cublasLtMatmul] A=.. Adesc=[type=
  R_8F_E4M3 ..] .. computeDesc=[.. aScalePointer=.. bScalePointer=.. aScaleMode=OUTER_VEC_32F ..]``: types and the
  scale mode (scale pointers with no mode: one scale per tensor; no pointers: no scales).
- hipBLASLt trace (log mask bit 2; ``utility.cpp`` ``prefix``, ``rocblaslt_mat.cpp`` ``rocblaslt_matmul``):
  ``[date][HIPBLASLT][pid][Trace][rocblaslt_matmul] A=.. Adesc=[type=..] .. computeDesc=[computeType=..
  scaleType=..]``: operand types only (``scaleType`` is alpha/beta's type), fnuz as ``R_8F_E4M3`` before ROCm 6.4.
- hipBLASLt bench (log mask bit 32; ``tensile_host.cpp`` ``logBenchFromTensileDataGemm``, the rocRoller path's
  ``logBench``): ``hipblaslt-bench .. --scaleA C --scaleB C .. --a_type f8_r ..``; codes below, both E4M3 kinds
  printed ``f8_r``.
- rocBLAS trace (``ROCBLAS_LAYER`` bit 1; ``rocblas_gemm_ex_imp.hpp``): ``rocblas_gemm_ex,T,N,m,n,k,alpha,A,bf16_r,
  ..``, comma separated, the types in A, B, C, D, compute order.
"""

from __future__ import annotations

import re

from eagle3_quant.validate.gemm_forms import AMBIGUOUS, GemmForm, one_mode

CUBLASLT_CALL = re.compile(r"\[cublasLtMatmul\]|\bcublasLtMatmul\(")     # not cublasLtMatmulAlgoGetHeuristic etc.
HIPBLASLT_LINE = re.compile(r"\[HIPBLASLT\]\[\d+\]\[(\w+)\]\[(\w+)\]")  # layer (Trace, Api, Error ..), caller
HIPBLASLT_BENCH = re.compile(r"^hipblaslt-bench .*--a_type ")
ROCBLAS_GEMM = re.compile(r"^(rocblas_\w*gemm\w*),")

# cudaDataType_t (library_types.h) without its CUDA_ prefix, as the recorded trace prints CUDA_R_8F_E4M3
CUBLASLT_TYPES = {"R_8F_E4M3": "E4M3", "R_8F_E5M2": "E5M2", "R_16BF": "BF16", "R_16F": "FP16", "R_32F": "FP32",
                  "R_8I": "I8", "R_32I": "I32", "R_4F_E2M1": "E2M1", "R_6F_E2M3": "E2M3", "R_6F_E3M2": "E3M2"}
# utility.cpp hipDataType_to_string; before ROCm 6.4 both E4M3 kinds print R_8F_E4M3; it has no case for HIP_R_32I
# (an INT8 GEMM's output prints "Invalid", read from the bench line's i32_r instead)
HIPBLASLT_TYPES = {"R_8F_E4M3": "E4M3" + AMBIGUOUS, "R_8F_E4M3_FNUZ": "E4M3 fnuz", "R_8F_E5M2": "E5M2" + AMBIGUOUS,
                   "R_8F_E5M2_FNUZ": "E5M2 fnuz", "R_16BF": "BF16", "R_16F": "FP16", "R_32F": "FP32",
                   "R_64F": "FP64", "R_8I": "I8", "R_32I": "I32", "R_4F_E2M1": "E2M1", "R_6F_E2M3": "E2M3",
                   "R_6F_E3M2": "E3M2", "Invalid": None}
# utility.cpp hipDataType_to_bench_string (fnuz and OCP alike); rocBLAS's rocblas_datatype_string for its trace
BENCH_TYPES = {"f8_r": "E4M3" + AMBIGUOUS, "bf8_r": "E5M2" + AMBIGUOUS, "bf16_r": "BF16", "f16_r": "FP16",
               "f32_r": "FP32", "f64_r": "FP64", "i8_r": "I8", "i32_r": "I32", "f4_r": "E2M1", "f6_r": "E2M3",
               "bf6_r": "E3M2"}
ROCBLAS_NAMED = {"h": "FP16", "s": "FP32", "d": "FP64"}     # rocblas_hgemm, rocblas_sgemm, rocblas_dgemm
CUBLASLT_SCALES = {"OUTER_VEC_32F": "rowwise", "SCALAR_32F": "tensorwise", "PER_BATCH_SCALAR_32F": "tensorwise",
                   "VEC16_UE4M3": "block16_ue4m3", "VEC32_UE8M0": "block32_ue8m0", "VEC128_32F": "block128_f32",
                   "BLK128x128_32F": "block128x128_f32"}
# --scaleA/--scaleB: hipblaslt_scaling_format (clients/common/include/hipblaslt_scaling_format.hpp), what
# tensile_host.cpp benchScaleFormat prints; ROCm 6.3 printed s/v and left the flag out without scales; the rocRoller
# path prints 1/2/3 and an empty value without scales
BENCH_SCALES = {"0": "none", "1": "tensorwise", "2": "rowwise", "3": "block32_ue8m0", "4": "block16_ue8m0",
                "5": "block32_ue4m3", "6": "block16_ue4m3", "7": "block32_ue5m3", "8": "block16_ue5m3",
                "1001": "block32_ue8m0", "s": "tensorwise", "v": "rowwise"}


def _field(pattern: str, line: str) -> str | None:
    found = re.search(pattern, line)
    return found.group(1) if found else None


def _desc_types(line: str, table: dict[str, str]) -> tuple[str | None, ...]:
    raw = (_field(desc + r"=\[type=(\w+)", line) for desc in ("Adesc", "Bdesc", "Ddesc"))
    return tuple(table.get(r, r) if r else None for r in raw)


def parse_cublaslt(line: str) -> GemmForm:
    a_mode, b_mode = _field(r"aScaleMode=(\w+)", line), _field(r"bScaleMode=(\w+)", line)
    if a_mode or b_mode:
        scale = one_mode(*(CUBLASLT_SCALES.get(m, m) if m else None for m in (a_mode, b_mode)))
    else:
        scale = "tensorwise" if "aScalePointer" in line or "bScalePointer" in line else "none"
    return GemmForm("cuBLASLt", *_desc_types(line, CUBLASLT_TYPES), scale)


def parse_hipblaslt_trace(line: str) -> GemmForm:
    return GemmForm("hipBLASLt", *_desc_types(line, HIPBLASLT_TYPES), None)


def _bench_scale(tokens: list[str], flag: str) -> str | None:
    if flag not in tokens:
        return "none"
    value = tokens[tokens.index(flag) + 1] if tokens.index(flag) + 1 < len(tokens) else "--"
    if value.startswith("--"):
        return "none"
    return BENCH_SCALES.get(value, f"bench code {value} (not one hipBLASLt defines)")


def parse_hipblaslt_bench(line: str) -> GemmForm:
    tokens = line.split()

    def typed(flag: str) -> str | None:
        i = tokens.index(flag) + 1 if flag in tokens else len(tokens)
        return BENCH_TYPES.get(tokens[i], tokens[i]) if i < len(tokens) and not tokens[i].startswith("--") else None

    scale = one_mode(_bench_scale(tokens, "--scaleA"), _bench_scale(tokens, "--scaleB"))
    return GemmForm("hipBLASLt", typed("--a_type"), typed("--b_type"), typed("--d_type") or typed("--c_type"),
                    scale, "bench")


def parse_rocblas(line: str) -> GemmForm:
    """A rocBLAS GEMM trace line: gemm_ex's typed fields (A, B, C, D, compute), or the type of rocblas_[hsd]gemm."""
    fields = line.strip().split(",")
    types = [BENCH_TYPES[f] for f in fields if f in BENCH_TYPES]
    if len(types) >= 4:
        return GemmForm("rocBLAS", types[0], types[1], types[3], "none")
    named = ROCBLAS_NAMED.get(fields[0].removeprefix("rocblas_")[:1]) if fields[0][-4:] == "gemm" else None
    return GemmForm("rocBLAS", named, named, named, "none")


def hipblaslt_layer(line: str) -> tuple[str, str] | None:
    """(layer, caller) of a hipBLASLt log line: ("Trace", "rocblaslt_matmul"), ("Api", ...), ("Error", ...)."""
    found = HIPBLASLT_LINE.search(line)
    return (found.group(1), found.group(2)) if found else None
