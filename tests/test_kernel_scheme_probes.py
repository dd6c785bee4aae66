"""The kernel check of INT8, INT4, NVFP4, MXFP8 and MX artifacts (validate/scheme_kernel_check.py): what runs on a
CPU (INT8's numerics through the real ``torch._int_mm``; everything else skipped with its reason), what each faked
GPU runs and how its children's logs are judged, and the block-scaled probe's glue (scale layouts, packing, global
scales) run end to end on a CPU against a stand-in for ``torch._scaled_mm`` that reads its operands the way
cuBLASLt and hipBLASLt define them. No GPU here: nothing is reported passed without a GEMM's log lines."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from eagle3_quant.runtime import mx
from eagle3_quant.runtime.nvfp4_linear import quant_dequant_nvfp4, quantize_nvfp4
from eagle3_quant.validate import block_gemm_probe as block
from eagle3_quant.validate.gemm_devices import BLOCK_MM, INT_MM
from eagle3_quant.validate.kernel_check import kernel_checks, run_kernel_check
from eagle3_quant.validate.platform import Platform
from eagle3_quant.validate.scheme_kernel_check import gemm_probe
from fixtures.synthetic import write_synthetic_draft

FIXTURES = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location("vendor_lines", FIXTURES / "rocm/vendor_lines.py")
V = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(V)
MI355X = Platform("rocm", "cuda:0", "AMD Instinct MI355X", "gfx950", "2.9", "7.0")
H200 = Platform("cuda", "cuda:0", "NVIDIA H200", "sm_90", "2.9", "12.8")
B200 = Platform("cuda", "cuda:0", "NVIDIA B200", "sm_100", "2.9", "12.8")
INT8_W = {"dtype": "int8", "qscheme": "per_channel", "ch_axis": 0, "symmetric": True, "is_dynamic": False}
INT8_A = {**INT8_W, "ch_axis": 1, "is_dynamic": True}
MXFP8 = {"dtype": "fp8_e4m3", "qscheme": "per_group", "ch_axis": -1, "group_size": 32, "scale_format": "e8m0"}
FP4_16 = {"dtype": "fp4", "qscheme": "per_group", "ch_axis": -1, "group_size": 16}
FP8_T = {"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False}
MXFP4 = {"dtype": "fp4", "qscheme": "per_group", "ch_axis": -1, "group_size": 32}
CONFIGS = {"w8a8_int8": (INT8_W, INT8_A), "w_mxfp8_a_mxfp8": ({**MXFP8, "is_dynamic": False},
                                                              {**MXFP8, "is_dynamic": True}),
           "nvfp4": ([{**FP4_16, "is_dynamic": False}, FP8_T], [{**FP4_16, "is_dynamic": True}, FP8_T]),
           "w4a16_int4": ({"dtype": "uint4", "qscheme": "per_group", "group_size": 128, "is_dynamic": False}, None),
           "w_mxfp4_a_mxfp4": ({**MXFP4, "is_dynamic": False}, {**MXFP4, "is_dynamic": True})}


def _quant_config(scheme: str) -> dict:
    weight, inputs = CONFIGS[scheme]
    return {"quant_method": "quark", "global_quant_config": {"weight": weight, "input_tensors": inputs}}


def config_only(tmp_path: Path, scheme: str) -> Path:
    """An artifact folder whose config names `scheme` (the faked children read nothing else)."""
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": _quant_config(scheme)}))
    return tmp_path


def int8_artifact(tmp_path: Path) -> Path:
    """The synthetic tiny draft with its decoder linears in W8A8 INT8 as Quark exports them (int8 [N, K] weights,
    fp32 per-channel scales), fc and lm_head in BF16."""
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    tensors = load_file(src / "model.safetensors")
    for name in [n for n in tensors if n.startswith("midlayer.") and n.endswith("_proj.weight")]:
        weight = tensors[name].float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-8) / 127
        tensors[name] = torch.round(weight / scale[:, None]).clamp(-128, 127).to(torch.int8)
        tensors[name.replace(".weight", ".weight_scale")] = scale
    out = tmp_path / "int8"
    out.mkdir()
    save_file(tensors, str(out / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "quantization_config": _quant_config("w8a8_int8")}))
    return out


def test_int8_on_a_cpu_runs_its_gemm_bit_exact_and_skips_the_gpu_path(tmp_path):
    kernel = run_kernel_check(int8_artifact(tmp_path), "cpu")
    assert kernel["status"] == "skipped" and kernel["probe"] == INT_MM
    assert kernel["reason"].startswith("no ROCm/CUDA GPU here: w8a8_int8's GEMM (I8 x I8 with no scales) was not run")
    rows = kernel["numerics"]
    assert {r["module"] for r in rows} >= {"midlayer.self_attn.q_proj", "midlayer.mlp.down_proj"} and len(rows) == 21
    assert all(r["bit_exact"] and r["ok"] and r["format"] == "int8 x int8" for r in rows)
    checks = {c.name: c.status for c in kernel_checks(kernel)}
    assert checks == {"kernel_numerics": "passed", "kernel_path": "skipped", "mi355x_hipblaslt": "skipped"}


def test_the_prepared_script_and_its_child_phase_run_the_int8_probe(tmp_path):
    """`python -m eagle3_quant.validate.kernel_check OUT` and the child phase the GPU path starts, on a CPU."""
    out = int8_artifact(tmp_path)
    printed = []
    for args, name in (([], "kernel.json"), (["--phase", "gemm_numerics", "--device", "cpu"], "phase.json")):
        done = subprocess.run([sys.executable, "-m", "eagle3_quant.validate.kernel_check", str(out), *args, "--json",
                               str(tmp_path / name)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        printed.append(done.stdout)
    kernel, phase = (json.loads((tmp_path / n).read_text()) for n in ("kernel.json", "phase.json"))
    assert (kernel["status"], kernel["scheme"]) == ("skipped", "w8a8_int8") and "skipped  kernel_path" in printed[0]
    assert "passed   kernel_numerics" in printed[0] and all(r["bit_exact"] for r in kernel["numerics"])
    assert phase["numerics"] == kernel["numerics"]


def test_an_int8_gemm_that_computes_otherwise_fails_its_numerics(tmp_path, monkeypatch):
    real = torch._int_mm
    monkeypatch.setattr(torch, "_int_mm", lambda a, b: real(a[:, :-8], b[:-8]))    # the last 8 inputs dropped
    kernel = run_kernel_check(int8_artifact(tmp_path), "cpu")
    assert not any(r["ok"] for r in kernel["numerics"])
    assert {c.name: c.status for c in kernel_checks(kernel)}["kernel_numerics"] == "failed"


def _faked(monkeypatch, platform: Platform, evidence_lines: list[str], kernels: dict, numerics_ok: bool = True,
           unsupported: str | None = None) -> list:
    """The GPU children of run_kernel_check faked: the logged one writes `evidence_lines` where the library would."""
    seen = []

    def child(out, device, phase, env, workdir):
        seen.append((phase, env))
        if unsupported:
            return {"unsupported": unsupported}
        if phase == "gemm_evidence":
            log = env.get("HIPBLASLT_LOG_FILE") or env["CUBLASLT_LOG_FILE"]
            Path(log.replace("%i", "4242")).write_text("\n".join(evidence_lines) + "\n")
            return {"kernels": kernels, "output": ""}
        return {"numerics": [{"module": "m", "rows": 1, "format": "f", "max_rel_error": 1e-3, "bit_exact": False,
                              "tolerance": 2e-2, "ok": numerics_ok}]}

    for name in ("HIPBLASLT_LOG_LEVEL", "HIPBLASLT_LOG_MASK", "CUBLASLT_LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("eagle3_quant.validate.platform.detect_platform", lambda device=None: platform)
    monkeypatch.setattr("eagle3_quant.validate.kernel_check._child", child)
    return seen


def test_int8_on_an_mi355x_logs_hipblaslt_and_judges_its_int8_gemm(tmp_path, monkeypatch):
    seen = _faked(monkeypatch, MI355X, V.int8_calls(), {V.GFX950_I8II: 7})
    kernel = run_kernel_check(config_only(tmp_path, "w8a8_int8"))
    assert [phase for phase, _ in seen] == ["gemm_evidence", "gemm_numerics"]
    assert seen[0][1]["HIPBLASLT_LOG_MASK"] == "35" and seen[1][1] == {}
    assert (kernel["status"], kernel["backend"], kernel["probe"]) == ("passed", "hipBLASLt", INT_MM), kernel["reason"]
    assert "hipBLASLt ran 14 matmuls (I8 x I8 -> I32, no scales)" in kernel["reason"]
    checks = {c.name: c.status for c in kernel_checks(kernel)}
    assert checks == {"kernel_numerics": "passed", "kernel_path": "passed", "mi355x_hipblaslt": "skipped"}
    _faked(monkeypatch, MI355X, V.calls(V.hipblaslt_trace("R_16BF"), V.hipblaslt_bench(0, "bf16_r")), {})
    kernel = run_kernel_check(config_only(tmp_path, "w8a8_int8"))
    assert kernel["status"] == "failed" and "BF16 x BF16 -> BF16" in kernel["reason"]
    _faked(monkeypatch, MI355X, V.int8_calls(), {}, numerics_ok=False)
    assert run_kernel_check(config_only(tmp_path, "w8a8_int8"))["status"] == "failed"


def test_nvfp4_on_a_b200_reads_cublaslt_block_scales(tmp_path, monkeypatch):
    line = json.loads((FIXTURES / "h200/kernel_evidence.json").read_text())["kimi-k2.5"]["log_sample"][0]
    nvfp4 = line.replace("type=R_8F_E4M3", "type=R_4F_E2M1").replace("OUTER_VEC_32F", "VEC16_UE4M3")
    seen = _faked(monkeypatch, B200, [nvfp4] * 7, {})
    kernel = run_kernel_check(config_only(tmp_path, "nvfp4"))
    assert seen[0][1]["CUBLASLT_LOG_LEVEL"] == "2" and kernel["probe"] == BLOCK_MM
    assert kernel["status"] == "passed" and "(E2M1 x E2M1 -> BF16, UE4M3 scales per block of 16)" in kernel["reason"]
    _faked(monkeypatch, B200, [nvfp4.replace("VEC16_UE4M3", "VEC32_UE8M0")] * 7, {})
    assert run_kernel_check(config_only(tmp_path, "nvfp4"))["status"] == "failed"
    _faked(monkeypatch, B200, [], {}, unsupported="RuntimeError: scaled_gemm with `torch.float8_e4m3fn` scales of "
                                                  "1x16 blocks is only supported for CUDA 12.8 and above")
    kernel = run_kernel_check(config_only(tmp_path, "nvfp4"))
    assert kernel["status"] == "skipped" and "only supported for CUDA 12.8" in kernel["reason"]
    assert "cannot judge this path" in kernel["reason"]


@pytest.mark.parametrize(("platform", "scheme", "says"), [
    (H200, "w_mxfp8_a_mxfp8", "vLLM 0.33 runs no native GEMM for it here (MXFP8 block-scaled GEMM (FlashInfer"),
    (MI355X, "nvfp4", "natively on b200"),
    (B200, "w4a16_int4", "Marlin (marlin::Marlin<...>), not a vendor BLAS GEMM"),
    (MI355X, "w4a16_int4", "triton_w4a16_gemm_kernel"),
    (Platform("cuda", "cuda:0", "NVIDIA A100", "sm_80", "2.9", "12.8"), "w8a8_int8", "not a device the kernel check"),
])
def test_where_nothing_can_be_judged_nothing_runs_and_nothing_passes(tmp_path, monkeypatch, platform, scheme, says):
    seen = _faked(monkeypatch, platform, [], {})
    kernel = run_kernel_check(config_only(tmp_path, scheme))
    assert seen == [] and kernel["status"] == "skipped" and says in kernel["reason"]
    assert {c.status for c in kernel_checks(kernel)} == {"skipped"}


def test_mxfp4_on_gfx950_keeps_aiters_gemm_and_mx_on_a_cpu_says_where_it_runs(tmp_path, monkeypatch):
    monkeypatch.setattr("eagle3_quant.validate.mx_kernel_probe.aiter_found", lambda: False)
    monkeypatch.setattr("eagle3_quant.validate.platform.detect_platform", lambda device=None: MI355X)
    kernel = run_kernel_check(config_only(tmp_path, "w_mxfp4_a_mxfp4"))
    assert kernel["mx"] and "without AITER" in kernel["reason"]
    monkeypatch.undo()
    kernel = run_kernel_check(config_only(tmp_path, "w_mxfp8_a_mxfp8"), "cpu")
    assert kernel["status"] == "skipped" and kernel["numerics"] == [] and "natively on mi355x, b200" in kernel["reason"]


def test_the_probe_says_unsupported_when_torch_refuses_the_gemm(monkeypatch):
    weights = [_mxfp8_weight(64, 128, seed=1)]
    monkeypatch.setattr(block, "read_block_weights", lambda out, device: weights)
    monkeypatch.setattr("eagle3_quant.validate.int8_probe.read_int8_weights", lambda out, device: [])

    def refuse(*args, **kwargs):
        raise RuntimeError("could not find valid hipblaslt solution\n(more)")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    platform = Platform("rocm", "cpu", "stand-in", "gfx950", "2.9", "7.0")
    assert gemm_probe(Path("."), platform, "gemm_numerics") == {
        "unsupported": "RuntimeError: could not find valid hipblaslt solution"}


# --- the block-scaled probe's glue, against a stand-in GEMM that reads operands as the libraries define them ---

def blocked_offset(row, col, cols: int):
    """cuBLAS's "1D block scaling factors layout": 128 x 4 tiles in row-major tile order, inside one
    (row % 32) * 16 + (row % 128 // 32) * 4 + col % 4 (ints or index tensors)."""
    tile = (row // 128) * (-(-cols // 4)) + col // 4
    return tile * 512 + (row % 32) * 16 + (row % 128 // 32) * 4 + col % 4


def test_to_blocked_is_cublass_layout():
    scale = torch.arange(256 * 8, dtype=torch.int32).reshape(256, 8)
    flat = block.to_blocked(scale)
    assert all(flat[blocked_offset(r, c, 8)] == scale[r, c] for r in range(256) for c in range(8))
    padded = block.scale_layout(torch.ones(3, 2, dtype=torch.uint8), swizzle=False)
    assert padded.numel() == 128 * 4 and padded.view(128, 4)[:3, :2].eq(1).all() and padded.sum() == 6


def _decode(t: torch.Tensor) -> torch.Tensor:
    return mx.unpack_e2m1(t.view(torch.uint8)) if t.dtype == torch.float4_e2m1fn_x2 else t.to(torch.float32)


def standin_scaled_mm(swizzled: bool):
    """torch._scaled_mm's block-scaled contract: a [M, K] x b [K, N], scales per block along K, flat, padded to 128 x 4
    tiles, blocked (cuBLASLt) or row-major (hipBLASLt)."""
    def scaled_mm(a, b, scale_a, scale_b, out_dtype):
        def scales(s: torch.Tensor, rows: int, k: int) -> torch.Tensor:
            block_size = 16 if s.dtype == torch.float8_e4m3fn else 32
            cols = k // block_size
            r, c = torch.arange(rows)[:, None], torch.arange(cols)[None, :]
            grid = s.view(torch.uint8)[blocked_offset(r, c, cols) if swizzled else r * (-(-cols // 4) * 4) + c]
            values = grid.view(torch.float8_e4m3fn).float() if block_size == 16 else mx.e8m0_to_float(grid)
            return values.repeat_interleave(block_size, dim=1)
        av, bv = _decode(a), _decode(b.t())
        return ((av * scales(scale_a, *av.shape)) @ (bv * scales(scale_b, *bv.shape)).T).to(out_dtype)
    return scaled_mm


def _mxfp8_weight(n: int, k: int, seed: int, element: str = "fp8_e4m3") -> block.BlockWeight:
    codes, scale = mx.quantize_mx(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)), element)
    return block.BlockWeight("m", codes, scale, element)


def _nvfp4_weight(n: int, k: int, seed: int) -> block.BlockWeight:
    weight = torch.randn(n, k, generator=torch.Generator().manual_seed(seed))
    global_scale = float(weight.abs().amax() / (448 * 6))
    values, scale = quantize_nvfp4(weight, torch.tensor(1 / global_scale))
    return block.BlockWeight("m", mx.pack_e2m1(values), scale.to(torch.float8_e4m3fn).view(torch.uint8), "fp4", True,
                             global_scale, 0.02)


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_the_block_probe_feeds_the_gemm_what_each_library_reads(monkeypatch, kind):
    weights = [_mxfp8_weight(160, 256, 1), _mxfp8_weight(48, 128, 2, "fp4"), _nvfp4_weight(144, 256, 3)]
    platform = Platform(kind, "cpu", "stand-in", "sm_100" if kind == "cuda" else "gfx950", "2.9", "x")
    monkeypatch.setattr(torch, "_scaled_mm", standin_scaled_mm(swizzled=kind == "cuda"))
    rows = block.block_numerics(weights, platform)
    assert len(rows) == 9 and all(r["ok"] for r in rows), rows
    assert {r["format"] for r in rows} == {"mxfp8 x mxfp8", "mxfp4 x mxfp4", "nvfp4 x nvfp4"}
    monkeypatch.setattr(torch, "_scaled_mm", standin_scaled_mm(swizzled=kind != "cuda"))   # the other layout
    assert not all(r["ok"] for r in block.block_numerics(weights, platform))


def test_the_probes_activation_codes_are_the_runtimes():
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    mxfp8 = _mxfp8_weight(8, 64, 5)
    assert torch.equal(block.dequantize(mxfp8, *block.quantize_input(mxfp8, x), 1.0),
                       mx.quant_dequant_mx(x.float(), "fp8_e4m3"))
    nvfp4 = _nvfp4_weight(8, 64, 6)          # the same codes and scales; x * g against x / (1 / g): one fp32 ulp
    torch.testing.assert_close(block.dequantize(nvfp4, *block.quantize_input(nvfp4, x), nvfp4.input_global),
                               quant_dequant_nvfp4(x.float(), torch.tensor(1 / nvfp4.input_global)), rtol=2e-7, atol=0)
