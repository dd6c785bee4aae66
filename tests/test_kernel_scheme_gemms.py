"""The GEMM every scheme should run on each device (validate/gemm_forms.py, validate/gemm_devices.py), read from the
scheme registry, and whole logs of the new schemes' GEMMs judged end to end on both vendors: hipBLASLt, rocBLAS and
Tensile lines and names built by their own format code (tests/fixtures/rocm/vendor_lines.py cites each source),
cuBLASLt lines from the H200's recorded trace with the fields PyTorch sets for the GEMM (CUDABlas.cpp int8_gemm,
scaled_gemm's block scale modes) in cudaDataType_t's and cublasLtMatmulMatrixScale_t's names (library_types.h,
cublasLt.h), spelled as that recorded line spells CUDA_R_8F_E4M3 and OUTER_VEC_32F."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from eagle3_quant.schemes import SCHEMES
from eagle3_quant.validate.blas_log_lines import parse_cublaslt, parse_hipblaslt_bench
from eagle3_quant.validate.gemm_devices import BLOCK_MM, DEVICES, GEMM_TABLE, INT_MM, NATIVE_MXFP4, VENDORS
from eagle3_quant.validate.gemm_forms import SCHEME_GEMMS, ExpectedGemm, scheme_of
from eagle3_quant.validate.kernel_evidence import KernelEvidence
from eagle3_quant.validate.kernel_judgement import judge

FIXTURES = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location("vendor_lines", FIXTURES / "rocm/vendor_lines.py")
V = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(V)
H200_LINE = json.loads((FIXTURES / "h200/kernel_evidence.json").read_text())["kimi-k2.5"]["log_sample"][0]


def cublaslt(ab: str = "R_8F_E4M3", d: str = "R_16BF", mode: str | None = "OUTER_VEC_32F", compute: str = "COMPUTE_32F",
             scale_type: str = "R_32F") -> str:
    """The recorded cublasLtMatmul trace line with A/B/C/D types, compute and scale types and scale modes replaced;
    mode None: no scale pointers and no mode (torch._int_mm's GEMM sets none)."""
    line = H200_LINE.replace("Adesc=[type=R_8F_E4M3", f"Adesc=[type={ab}").replace("Bdesc=[type=R_8F_E4M3",
                                                                                   f"Bdesc=[type={ab}")
    line = line.replace("type=R_16BF", f"type={d}").replace("computeType=COMPUTE_32F", f"computeType={compute}")
    line = line.replace("scaleType=R_32F", f"scaleType={scale_type}")
    if mode is None:
        return re.sub(r" [ab]Scale(?:Pointer|Mode)=[^ \]]+", "", line)
    return line.replace("OUTER_VEC_32F", mode)


def _quark(weight, inputs) -> dict:
    return {"quant_method": "quark", "global_quant_config": {"weight": weight, "input_tensors": inputs}}


INT8_W = {"dtype": "int8", "qscheme": "per_channel", "ch_axis": 0, "symmetric": True, "is_dynamic": False}
INT8_A = {**INT8_W, "ch_axis": 1, "is_dynamic": True}
UINT4_W = {"dtype": "uint4", "qscheme": "per_group", "group_size": 64, "symmetric": False, "is_dynamic": False}
FP4_16 = {"dtype": "fp4", "qscheme": "per_group", "ch_axis": -1, "group_size": 16}
FP8_T = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False}
MXFP8 = {"dtype": "fp8_e4m3", "qscheme": "per_group", "ch_axis": -1, "group_size": 32, "scale_format": "e8m0"}
CONFIGS = {     # Quark 0.13's exported global configs, as vLLM 0.33's QuarkConfig reads them (test_int_fp4_schemes.py)
    "w8a8_int8": _quark(INT8_W, INT8_A),
    "w4a16_int4": _quark(UINT4_W, None),
    "nvfp4": _quark([{**FP4_16, "is_dynamic": False}, FP8_T], [{**FP4_16, "is_dynamic": True}, FP8_T]),
    "w_mxfp8_a_mxfp8": _quark({**MXFP8, "is_dynamic": False}, {**MXFP8, "is_dynamic": True}),
}


