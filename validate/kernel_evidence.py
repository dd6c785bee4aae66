"""What ran for the quantized linears: the BLAS libraries' log lines first (validate/blas_log_lines.py), the
profiler's kernel names second (validate/kernel_names.py).

Matmul calls are counted once each: a cuBLASLt ``[cublasLtMatmul]`` line; for hipBLASLt its bench lines when it
wrote them (one per call, with the scale mode), each merged with the trace line of the same call (the operand
kind, fnuz spelled out since ROCm 6.4), else its ``[Trace][rocblaslt_matmul]`` lines. Its other lines (Api, Error,
..) are counted apart. rocBLAS GEMM trace lines are a fallback. Every other kernel (the per-token quantization's
elementwise, reduce and copy kernels) is counted only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from eagle3_quant.validate.blas_log_lines import (
    CUBLASLT_CALL,
    HIPBLASLT_BENCH,
    ROCBLAS_GEMM,
    hipblaslt_layer,
    parse_cublaslt,
    parse_hipblaslt_bench,
    parse_hipblaslt_trace,
    parse_rocblas,
)
from eagle3_quant.validate.gemm_forms import AMBIGUOUS, GemmForm, scale_words
from eagle3_quant.validate.kernel_names import decode, kernel_family


def _precise(bench: str | None, trace: str | None) -> str | None:
    return trace if trace and AMBIGUOUS not in trace and (bench or "").split()[:1] == trace.split()[:1] else bench


def _hipblaslt_calls(traces: list[GemmForm], benches: list[GemmForm]) -> tuple[GemmForm, ...]:
    if not benches:
        return tuple(traces)
    if len(traces) != len(benches):
        return tuple(benches)
    return tuple(replace(b, a_type=_precise(b.a_type, t.a_type), b_type=_precise(b.b_type, t.b_type))
                 for t, b in zip(traces, benches, strict=True))


@dataclass(frozen=True)
class KernelEvidence:
    """What ran, from the logs first and the kernel names second."""

    cublaslt: tuple[GemmForm, ...] = ()
    hipblaslt: tuple[GemmForm, ...] = ()                           # one per matmul call
    hipblaslt_other: dict[str, int] = field(default_factory=dict)  # its other lines by layer: Api, Error ..
    rocblas: tuple[GemmForm, ...] = ()                             # rocBLAS GEMM calls: a fallback
    gemm_families: dict[str, int] = field(default_factory=dict)    # family -> launches
    fp8_gemm_families: dict[str, int] = field(default_factory=dict)  # family -> launches whose name shows FP8
    named: tuple[tuple[GemmForm, int], ...] = ()                   # what GEMM kernel names show, with launches
    other_kernels: int = 0
    sample: tuple[str, ...] = ()
    log_settings: str = ""                                         # the logging the child ran with

    @classmethod
    def read(cls, lines: list[str], kernel_counts: dict[str, int], log_settings: str = "") -> KernelEvidence:
        cublaslt = [ln for ln in lines if CUBLASLT_CALL.search(ln)]
        layers = [(ln, hipblaslt_layer(ln)) for ln in lines]
        is_call = [lay == ("Trace", "rocblaslt_matmul") and "Adesc=[type=" in ln for ln, lay in layers]
        traces = [ln for (ln, _), call in zip(layers, is_call, strict=True) if call]
        benches = [ln for ln in lines if HIPBLASLT_BENCH.search(ln)]
        other = Counter(lay[0] for (_, lay), call in zip(layers, is_call, strict=True) if lay and not call)
        rocblas = [ln for ln in lines if ROCBLAS_GEMM.search(ln)]
        families: Counter[str] = Counter()
        fp8_families: Counter[str] = Counter()
        named: Counter[GemmForm] = Counter()
        others = 0
        for name, count in kernel_counts.items():
            family = kernel_family(name)
            if family is None:
                others += count
                continue
            families[family] += count
            form = decode(name)
            if form is not None:
                named[form] += count
                if form.fp8:
                    fp8_families[family] += count
        calls = _hipblaslt_calls(list(map(parse_hipblaslt_trace, traces)), list(map(parse_hipblaslt_bench, benches)))
        return cls(tuple(map(parse_cublaslt, cublaslt)), calls, dict(other), tuple(map(parse_rocblas, rocblas)),
                   dict(families), dict(fp8_families), tuple(named.most_common()), others,
                   tuple((benches or traces or cublaslt or rocblas)[:3]), log_settings)

    @property
    def library(self) -> str | None:
        """The BLAS library whose log shows matmuls: cuBLASLt, hipBLASLt, or None."""
        return "cuBLASLt" if self.cublaslt else "hipBLASLt" if self.hipblaslt else None

    @property
    def calls(self) -> tuple[GemmForm, ...]:
        return self.cublaslt or self.hipblaslt

    def fp8_calls(self) -> list[GemmForm]:
        return [c for c in self.calls if c.fp8]

    def form(self) -> GemmForm | None:
        """The commonest matmul of the log, among its FP8 ones if it has any."""
        calls = self.fp8_calls() or self.calls
        return Counter(calls).most_common(1)[0][0] if calls else None

    def describe_kernels(self) -> str:
        """"GEMM kernels: nvjet_sm90 x7; other kernels: 70" - the line a person reads; names stay in the JSON."""
        gemms = ", ".join(f"{family} x{count}" for family, count in sorted(self.gemm_families.items()))
        return f"GEMM kernels: {gemms or 'none'}; other kernels: {self.other_kernels}"

    def to_dict(self) -> dict:
        """The report's ``log_evidence``: counts, the library and its commonest FP8 form, every parsed form with its
        count, what the kernel names show, the logging in effect."""
        form = self.form()
        forms = Counter(f"{c.library}: {c.describe()}" for c in self.calls)
        return {"library": self.library, "hipblaslt_matmul_lines": len(self.hipblaslt),
                "hipblaslt_other_lines": self.hipblaslt_other, "rocblas_gemm_lines": len(self.rocblas),
                "cublaslt_matmul_lines": len(self.cublaslt), "matmul_calls": len(self.calls),
                "fp8_matmul_calls": len(self.fp8_calls()),
                "operand_types": [form.a_type, form.b_type] if form else None,
                "output_type": form.out_type if form else None, "scale_mode": form.scale_mode if form else None,
                "scale_words": scale_words(form.scale_mode) if form else None, "matmul_forms": dict(forms),
                "rocblas_forms": dict(Counter(c.describe() for c in self.rocblas)),
                "named_gemms": {f"{f.library}: {f.describe()}": n for f, n in self.named},
                "gemm_families": self.gemm_families, "fp8_gemm_families": self.fp8_gemm_families,
                "other_kernels": self.other_kernels, "sample": list(self.sample), "log_settings": self.log_settings}
