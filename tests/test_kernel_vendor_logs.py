"""The kernel check against what each vendor's libraries print: hipBLASLt, rocBLAS, Tensile, rocRoller and AITER lines
and names built by their own format code (tests/fixtures/rocm/vendor_lines.py cites each source), cuBLASLt lines
as the H200 recorded them (tests/fixtures/h200). Whole logs judged end to end, the same rule for both vendors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from eagle3_quant.validate.blas_log_lines import parse_hipblaslt_bench, parse_hipblaslt_trace
from eagle3_quant.validate.blas_logging import HIPBLASLT_MASK, log_settings
from eagle3_quant.validate.gemm_forms import SCHEME_GEMMS, ExpectedGemm, expected_gemm, scheme_of
from eagle3_quant.validate.kernel_evidence import KernelEvidence
from eagle3_quant.validate.kernel_judgement import judge, judge_mx
from eagle3_quant.validate.kernel_names import decode

FIXTURES = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location("vendor_lines", FIXTURES / "rocm/vendor_lines.py")
V = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(V)
H200 = json.loads((FIXTURES / "h200/kernel_evidence.json").read_text())["kimi-k2.5"]
QUANT_KERNELS = {k: n for k, n in H200["kernel_counts"].items() if not k.startswith("nvjet")}   # torch's, recorded
PTPC, STATIC = SCHEME_GEMMS["ptpc_fp8"], SCHEME_GEMMS["fp8"]
FP8_OCP, FP8_FNUZ, BF16 = "R_8F_E4M3", "R_8F_E4M3_FNUZ", "R_16BF"


def _verdict(lines, kernels, arch, expected=PTPC, settings="HIPBLASLT_LOG_MASK=35, ROCBLAS_LAYER=1"):
    evidence = KernelEvidence.read(lines, {**QUANT_KERNELS, **kernels}, settings)
    return judge(expected.on(arch), evidence, True)


def _cuda(replace=(), drop=()) -> list[str]:
    """The H200's recorded cuBLASLt lines, a field's value replaced or a field dropped (its own spelling)."""
    lines = []
    for line in H200["log_sample"]:
        for old, new in replace:
            line = line.replace(old, new)
        for name in drop:
            line = " ".join(part for part in line.split(" ") if not part.startswith(name + "="))
        lines.append(line)
    return lines


NVJET_FP8 = next(k for k in H200["kernel_counts"] if k.startswith("nvjet"))
NVJET_BF16 = NVJET_FP8.replace("_qqtst_", "_tst_")     # the recorded name without its FP8 type code
CUDA_BF16 = (("Adesc=[type=R_8F_E4M3", "Adesc=[type=R_16BF"), ("Bdesc=[type=R_8F_E4M3", "Bdesc=[type=R_16BF"))
SCALES = ("aScalePointer", "bScalePointer", "aScaleMode", "bScaleMode")

# (case, arch, log lines, kernel counts, status, backend, phrases of the reason); PTPC artifact (rowwise) unless named
WHOLE_LOGS = [
    ("gfx950 rowwise", "gfx950", V.calls(V.hipblaslt_trace(FP8_OCP), V.hipblaslt_bench(2)),
     {V.GFX950_F8_ROWWISE: 7}, "passed", "hipBLASLt", ["hipBLASLt ran 14 matmuls (E4M3 x E4M3 -> BF16, rowwise fp32"]),
    ("gfx942 fnuz rowwise", "gfx942", V.calls(V.hipblaslt_trace(FP8_FNUZ), V.hipblaslt_bench(2)),
     {V.GFX942_F8N_ROWWISE: 7}, "passed", "hipBLASLt", ["(E4M3 fnuz x E4M3 fnuz -> BF16, rowwise fp32 scales)"]),
    ("gfx942 fnuz rowwise, ROCm 6.3 spelling", "gfx942", V.calls(V.hipblaslt_trace(FP8_OCP), V.hipblaslt_bench_rocm63(
        "v")), {V.GFX942_F8_ROWWISE_ROCM63: 7}, "passed", "hipBLASLt",
     ["E4M3 fnuz x E4M3 fnuz -> BF16, rowwise", "E4M3 fnuz as the device's architecture decides"]),
    ("gfx950 BF16 only", "gfx950", V.calls(V.hipblaslt_trace(BF16), V.hipblaslt_bench(0, "bf16_r")),
     {V.GFX950_BF16: 7}, "failed", "hipBLASLt", ["14 of them BF16 x BF16 -> BF16, no scales", "need E4M3 x E4M3"]),
    ("gfx950 tensorwise for rowwise", "gfx950", V.calls(V.hipblaslt_trace(FP8_OCP), V.hipblaslt_bench(1)),
     {V.GFX950_F8_TENSORWISE: 7}, "failed", "hipBLASLt",
     ["with one fp32 scale per tensor; this artifact's linears pass rowwise fp32 scales"]),
    ("gfx950 unscaled FP8", "gfx950", V.calls(V.hipblaslt_trace(FP8_OCP), V.hipblaslt_bench(0)),
     {V.GFX950_F8_UNSCALED: 7}, "failed", "hipBLASLt", ["with no scales; this artifact's linears pass rowwise"]),
    ("gfx942 unscaled FP8, ROCm 6.3", "gfx942", V.calls(V.hipblaslt_trace(FP8_OCP), V.hipblaslt_bench_rocm63(None)),
     {}, "failed", "hipBLASLt", ["with no scales"]),
    ("gfx950 rocBLAS fallback", "gfx950", V.calls(V.rocblas_gemm_ex("bf16_r")), {V.ROCBLAS_BF16: 7}, "failed",
     "rocBLAS", ["rocBLAS ran 14 GEMM call(s) (BF16 x BF16 -> BF16, no scales): a fallback, not hipBLASLt"]),
    ("gfx950 fnuz where OCP is needed", "gfx950", V.calls(V.hipblaslt_trace(FP8_FNUZ), V.hipblaslt_bench(2)),
     {}, "failed", "hipBLASLt", ["14 of them E4M3 fnuz x E4M3 fnuz", "need E4M3 x E4M3"]),
    ("H200 rowwise", "sm_90", H200["log_sample"], {NVJET_FP8: 7}, "passed", "cuBLASLt",
     ["cuBLASLt ran 3 matmuls (E4M3 x E4M3 -> BF16, rowwise fp32 scales)"]),
    ("H200 BF16 only", "sm_90", _cuda(CUDA_BF16, SCALES), {NVJET_BF16: 7}, "failed", "cuBLASLt",
     ["3 of them BF16 x BF16 -> BF16, no scales"]),
    ("H200 tensorwise for rowwise", "sm_90", _cuda([("OUTER_VEC_32F", "SCALAR_32F")]), {NVJET_FP8: 7}, "failed",
     "cuBLASLt", ["with one fp32 scale per tensor; this artifact's linears pass rowwise"]),
    ("H200 unscaled FP8", "sm_90", _cuda(drop=SCALES), {NVJET_FP8: 7}, "failed", "cuBLASLt", ["with no scales"]),
    ("H200 fallback: no cuBLASLt FP8 call, BF16 GEMMs", "sm_90", [], {NVJET_BF16: 7}, "failed", "cuBLASLt",
     ["no matmul line in the BLAS logs", "7 of them non-FP8 x non-FP8"]),
]


@pytest.mark.parametrize(("arch", "lines", "kernels", "status", "backend", "phrases"),
                         [case[1:] for case in WHOLE_LOGS], ids=[case[0] for case in WHOLE_LOGS])
def test_whole_logs_are_judged_alike_for_every_vendor(arch, lines, kernels, status, backend, phrases):
    got_status, reason, got_backend = _verdict(lines, kernels, arch)
    assert (got_status, got_backend) == (status, backend), reason
    assert all(p in reason for p in phrases), reason
    if status == "failed":
        assert "passed" not in reason


def test_a_static_per_tensor_artifact_needs_tensorwise_on_both_vendors():
    assert _verdict(V.calls(V.hipblaslt_trace(FP8_OCP), V.hipblaslt_bench(1)), {}, "gfx950", STATIC)[0] == "passed"
    assert _verdict(V.calls(V.hipblaslt_trace(FP8_OCP), V.hipblaslt_bench(2)), {}, "gfx950", STATIC)[0] == "failed"
    assert _verdict(_cuda([("OUTER_VEC_32F", "SCALAR_32F")]), {}, "sm_90", STATIC)[0] == "passed"
    assert _verdict(_cuda(drop=("aScaleMode", "bScaleMode")), {}, "sm_90", STATIC)[0] == "passed"  # pointers only
    status, reason, _ = _verdict(H200["log_sample"], {}, "sm_90", STATIC)
    assert status == "failed" and "this artifact's linears pass one fp32 scale per tensor" in reason


def test_trace_lines_alone_take_the_scale_mode_from_the_kernel_names_or_say_it_is_not_shown():
    """A log level the user set (HIPBLASLT_LOG_LEVEL=2) writes trace lines and no bench line."""
    trace_only = V.calls(V.hipblaslt_trace(FP8_OCP))
    status, reason, _ = _verdict(trace_only, {V.GFX950_F8_ROWWISE: 7}, "gfx950")
    assert status == "passed" and "rowwise fp32 scales, scale mode from the kernel names" in reason
    status, reason, _ = _verdict(trace_only, {V.GFX950_F8_TENSORWISE: 7}, "gfx950")
    assert status == "failed" and "with one fp32 scale per tensor (the kernel names show it)" in reason
    status, reason, _ = _verdict(trace_only, {}, "gfx950", settings="HIPBLASLT_LOG_LEVEL=2 is set in your environment")
    assert status == "passed" and "rowwise" not in reason
    assert "the scale mode is not shown: the log lines carry none (HIPBLASLT_LOG_LEVEL=2 is set" in reason


def test_tensile_names_alone_prove_no_library_but_rocroller_names_do():
    status, reason, backend = _verdict([], {V.GFX950_F8_ROWWISE: 7}, "gfx950")
    assert (status, backend) == ("failed", None) and "Cijk_ kernels serve rocBLAS and hipBLASLt alike" in reason
    status, reason, backend = _verdict([], {V.RR_FP8_SCALAR: 7}, "gfx950", STATIC)
    assert (status, backend) == ("passed", "hipBLASLt (rocRoller)")
    assert _verdict([], {}, "gfx950")[1].startswith("no matmul line in the BLAS logs (HIPBLASLT_LOG_MASK=35, ")


def test_matmul_calls_are_counted_once_each():
    """Level 5 (api): an Api line and a trace line per call, one Error line; trace + bench: one call each."""
    level5 = V.calls(V.hipblaslt_api(), V.hipblaslt_trace(FP8_OCP)) + [V.hipblaslt_error()]
    evidence = KernelEvidence.read(level5, {})
    assert len(evidence.calls) == 14 and evidence.hipblaslt_other == {"Api": 14, "Error": 1}
    record = evidence.to_dict()
    assert (record["hipblaslt_matmul_lines"], record["matmul_calls"], record["scale_mode"]) == (14, 14, None)
    both = KernelEvidence.read(V.calls(V.hipblaslt_trace(FP8_FNUZ), V.hipblaslt_bench(2)), {})
    assert len(both.calls) == 14 and {c.describe() for c in both.calls} == {
        "E4M3 fnuz x E4M3 fnuz -> BF16, rowwise fp32 scales"}      # the trace's kind, the bench line's scale mode


# hipblaslt_scaling_format (H_FMT) as tensile_host.cpp benchScaleFormat prints it
BENCH_CODES = {0: "none", 1: "tensorwise", 2: "rowwise", 3: "block32_ue8m0", 4: "block16_ue8m0", 5: "block32_ue4m3",
               6: "block16_ue4m3", 7: "block32_ue5m3", 8: "block16_ue5m3", 1001: "block32_ue8m0"}


@pytest.mark.parametrize(("code", "mode"), sorted(BENCH_CODES.items()))
def test_every_bench_scale_code_hipblaslt_defines(code, mode):
    call = parse_hipblaslt_bench(V.hipblaslt_bench(code))
    assert (call.a_type, call.b_type, call.out_type, call.scale_mode) == (
        "E4M3 (OCP or fnuz)", "E4M3 (OCP or fnuz)", "BF16", mode)


def test_older_and_rocroller_bench_spellings():
    assert [parse_hipblaslt_bench(V.hipblaslt_bench_rocm63(s)).scale_mode for s in ("v", "s", None)] == [
        "rowwise", "tensorwise", "none"]
    assert [parse_hipblaslt_bench(V.hipblaslt_bench_rocroller(s)).scale_mode for s in ("1", "2", "3", "")] == [
        "tensorwise", "rowwise", "block32_ue8m0", "none"]
    assert parse_hipblaslt_bench(V.hipblaslt_bench(2, scale_b=1)).scale_mode == "A rowwise / B tensorwise"
    assert parse_hipblaslt_bench(V.hipblaslt_bench(9)).scale_mode == "bench code 9 (not one hipBLASLt defines)"
    assert parse_hipblaslt_bench(V.hipblaslt_bench(3, "f4_r")).operands == "E2M1 x E2M1"
    assert parse_hipblaslt_trace(V.hipblaslt_trace(FP8_FNUZ)).operands == "E4M3 fnuz x E4M3 fnuz"
    assert parse_hipblaslt_trace(V.hipblaslt_trace(FP8_OCP)).scale_mode is None     # the trace has no scale mode


@pytest.mark.parametrize(("name", "shows"), [
    (V.GFX950_F8_ROWWISE, "E4M3 (OCP or fnuz) x E4M3 (OCP or fnuz) -> BF16, rowwise fp32 scales"),
    (V.GFX950_F8_TENSORWISE, "E4M3 (OCP or fnuz) x E4M3 (OCP or fnuz) -> BF16, one fp32 scale per tensor"),
    (V.GFX942_F8N_ROWWISE, "E4M3 fnuz x E4M3 fnuz -> BF16, rowwise fp32 scales"),
    (V.GFX950_F8_UNSCALED, "E4M3 (OCP or fnuz) x E4M3 (OCP or fnuz) -> BF16, no scales"),
    (V.GFX950_BF16, "BF16 x BF16 -> BF16, no scales"),
    (V.GFX942_F8N_X_FP16, "E4M3 fnuz x FP16 -> FP16, one fp32 scale per tensor"),      # F8NH: not FP8 x FP8
    (V.GFX950_XF32, "FP32 x FP32 -> FP32, no scales"),                                 # _MX_: XF32 math
    (V.GFX950_MXFP4, "E2M1 x E2M1 -> FP32, UE8M0 scales per block of 32"),
    (V.GFX950_MXFP4_LEGACY, "E2M1 x E2M1 -> FP32, UE8M0 scales per block of 32"),
    (V.RR_MXFP4, "E2M1 x E2M1 -> BF16, UE8M0 scales per block of 32"),
    (V.RR_FP8_SCALAR, "E4M3 (OCP or fnuz) x E4M3 (OCP or fnuz) -> BF16, one fp32 scale per tensor"),
    (V.AITER_MXFP4, "E2M1 x E2M1 -> BF16, UE8M0 scales per block of 32"),
])
def test_kernel_names_show_their_gemm(name, shows):
    assert decode(name).describe() == shows
    assert decode(name).fp8 == ("E4M3 (OCP or fnuz) x E4M3" in shows or "fnuz x E4M3 fnuz" in shows)


MX = SCHEME_GEMMS["w_mxfp4_a_mxfp4"]
MX_ROWS_OK = ("passed", "AITER gemm_afp4wfp4 ran every MX linear within 0.02 of the dequantized reference")


@pytest.mark.parametrize(("lines", "kernels", "native"), [
    ([], {V.AITER_MXFP4: 3, V.AITER_MXFP4_REDUCE: 3}, True),
    ([], {V.GFX950_MXFP4: 3}, True),
    ([], {V.GFX950_MXFP4_LEGACY: 3}, True),
    ([], {V.RR_MXFP4: 3}, True),
    (V.calls(V.hipblaslt_bench(3, "f4_r"), linears=1), {}, True),
    (V.calls(V.hipblaslt_bench(1001, "f4_r"), linears=1), {}, True),
    (V.calls(V.hipblaslt_bench(5, "f4_r"), linears=1), {}, False),      # FP8 block scales: not MX's E8M0
    ([], {V.GFX950_XF32: 3}, False),                                   # _MX_ is XF32 math, not microscaling
    ([], {V.GFX950_MXFP8: 3}, False),                                  # MX, but FP8 elements
    ([], {V.GFX950_BF16: 3}, False),                                   # an emulation's dequantized BF16 GEMM
    ([], {V.AITER_MXFP4_REDUCE: 3}, False),
])
def test_what_the_mx_check_accepts_as_a_native_mx_gemm(lines, kernels, native):
    status, reason = judge_mx(MX_ROWS_OK, MX, KernelEvidence.read(lines, kernels))
    assert status == ("passed" if native else "failed"), reason
    assert ("E2M1 x E2M1" in reason) and (native or "no native MX GEMM (E2M1 x E2M1 with UE8M0 scales" in reason)
    assert judge_mx(("failed", "differs"), MX, KernelEvidence.read(lines, kernels)) == ("failed", "differs")


def test_log_settings_make_hipblaslt_write_trace_and_bench_lines(tmp_path):
    """rocblaslt-types.h: error 1, trace 2, bench 32; logging.h reads the mask only without a level."""
    assert HIPBLASLT_MASK == 1 | 2 | 32
    ours = log_settings("rocm", tmp_path, {})
    assert ours.env["HIPBLASLT_LOG_MASK"] == "35" and "HIPBLASLT_LOG_LEVEL" not in ours.env
    assert ours.env["HIPBLASLT_LOG_FILE"] == str(tmp_path / "hipblaslt_%i.log") and ours.env["ROCBLAS_LAYER"] == "1"
    assert ours.describe() == "HIPBLASLT_LOG_MASK=35, ROCBLAS_LAYER=1"
    kept = log_settings("rocm", tmp_path, {"HIPBLASLT_LOG_LEVEL": "2", "ROCBLAS_LAYER": "2"})
    assert "HIPBLASLT_LOG_MASK" not in kept.env and kept.env["ROCBLAS_LAYER"] == "3"
    assert "HIPBLASLT_LOG_LEVEL=2 is set in your environment and kept: hipBLASLt then ignores HIPBLASLT_LOG_MASK " \
           "and logs trace lines but no bench line, so no scale mode" in kept.describe()
    assert "errors only, no matmul line" in log_settings("rocm", tmp_path, {"HIPBLASLT_LOG_LEVEL": "1"}).describe()
    assert log_settings("rocm", tmp_path, {"HIPBLASLT_LOG_MASK": "0x40"}).env["HIPBLASLT_LOG_MASK"] == "99"
    cuda = log_settings("cuda", tmp_path, {})
    assert cuda.env["CUBLASLT_LOG_LEVEL"] == "2" and cuda.env["CUBLASLT_LOG_FILE"].endswith("cublaslt_%i.log")
    low = log_settings("cuda", tmp_path, {"CUBLASLT_LOG_LEVEL": "1"})
    assert "CUBLASLT_LOG_LEVEL" not in low.env and "below 2 cuBLASLt logs no matmul" in low.describe()


def _quark(weight: dict, inputs: dict) -> dict:
    """Quark 0.13's exported global config fields the scheme is read from."""
    return {"global_quant_config": {"weight": {"dtype": "fp8_e4m3", **weight},
                                    "input_tensors": {"dtype": "fp8_e4m3", **inputs}}}


