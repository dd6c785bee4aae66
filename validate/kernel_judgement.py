"""One judgement of the GPU kernel path for every vendor.

The quantized linears' GEMMs must be what the artifact's scheme needs on this device (validate/gemm_forms.py:
E4M3 x E4M3, fnuz on gfx942, with rowwise scales for PTPC, one scale per tensor for static FP8). In order:
1. a rocBLAS GEMM traced during the linears is a fallback: failed, naming what ran;
2. the BLAS library's matmul lines (cuBLASLt, hipBLASLt): every call must have the operand types, and the scale
   mode where the line shows one (a hipBLASLt trace line does not; its bench line and the kernel names do); a BF16
   or unscaled GEMM, or another scale mode, fails naming what ran;
3. without such lines, the kernel names, the same way, where a name proves its library (``nvjet_*`` cuBLASLt,
   ``RR_GEMM_*`` hipBLASLt; Tensile's ``Cijk_*`` serve rocBLAS too, so they prove nothing alone).
Where neither the lines nor the names show the scale mode, the reason says so and names no mode.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from eagle3_quant.validate.gemm_forms import AMBIGUOUS, ExpectedGemm, GemmForm, scale_words
from eagle3_quant.validate.kernel_evidence import KernelEvidence
from eagle3_quant.validate.kernel_names import FAMILY_LIBRARY

Verdict = tuple[str, str, str | None]          # status, reason, backend


def _commonest(forms) -> GemmForm:
    return Counter(forms).most_common(1)[0][0]


def _resolved(form: GemmForm, expected: ExpectedGemm) -> tuple[GemmForm, str]:
    """The form with an ambiguous FP8 kind named as the device needs it, and a note saying so."""
    if AMBIGUOUS not in f"{form.a_type}{form.b_type}":
        return form, ""
    source = {"trace": "trace line", "bench": "bench line"}.get(form.source, form.source)
    note = f"; {expected.element} as the device's architecture decides: this {source} prints OCP and fnuz alike"
    return replace(form, a_type=expected.element, b_type=expected.element), note


def _no_scale_shown(evidence: KernelEvidence) -> str:
    if not evidence.calls:
        return "no kernel name shows one"
    return f"the log lines carry none ({evidence.log_settings or 'no logging'}) and no kernel name shows one"


def _judge_forms(library: str, forms: list[GemmForm], expected: ExpectedGemm, evidence: KernelEvidence,
                 what: str) -> Verdict:
    kernels = evidence.describe_kernels()
    wrong = [f for f in forms if not expected.accepts(f)]
    if wrong:
        return "failed", f"{what}, {len(wrong)} of them {_commonest(wrong).describe()}; this artifact's linears need " \
                         f"{expected.describe()}; {kernels}", library
    modes, source = {f.scale_mode for f in forms}, ""
    if modes == {None}:
        named = {f.scale_mode for f, _ in evidence.named if expected.accepts(f) and f.scale_mode}
        modes, source = (named, ", scale mode from the kernel names") if named else (modes, "")
    if modes != {None} and modes != {expected.scale_mode}:
        shown = " and ".join(sorted(scale_words(m) for m in modes))
        by = " (the kernel names show it)" if source else ""
        return "failed", f"{what} with {shown}{by}; this artifact's linears pass {scale_words(expected.scale_mode)}" \
                         f"; {kernels}", library
    form, kind = _resolved(_commonest(forms), expected)
    if modes == {None}:
        out = f" -> {form.out_type}" if form.out_type else ""
        return "passed", f"{what} ({form.operands}{out}{kind}); the scale mode is not shown: " \
                         f"{_no_scale_shown(evidence)}; {kernels}", library
    return "passed", f"{what} ({replace(form, scale_mode=modes.pop()).describe()}{source}{kind}); {kernels}", library


def judge(expected: ExpectedGemm, evidence: KernelEvidence, numerics_ok: bool) -> Verdict:
    """(status, reason, backend) of the GPU kernel path; `expected` already resolved for the device."""
    if not numerics_ok:
        return "failed", "the GEMM's results differ from the dequantized reference (kernel_numerics)", None
    kernels = evidence.describe_kernels()
    if evidence.rocblas:
        ran = f"rocBLAS ran {len(evidence.rocblas)} GEMM call(s) ({_commonest(evidence.rocblas).describe()})"
        return "failed", f"{ran}: a fallback, not hipBLASLt; this artifact's linears need {expected.describe()}; " \
                         f"{kernels}", "rocBLAS"
    if evidence.calls:
        return _judge_forms(evidence.library, list(evidence.calls), expected, evidence,
                            f"{evidence.library} ran {len(evidence.calls)} matmuls")
    no_line = f"no matmul line in the BLAS logs ({evidence.log_settings or 'no logging'})"
    if not evidence.gemm_families:
        return "failed", f"{no_line} and the profiler saw no GEMM kernel; {kernels}", None
    proving = [(f, n) for f, n in evidence.named if f.library in FAMILY_LIBRARY.values()]
    if not proving:
        return "failed", f"{no_line}; the profiler's GEMM kernels do not show which library ran them (Tensile's " \
                         f"Cijk_ kernels serve rocBLAS and hipBLASLt alike); {kernels}", None
    library = " and ".join(sorted({f.library for f, _ in proving}))
    forms = [f for f, n in proving for _ in range(n)]
    return _judge_forms(library, forms, expected, evidence,
                        f"{no_line}; the kernel names show {library} ran {len(forms)} GEMM launches")


def judge_mx(numerics: tuple[str, str], expected: ExpectedGemm, evidence: KernelEvidence) -> tuple[str, str]:
    """(status, reason) of the native MX GEMM: its numerics rows' verdict, and a GEMM of the scheme's MX form among
    the log's calls or the kernel names (the numerics alone cannot tell a native GEMM from an emulation)."""
    status, reason = numerics
    if status != "passed":
        return status, reason
    native = [f for f in (*evidence.calls, *(f for f, _ in evidence.named))
              if expected.accepts(f) and f.scale_mode == expected.scale_mode]
    if not native:
        return "failed", f"{reason}, but no native MX GEMM ({expected.describe()}) ran: " \
                         f"{evidence.describe_kernels()}"
    return "passed", f"{reason}; {native[0].library}'s {native[0].source} shows {native[0].describe()}"