def test_every_schemes_gemm_comes_from_the_registry():
    assert SCHEME_GEMMS.keys() == SCHEMES.keys()
    rows = {name: (g.element, g.activation, g.scale_mode, g.out_type) for name, g in SCHEME_GEMMS.items()}
    assert rows == {
        "ptpc_fp8": ("E4M3", "E4M3", "rowwise", "BF16"), "fp8": ("E4M3", "E4M3", "tensorwise", "BF16"),
        "w_mxfp4_a_mxfp4": ("E2M1", "E2M1", "block32_ue8m0", "BF16"),
        "w_mxfp4_a_fp8": ("E2M1", "E4M3", "A block32_ue8m0 / B tensorwise", "BF16"),
        "w_mxfp6_e2m3_a_mxfp6_e2m3": ("E2M3", "E2M3", "block32_ue8m0", "BF16"),
        "w_mxfp6_e3m2_a_mxfp6_e3m2": ("E3M2", "E3M2", "block32_ue8m0", "BF16"),
        "w8a8_int8": ("I8", "I8", "none", "I32"),                 # the INT8 GEMM takes no scales: its output does
        "w4a16_int4": ("U4", "BF16", "block128_zp", "BF16"),
        "nvfp4": ("E2M1", "E2M1", "block16_ue4m3", "BF16"),
        "w_mxfp8_a_mxfp8": ("E4M3", "E4M3", "block32_ue8m0", "BF16")}
    assert SCHEME_GEMMS["w4a16_int4"].describe() == "U4 x BF16 with scales and zero points per group of 128"
    assert SCHEME_GEMMS["nvfp4"].describe() == "E2M1 x E2M1 with UE4M3 scales per block of 16"
    assert {name: scheme_of(config) for name, config in CONFIGS.items()} == {name: name for name in CONFIGS}
    assert SCHEME_GEMMS["w_mxfp8_a_mxfp8"].on("gfx942").element == "E4M3 fnuz"
    assert SCHEME_GEMMS["w8a8_int8"].on("gfx942") == SCHEME_GEMMS["w8a8_int8"]


@pytest.mark.parametrize("key", sorted(GEMM_TABLE), ids=lambda k: f"{k[0]}@{k[1]}")
def test_each_device_row_reads_the_registry_and_never_passes_what_it_cannot_run(key):
    row = GEMM_TABLE[key]
    scheme, (vendor, profiles) = SCHEMES[row.scheme], DEVICES[row.device]
    assert row.native == bool(set(profiles) & set(scheme.native_devices))
    assert row.vllm_runs == dict(scheme.gemm)[VENDORS[vendor]]
    assert (row.probe is None) == bool(row.reason)
    if row.probe is None:
        assert "natively on" in row.reason or "cannot judge" in row.reason
    else:
        assert row.native                        # a probe only where vLLM's tables say the device runs it natively


def test_what_each_new_scheme_runs_where():
    probes = {key: row.probe for key, row in GEMM_TABLE.items()}
    assert {d: probes["w8a8_int8", d] for d in DEVICES} == dict.fromkeys(DEVICES, INT_MM)
    assert {d for d in DEVICES if probes["w_mxfp8_a_mxfp8", d]} == {"gfx950", "sm_100"}
    assert {d for d in DEVICES if probes["nvfp4", d]} == {"sm_100"}
    assert probes["w_mxfp4_a_mxfp4", "gfx950"] == NATIVE_MXFP4 and probes["w_mxfp4_a_mxfp4", "sm_100"] == BLOCK_MM
    assert not any(probes[name, d] for name in ("w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp6_e3m2_a_mxfp6_e3m2")
                   for d in DEVICES)
    for device in DEVICES:                       # W4A16: vLLM's own kernels everywhere, no BLAS GEMM to read
        row = GEMM_TABLE["w4a16_int4", device]
        assert row.native and row.probe is None and "cannot judge this path" in row.reason
    assert "Machete" in GEMM_TABLE["w4a16_int4", "sm_90"].reason          # machete.py: capability 9.0 only
    assert "Machete" not in GEMM_TABLE["w4a16_int4", "sm_100"].reason
    assert "triton_w4a16_gemm_kernel" in GEMM_TABLE["w4a16_int4", "gfx950"].reason
    assert "EmulationNvFp4LinearKernel" in GEMM_TABLE["nvfp4", "gfx950"].reason


