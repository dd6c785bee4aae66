"""The kernel check's timing without a GPU: the report built from recorded medians (keys its readers use, ratios,
the cost model's floors), what it prints, and the variants it would time, each run once on the CPU."""

from __future__ import annotations

import pytest
import torch

from eagle3_quant.devices import DEVICE_PROFILES
from eagle3_quant.runtime import fp8
from eagle3_quant.speedup import _batch1_timing
from eagle3_quant.validate import gpu_timing, linear_timing
from eagle3_quant.validate.kernel_probe import Fp8Weight, runtime_layers
from eagle3_quant.validate.linear_timing import fastest_fp8, layer_floors, timing_lines, timing_report
from eagle3_quant.validate.platform import detect_platform

BATCHES = [1, 4, 16, 64]
# medians recorded on an H200 for two linears of the Kimi-K2.5 shape (ms; /work/shared/gpu/h200-2026-12-04)
LAYERS = [
    {"layer": "qkv_proj", "shape": [24576, 14336], "bf16_ms": [0.177, 0.180, 0.191, 0.194],
     "fp8_ms": [0.169, 0.175, 0.175, 0.161], "gemm_only_ms": [0.166, 0.163, 0.177, 0.158],
     "tensorwise_ms": [0.115, 0.108, 0.115, 0.109], "eager_fp8_ms": [0.326, 0.282, 0.375, 0.372]},
    {"layer": "midlayer.mlp.down_proj", "shape": [7168, 12288], "bf16_ms": [0.064, 0.066, 0.067, 0.078],
     "fp8_ms": [0.074, 0.075, 0.073, 0.067], "gemm_only_ms": [0.084, 0.078, 0.077, 0.060],
     "tensorwise_ms": [0.041, 0.041, 0.042, 0.041], "eager_fp8_ms": [0.267, 0.259, 0.265, 0.244]},
]


def _report(**kwargs):
    options = {"profile": DEVICE_PROFILES["h200"], "quant_method": "triton", "scheme": "dynamic per-token",
               "vllm_skipped": "vllm does not import here"}
    return timing_report(BATCHES, LAYERS, **{**options, **kwargs})


def test_the_report_keeps_the_keys_its_readers_use_and_adds_the_rest():
    report = _report()
    assert report["batch_sizes"] == BATCHES and [e["layer"] for e in report["layers"]] == ["qkv_proj",
                                                                                            "midlayer.mlp.down_proj"]
    assert report["total_bf16_ms"] == pytest.approx([0.241, 0.246, 0.258, 0.272])
    assert report["total_fp8_ms"] == pytest.approx([0.243, 0.250, 0.248, 0.228])       # graphed quantization + GEMM
    assert report["fp8_over_bf16"] == pytest.approx([t / b for t, b in zip(report["total_fp8_ms"],
                                                                           report["total_bf16_ms"], strict=True)])
    assert "CUDA graph" in report["includes"] and "triton" in report["includes"]
    for key in ("total_gemm_only_ms", "total_tensorwise_ms", "total_eager_fp8_ms", "gemm_only_over_bf16",
                "fp8_over_gemm_only", "tensorwise_over_bf16", "eager_fp8_over_bf16", "bf16_over_floor"):
        assert len(report[key]) == len(BATCHES), key
    assert report["quant_method"] == "triton" and report["method"] == "cuda_graph_replay"
    assert report["vllm"] == {"skipped": "vllm does not import here"}
    assert LAYERS[0].get("floor_bf16_ms") is None                # the caller's entries are not changed
    # the speedup estimate reads batch 1 of the totals
    assert _batch1_timing({"timing": report, "device": "NVIDIA H200"}) == (pytest.approx(0.243),
                                                                         pytest.approx(0.241), "NVIDIA H200")


def test_the_floors_are_the_cost_models_bytes_at_the_devices_bandwidth():
    report = _report()
    h200 = DEVICE_PROFILES["h200"]
    qkv = report["layers"][0]
    assert qkv["floor_bf16_ms"] == pytest.approx(24576 * 14336 * 2 / h200.hbm_bytes_per_s * 1e3)
    assert qkv["floor_fp8_ms"] == pytest.approx((24576 * 14336 + 24576 * 4) / h200.hbm_bytes_per_s * 1e3)
    assert qkv["floor_tensorwise_ms"] == pytest.approx((24576 * 14336 + 8) / h200.hbm_bytes_per_s * 1e3)
    assert report["floor_ms"]["device_profile"] == "h200"
    assert report["floor_ms"]["bf16"] == pytest.approx(qkv["floor_bf16_ms"] + report["layers"][1]["floor_bf16_ms"])
    assert layer_floors("o_proj", (16, 32), h200)["fp8"] < layer_floors("o_proj", (16, 32), h200)["bf16"]
    unknown = _report(profile=None)
    assert unknown["floor_ms"] is None and "bf16_over_floor" not in unknown
    assert "floor_bf16_ms" not in unknown["layers"][0]


def test_a_column_a_layer_lacks_has_no_total_and_vllm_has_its_own_label():
    layers = [dict(LAYERS[0], vllm_ms=[0.15, 0.15, 0.16, 0.14]), dict(LAYERS[1], vllm_ms=[0.06, 0.06, 0.06, 0.05])]
    report = timing_report(BATCHES, layers, profile=None, quant_method="triton", scheme="dynamic per-token",
                           vllm="vLLM 0.33's FP8 linear: ...")
    assert report["vllm"]["label"].startswith("vLLM") and report["vllm"]["total_ms"] == pytest.approx(
        [0.21, 0.21, 0.22, 0.19])
    assert report["vllm"]["over_bf16"][0] == pytest.approx(0.21 / 0.241)
    partial = timing_report(BATCHES, [layers[0], LAYERS[1]], profile=None, quant_method="triton",
                            scheme="dynamic per-token", vllm="vLLM")
    assert "total_vllm_ms" not in partial and "skipped" in partial["vllm"]