def test_the_expected_gemm_comes_from_the_artifacts_scheme():
    ptpc = _quark({"qscheme": "per_channel", "ch_axis": 0, "is_dynamic": False},
                  {"qscheme": "per_channel", "ch_axis": 1, "is_dynamic": True})
    static = _quark({"qscheme": "per_tensor", "is_dynamic": False}, {"qscheme": "per_tensor", "is_dynamic": False})
    assert (scheme_of(ptpc), scheme_of(static), scheme_of({}), scheme_of({"global_quant_config": []})) == (
        "ptpc_fp8", "fp8", None, None)
    assert expected_gemm(ptpc, "tensorwise") == ExpectedGemm("E4M3", "rowwise", scheme="ptpc_fp8")
    assert expected_gemm(static, "rowwise").scale_mode == "tensorwise"
    assert expected_gemm({}, "tensorwise") == ExpectedGemm("E4M3", "tensorwise")   # no row: what the probe passed
    assert [PTPC.on(arch).element for arch in ("gfx950", "gfx942", "sm_90", None)] == [
        "E4M3", "E4M3 fnuz", "E4M3", "E4M3"]
    assert MX.on("gfx942").element == "E2M1"
    mx = {"dtype": "fp4", "qscheme": "per_group", "ch_axis": -1, "group_size": 32}
    mxfp4 = {"global_quant_config": {"weight": {**mx, "is_dynamic": False},
                                     "input_tensors": {**mx, "is_dynamic": True}}}
    assert scheme_of(mxfp4) == "w_mxfp4_a_mxfp4"
    sixteen = json.loads(json.dumps(mxfp4).replace('"group_size": 32', '"group_size": 16'))
    assert scheme_of(sixteen) != "w_mxfp4_a_mxfp4"                 # blocks of 16 are not OCP MX's