@pytest.mark.parametrize("key", [k for k, row in GEMM_TABLE.items() if row.probe in (INT_MM, BLOCK_MM)],
                         ids=lambda k: f"{k[0]}@{k[1]}")
def test_a_rows_evidence_is_what_the_parsers_accept(key):
    """The row's spelling of its GEMM, written into the library's own line, reads back as the expected GEMM."""
    row = GEMM_TABLE[key]
    fields = dict(part.split("=") for part in row.evidence.replace(",", "").split() if "=" in part)
    if DEVICES[row.device][0] == "cuda":
        form = parse_cublaslt(cublaslt(fields["type"], mode=fields.get("aScaleMode")))
    else:
        words = row.evidence.split()
        code, bench_type = words[words.index("--scaleA") + 1].rstrip(";"), words[words.index("--a_type") + 1]
        form = parse_hipblaslt_bench(V.hipblaslt_bench(int(code), bench_type))
    assert row.expected.accepts(form) and form.scale_mode == row.expected.scale_mode, (row.evidence, form)


INT8, MXFP8, NVFP4, MXFP4 = ("w8a8_int8", "w_mxfp8_a_mxfp8", "nvfp4", "w_mxfp4_a_mxfp4")
BF16_ROCM = V.calls(V.hipblaslt_trace("R_16BF"), V.hipblaslt_bench(0, "bf16_r"))
BF16_CUDA = [cublaslt("R_16BF", mode=None)] * 7
# (case, scheme, device, log lines, kernel counts, status, phrases of the reason)
WHOLE_LOGS = [
    ("INT8 gfx950", INT8, "gfx950", V.int8_calls(), {V.GFX950_I8II: 7}, "passed",
     ["hipBLASLt ran 14 matmuls (I8 x I8 -> I32, no scales)"]),
    ("INT8 gfx942", INT8, "gfx942", V.int8_calls(), {}, "passed", ["(I8 x I8 -> I32, no scales)"]),
    ("INT8 gfx950, trace lines only: types from them, no scales from the Tensile name", INT8, "gfx950",
     V.calls(V.hipblaslt_trace("R_8I", d_type="Invalid", compute="COMPUTE_32I", scale_type="Invalid")),
     {V.GFX950_I8II: 7}, "passed", ["(I8 x I8, no scales, scale mode from the kernel names)"]),
    ("INT8 gfx950, BF16 fallback", INT8, "gfx950", BF16_ROCM, {V.GFX950_BF16: 7}, "failed",
     ["14 of them BF16 x BF16 -> BF16, no scales", "need I8 x I8 with no scales"]),
    ("INT8 gfx942, rocBLAS fallback", INT8, "gfx942", V.calls(V.rocblas_gemm_ex("bf16_r")), {}, "failed",
     ["rocBLAS ran 14 GEMM call(s)"]),
    ("INT8 sm_90", INT8, "sm_90", [cublaslt("R_8I", "R_32I", None, "COMPUTE_32I", "R_32I")] * 7, {}, "passed",
     ["cuBLASLt ran 7 matmuls (I8 x I8 -> I32, no scales)"]),
    ("INT8 sm_100, BF16 fallback", INT8, "sm_100", BF16_CUDA, {}, "failed", ["7 of them BF16 x BF16"]),
    ("INT8 sm_90, an FP8 GEMM instead", INT8, "sm_90", [H200_LINE] * 7, {}, "failed", ["E4M3 x E4M3 -> BF16"]),
    ("MXFP8 gfx950", MXFP8, "gfx950", V.calls(V.hipblaslt_trace("R_8F_E4M3"), V.hipblaslt_bench(3)),
     {V.GFX950_F8SS_MX: 7}, "passed", ["(E4M3 x E4M3 -> BF16, UE8M0 scales per block of 32"]),
    ("MXFP8 gfx950, trace only: scales from the Tensile name", MXFP8, "gfx950",
     V.calls(V.hipblaslt_trace("R_8F_E4M3")), {V.GFX950_F8SS_MX: 7}, "passed",
     ["UE8M0 scales per block of 32, scale mode from the kernel names"]),
    ("MXFP8 gfx950, FP8 block scales instead of E8M0", MXFP8, "gfx950",
     V.calls(V.hipblaslt_trace("R_8F_E4M3"), V.hipblaslt_bench(5)), {}, "failed",
     ["with UE4M3 scales per block of 32; this artifact's linears pass UE8M0 scales per block of 32"]),
    ("MXFP8 gfx950, rowwise FP8 instead", MXFP8, "gfx950",
     V.calls(V.hipblaslt_trace("R_8F_E4M3"), V.hipblaslt_bench(2)), {V.GFX950_F8_ROWWISE: 7}, "failed",
     ["with rowwise fp32 scales"]),
    ("MXFP8 gfx950, BF16 emulation", MXFP8, "gfx950", BF16_ROCM, {V.GFX950_BF16: 7}, "failed",
     ["BF16 x BF16 -> BF16, no scales"]),
    ("MXFP8 sm_100", MXFP8, "sm_100", [cublaslt(mode="VEC32_UE8M0")] * 7, {}, "passed",
     ["cuBLASLt ran 7 matmuls (E4M3 x E4M3 -> BF16, UE8M0 scales per block of 32)"]),
    ("MXFP8 sm_100, NVFP4's scale mode", MXFP8, "sm_100", [cublaslt(mode="VEC16_UE4M3")] * 7, {}, "failed",
     ["with UE4M3 scales per block of 16"]),
    ("MXFP8 sm_100, rowwise", MXFP8, "sm_100", [H200_LINE] * 7, {}, "failed", ["with rowwise fp32 scales"]),
    ("MXFP8 sm_100, BF16 emulation", MXFP8, "sm_100", BF16_CUDA, {}, "failed", ["BF16 x BF16"]),
    ("NVFP4 sm_100", NVFP4, "sm_100", [cublaslt("R_4F_E2M1", mode="VEC16_UE4M3")] * 7, {}, "passed",
     ["(E2M1 x E2M1 -> BF16, UE4M3 scales per block of 16)"]),
    ("NVFP4 sm_100, MX scales", NVFP4, "sm_100", [cublaslt("R_4F_E2M1", mode="VEC32_UE8M0")] * 7, {}, "failed",
     ["with UE8M0 scales per block of 32; this artifact's linears pass UE4M3 scales per block of 16"]),
    ("NVFP4 sm_100, BF16 emulation", NVFP4, "sm_100", BF16_CUDA, {}, "failed", ["BF16 x BF16"]),
    ("MXFP4 sm_100", MXFP4, "sm_100", [cublaslt("R_4F_E2M1", mode="VEC32_UE8M0")] * 7, {}, "passed",
     ["(E2M1 x E2M1 -> BF16, UE8M0 scales per block of 32)"]),
    ("MXFP4 sm_100, NVFP4's scales", MXFP4, "sm_100", [cublaslt("R_4F_E2M1", mode="VEC16_UE4M3")] * 7, {}, "failed",
     ["UE4M3 scales per block of 16"]),
]


@pytest.mark.parametrize(("scheme", "device", "lines", "kernels", "status", "phrases"),
                         [case[1:] for case in WHOLE_LOGS], ids=[case[0] for case in WHOLE_LOGS])
def test_whole_logs_of_the_new_schemes_on_both_vendors(scheme, device, lines, kernels, status, phrases):
    row = GEMM_TABLE[scheme, device]
    assert row.probe in (INT_MM, BLOCK_MM)
    got, reason, _ = judge(row.expected, KernelEvidence.read(lines, kernels, "logging"), True)
    assert got == status, reason
    assert all(p in reason for p in phrases), reason


def test_numerics_decide_first_and_an_unknown_gemm_never_passes():
    row = GEMM_TABLE[INT8, "gfx950"]
    assert judge(row.expected, KernelEvidence.read(V.int8_calls(), {}), False)[0] == "failed"
    assert judge(row.expected, KernelEvidence.read([], {}), True)[0] == "failed"        # nothing logged, no GEMM
    w4a16 = ExpectedGemm("U4", "block128_zp", scheme="w4a16_int4", input_element="BF16")
    assert judge(w4a16, KernelEvidence.read(BF16_ROCM, {}), True)[0] == "failed"        # a dequantized BF16 GEMM