def test_what_the_check_prints_names_each_ratio_and_how_it_was_timed():
    lines = timing_lines(_report())
    assert lines[0].startswith("FP8/BF16 time by batch size: 1:1.01, 4:1.02")
    text = "\n".join(lines)
    for words in ("GEMM alone (rowwise)/BF16", "quantization + GEMM/GEMM alone", "tensorwise GEMM",
                  "BF16/bandwidth floor (h200)", "eager quantization + GEMM/BF16 (diagnostic", "triton",
                  "vllm does not import here"):
        assert words in text, words
    old = {"batch_sizes": [1, 2], "total_bf16_ms": [0.4, 0.4], "total_fp8_ms": [1.2, 1.0],
           "fp8_over_bf16": [3.0, 2.5], "includes": "per-token activation quantization + torch._scaled_mm"}
    assert timing_lines(old) == ["FP8/BF16 time by batch size: 1:3.00, 2:2.50"]    # a report of an older run


def test_the_check_names_the_fastest_fp8_way_from_what_it_timed():
    # the H200's medians: torch's rowwise GEMM is about BF16's time, the tensorwise GEMM well under it
    assert fastest_fp8(_report()) == ("static per-tensor FP8 (tensorwise GEMM)", pytest.approx(max(
        (0.115 + 0.041) / 0.241, (0.108 + 0.041) / 0.246, (0.115 + 0.042) / 0.258, (0.109 + 0.041) / 0.272)))
    assert "fastest FP8 way on this GPU: static per-tensor FP8" in "\n".join(timing_lines(_report()))
    layers = [dict(entry, vllm_ms=[t * 0.5 for t in entry["tensorwise_ms"]]) for entry in LAYERS]
    with_vllm = timing_report(BATCHES, layers, profile=None, quant_method="triton", scheme="dynamic per-token",
                              vllm="vLLM's FP8 linear")
    assert fastest_fp8(with_vllm)[0] == "vLLM's own PTPC linear"


def test_device_names_find_their_cost_profile():
    assert gpu_timing.device_profile("NVIDIA H200").name == "h200"
    assert gpu_timing.device_profile("AMD Instinct MI355X").name == "mi355x"
    assert gpu_timing.device_profile("AMD Instinct MI300X").name == "mi300x"
    assert gpu_timing.device_profile("NVIDIA A100-SXM4-80GB") is None


def _weight(module: str, role: str, n: int, k: int, per_tensor: bool = False, static: bool = False) -> Fp8Weight:
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(n + k)) * 0.05
    quantize = fp8.quantize_weight_per_tensor if per_tensor else fp8.quantize_weight_per_channel
    weight, scale = quantize(w)
    return Fp8Weight(module, role, weight, scale, torch.tensor([0.02]) if static else None)


def test_shards_with_one_weight_scale_each_fuse_to_one_scale():
    p = "midlayer.self_attn."
    per_tensor = [_weight(p + r, r, n, 64, per_tensor=True, static=True)
                  for r, n in (("q_proj", 64), ("k_proj", 32), ("v_proj", 32))]
    fused = {w.module: w for w in runtime_layers(per_tensor)}
    assert fused["qkv_proj"].scale.numel() == 1 and fused["qkv_proj"].weight.shape == (128, 64)
    assert fused["qkv_proj"].scale == max(w.scale for w in per_tensor)
    assert fused["qkv_proj"].input_scale is not None
    channel = [_weight(p + r, r, n, 64) for r, n in (("q_proj", 64), ("k_proj", 32), ("v_proj", 32))]
    assert {w.module: w for w in runtime_layers(channel)}["qkv_proj"].scale.shape == (128,)


@pytest.mark.parametrize("static", [False, True], ids=["ptpc", "static"])
def test_every_variant_the_gpu_times_runs_once_here(monkeypatch, static):
    """On the CPU, graph_ms and eager_ms call each variant once: F.linear, Fp8Linear, rowwise and tensorwise
    _scaled_mm, the eager diagnostic. vLLM does not import here: its column says so."""
    ran: list[tuple[int, ...]] = []

    def once(fn, iters=0, warmup=0):
        ran.append(tuple(fn().shape))
        return 0.01

    monkeypatch.setattr(linear_timing, "graph_ms", once)
    monkeypatch.setattr(linear_timing, "eager_ms", once)
    monkeypatch.setattr(linear_timing, "vllm_fp8_linear", lambda: (None, "vllm does not import here (test)"))
    layers = [_weight("midlayer.mlp.down_proj", "down_proj", 64, 96, per_tensor=static, static=static),
              _weight("midlayer.self_attn.o_proj", "o_proj", 32, 64, per_tensor=static, static=static)]
    report = linear_timing.time_runtime_layers(layers, detect_platform("cpu"), [1, 3])
    assert sorted(set(ran)) == [(1, 32), (1, 64), (3, 32), (3, 64)] and len(ran) == 2 * 2 * 5
    assert report["total_fp8_ms"] == [0.02, 0.02] and report["fp8_over_bf16"] == [1.0, 1.0]
    assert report["scheme"] == ("static per-tensor" if static else "dynamic per-token")
    assert report["quant_method"] == "eager" and report["floor_ms"] is None
    assert report["vllm"] == {"skipped": "vllm does not import here (test)"}
