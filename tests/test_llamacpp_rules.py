"""llama.cpp's rules as the toolkit reads them, each tested on lines built from llama.cpp's own format strings (the
vendored llama.cpp of llama-cpp-python 0.3.36, commit 0c1e570; file:line beside each) or its own formulas: what
llama-quantize, llama-server and llama-server --version print, the converter's q/k row order, GGML's FP4 blocks, the
activations ggml's CPU matmul takes, and the options and refusals that need no tool to run."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3_quant.bench.llamacpp_options import LlamaCppBenchOptions
from eagle3_quant.bench.llamacpp_stats import NEAR_TIE_NATS, first_difference, speed_ratio
from eagle3_quant.engines.llamacpp.build import missing_toolchain
from eagle3_quant.engines.llamacpp.names import VEC_DOT_TYPE, gguf_name, rope_row_order
from eagle3_quant.engines.llamacpp.quantize import fallbacks
from eagle3_quant.engines.llamacpp.server import LISTENING, METRIC, STATISTICS, ServerSpec
from eagle3_quant.engines.llamacpp.tools import VERSION_LINE
from eagle3_quant.engines.llamacpp.types import GGUF_TYPES, gguf_type
from eagle3_quant.errors import OptionsError, QuantizationError, SchemeError
from eagle3_quant.quantize.gguf_blocks import mxfp4_blocks, nvfp4_blocks
from eagle3_quant.quantize.gguf_options import GgufOptions
from eagle3_quant.runtime.ggml_activations import q8_0, q8_k
from eagle3_quant.runtime.mx import dequantize_mxfp4
from eagle3_quant.runtime.nvfp4_linear import dequantize_nvfp4
from eagle3_quant.speedup import cycle_speedup

# ggml-common.h:1124-1129 kvalues_mxfp4: the doubled E2M1 table
KVALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)


def ggml_mxfp4(blocks: torch.Tensor) -> torch.Tensor:
    """ggml-quants.c:569-587 dequantize_row_mxfp4: y[j] = kvalues[qs[j] & 0xF] * 2^(e-128), y[j+16] = ... >> 4."""
    rows = blocks.shape[0]
    b = blocks.reshape(rows, -1, 17).long()
    scale = torch.pow(2.0, b[..., 0].double() - 128)
    low, high = b[..., 1:] & 0xF, b[..., 1:] >> 4
    table = torch.tensor(KVALUES, dtype=torch.float64)
    values = torch.cat((table[low], table[high]), dim=-1) * scale[..., None]
    return values.reshape(rows, -1)


def ue4m3(x: torch.Tensor) -> torch.Tensor:
    """ggml-impl.h:512-526 ggml_ue4m3_to_fp32 (raw value x 0.5, to go with the doubled table)."""
    x = x.long()
    exp, man = (x >> 3) & 0xF, (x & 7).double()
    value = torch.where(exp == 0, man * 2.0 ** -9, (1 + man / 8) * torch.pow(2.0, exp.double() - 7))
    return torch.where((x == 0) | (x == 0x7F), torch.zeros_like(value), value) * 0.5


def ggml_nvfp4(blocks: torch.Tensor) -> torch.Tensor:
    """ggml-quants.c:589-611 dequantize_row_nvfp4: 4 sub-blocks of 16, byte j: element j (low), j + 8 (high)."""
    rows = blocks.shape[0]
    b = blocks.reshape(rows, -1, 36).long()
    scales, qs = ue4m3(b[..., :4]), b[..., 4:].reshape(rows, -1, 4, 8)
    table = torch.tensor(KVALUES, dtype=torch.float64)
    values = torch.cat((table[qs & 0xF], table[qs >> 4]), dim=-1) * scales[..., None]
    return values.reshape(rows, -1)


def test_mxfp4_blocks_dequantize_by_ggml_to_quarks_values():
    gen = torch.Generator().manual_seed(0)
    packed = torch.randint(0, 256, (6, 64), dtype=torch.uint8, generator=gen)          # K = 128
    scale = torch.randint(100, 140, (6, 4), dtype=torch.uint8, generator=gen)
    blocks = mxfp4_blocks(packed, scale, "w")
    assert blocks.shape == (6, 4 * 17) and blocks.dtype == torch.uint8
    assert torch.equal(ggml_mxfp4(blocks), dequantize_mxfp4(packed, scale, torch.float32).double())


def test_mxfp4_blocks_refuse_a_nan_scale_and_a_wrong_layout():
    with pytest.raises(QuantizationError, match="255"):
        mxfp4_blocks(torch.zeros(2, 16, dtype=torch.uint8), torch.full((2, 1), 255, dtype=torch.uint8), "w")
    with pytest.raises(QuantizationError, match="not an MXFP4 weight"):
        mxfp4_blocks(torch.zeros(2, 15, dtype=torch.uint8), torch.zeros(2, 1, dtype=torch.uint8), "w")


def test_nvfp4_blocks_carry_only_a_unit_global_scale():
    gen = torch.Generator().manual_seed(1)
    packed = torch.randint(0, 256, (3, 64), dtype=torch.uint8, generator=gen)          # K = 128
    raw = torch.randint(8, 0x70, (3, 8), dtype=torch.uint8, generator=gen)
    scale = raw.view(torch.float8_e4m3fn)
    blocks = nvfp4_blocks(packed, scale, 1.0, "w")
    assert blocks.shape == (3, 2 * 36)
    assert torch.equal(ggml_nvfp4(blocks), dequantize_nvfp4(packed, scale, 1.0, torch.float32).double())
    with pytest.raises(QuantizationError, match="weight_scale_2 is 0.5.*no per-tensor scale"):
        nvfp4_blocks(packed, scale, 0.5, "w")
    with pytest.raises(QuantizationError, match="negative"):
        nvfp4_blocks(packed, (raw | 0x80).view(torch.float8_e4m3fn), 1.0, "w")


def permute(weights: torch.Tensor, n_head: int, n_head_kv: int | None) -> torch.Tensor:
    """conversion/llama.py:176-181 LlamaModel.permute, as written there."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


@pytest.mark.parametrize("heads", [1, 3, 4, 9])
def test_rope_row_order_is_the_converters_permutation(heads):
    rows = heads * 16
    weight = torch.arange(rows * 5, dtype=torch.float32).reshape(rows, 5)
    assert torch.equal(weight[rope_row_order(rows, heads)], permute(weight, heads, heads))


def test_gguf_names_follow_the_converter():
    assert gguf_name("midlayer.self_attn.q_proj.weight", "midlayer.") == "blk.0.attn_q.weight"
    assert gguf_name("layers.0.hidden_norm.weight", "layers.0.") == "blk.0.attn_norm_2.weight"
    assert gguf_name("lm_head.weight", "midlayer.") == "output.weight"
    assert gguf_name("t2d", "midlayer.") is None          # llama.py:247-249: "not used at runtime, skip"
    assert gguf_name("midlayer.self_attn.q_norm.weight", "midlayer.") is None


def test_vec_dot_types_are_ggml_cpus():
    # ggml-cpu/ggml-cpu.c type_traits_cpu: MXFP4 and NVFP4 :287-298 (Q8_0), BF16 :395-400, the k-quants Q8_K
    assert VEC_DOT_TYPE["mxfp4"] == VEC_DOT_TYPE["nvfp4"] == VEC_DOT_TYPE["q8_0"] == "q8_0"
    assert VEC_DOT_TYPE["bf16"] == "bf16" and VEC_DOT_TYPE["q4_K"] == VEC_DOT_TYPE["q6_K"] == "q8_K"
    assert VEC_DOT_TYPE["f32"] is None


def test_q8_0_activations_match_gguf_py_reference():
    """gguf-py's Q8_0 is "bit-exact same results as reference" (gguf/quants.py); the registry's gguf holds it."""
    quants = pytest.importorskip("gguf.quants")
    from gguf.constants import GGMLQuantizationType

    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(2)) * 3
    x[0, :32] = 0.0
    ref = quants.dequantize(quants.quantize(x.numpy(), GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0)
    assert torch.equal(q8_0(x), torch.from_numpy(ref).float())


def test_q8_k_activations_keep_the_largest_and_stay_within_half_a_step():
    x = torch.randn(2, 512, generator=torch.Generator().manual_seed(3))
    y = q8_k(x)
    blocks, yb = x.reshape(2, 2, 256), y.reshape(2, 2, 256)
    m = torch.gather(blocks, -1, blocks.abs().argmax(-1, keepdim=True))
    step = m.abs() / 127
    assert torch.allclose(torch.gather(yb, -1, blocks.abs().argmax(-1, keepdim=True)), m, rtol=1e-6)
    assert bool(((yb - blocks).abs() <= step / 2 * (1 + 1e-5)).all())
    assert torch.equal(q8_k(torch.zeros(1, 256)), torch.zeros(1, 256))


def test_llama_quantize_fallback_lines_are_read():
    # llama-quant.cpp:397-440: "warning: %-36s - ncols %6" PRId64 " not divisible by %3" PRId64
    # " (required for type %7s) " then "-> falling back to %7s\n"
    printf = "warning: %-36s - ncols %6d not divisible by %3d (required for type %7s) -> falling back to %7s\n"
    line = printf % ("blk.0.attn_q.weight", 1152, 256, "q4_K", "q5_0")  # noqa: UP031 - C's printf, as written
    found = fallbacks("llama_model_quantize_impl: ...\n" + line)
    assert len(found) == 1 and (found[0].tensor, found[0].columns, found[0].block, found[0].wanted,
                                found[0].got) == ("blk.0.attn_q.weight", 1152, 256, "q4_K", "q5_0")
    assert "q5_0 (llama-quantize's fallback)" in found[0].describe()


def test_server_lines_are_read():
    # server.cpp:512-514 "listening on %s\n" (with the SRV_INF prefix), speculative.cpp:2933-2975 statistics
    assert LISTENING.search("0.00.26 I srv  llama_server: listening on http://127.0.0.1:45115")["port"] == "45115"
    printf = ("statistics %16s: #calls(b,g,a) = %4d %6d %6d, #gen drafts = %6d, #acc drafts = %5d, #gen tokens = "
              "%6d, #acc tokens = %5d, #mean acc len = %.2f, #acc rate/pos = (0.613, 0.258, 0.161), dur(b,g,a) = "
              "%.3f, %.3f, %.3f ms")
    stats = printf % ("draft-eagle3", 1, 31, 31, 31, 19, 92, 32, 2.03, 0.005, 110.801, 0.050)  # noqa: UP031
    found = STATISTICS.search("0.10.18 I spec common_specu: " + stats)
    assert (found["tokens"], found["acc"], found["draft"]) == ("92", "32", "110.801")
    # server-task.cpp:1523-1615: Prometheus lines with the llamacpp: prefix
    text = ('llamacpp:spec_decode_num_drafts_total 31\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 5\n')
    assert {(m["name"], m["pos"], m["value"]) for m in METRIC.finditer(text)} == {
        ("spec_decode_num_drafts_total", None, "31"), ("spec_decode_num_accepted_tokens_per_pos_total", "2", "5")}
    # common/arg.cpp:1451-1455 with build-info.cpp.in: "version: %s (build %d, commit %s)"
    assert VERSION_LINE.search("version: 0.5.0-dev (build 1, commit 0c1e570)").groupdict() == {
        "version": "0.5.0-dev", "build": "1", "commit": "0c1e570"}


def test_server_runs_eagle3_only_when_told_and_pins_what_varies(tmp_path):
    spec = ServerSpec(tmp_path / "t.gguf", tmp_path / "d.gguf", 3, 1, 256, 2)
    argv = spec.argv(type("T", (), {"binary": lambda self, name: Path(name)})())
    assert argv[argv.index("--spec-type") + 1] == "draft-eagle3"
    for pinned in ("--fit", "-cram", "--no-cache-prompt", "--metrics"):
        assert pinned in argv
    assert "--spec-type" not in ServerSpec(tmp_path / "t.gguf", None, 3, 1, 256, 2).argv(
        type("T", (), {"binary": lambda self, name: Path(name)})())


def test_missing_compiler_and_cmake_are_named(tmp_path):
    problem = missing_toolchain({"PATH": str(tmp_path)})
    assert "a C compiler" in problem and "a C++ compiler" in problem and "CMake" in problem
    assert missing_toolchain({"PATH": str(tmp_path), "CC": "gcc-none"}).count("gcc-none") == 1


def test_build_without_a_compiler_stops_in_one_line_creating_nothing(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path / "empty"), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("CC", None), env.pop("CXX", None)
    done = subprocess.run([sys.executable, "-m", "eagle3_quant.engines.llamacpp.build", str(tmp_path / "env")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: building llama.cpp needs") and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "env").exists()


def test_gguf_types_are_data_and_unknown_ones_are_listed():
    assert gguf_type("Q8_0").label == "Q8_0" and gguf_type("mxfp4").carries == "mx"
    with pytest.raises(SchemeError, match="valid types: " + ", ".join(GGUF_TYPES)):
        gguf_type("q3_k")


@pytest.mark.parametrize("kwargs, field", [
    ({"draft_vocab": 4096}, "draft_vocab"), ({"calib": Path("c")}, "calib"), ({"pre_tokenizer": "GPT 2"},
                                                                               "pre_tokenizer"),
    ({"type": "bf16", "quantize_lm_head": True}, "quantize_lm_head"), ({"draft_vocab": 0, "calib": Path("c")},
                                                                       "draft_vocab")])
def test_gguf_options_refuse_what_cannot_work(kwargs, field):
    with pytest.raises(OptionsError) as caught:
        GgufOptions(target="t", **kwargs)
    assert caught.value.field == field


@pytest.mark.parametrize("kwargs, field", [({"slots": (1, 1)}, "slots"), ({"slots": (0,)}, "slots"),
                                           ({"repeats": 0}, "repeats"), ({"threads": 10**6}, "threads"),
                                           ({"k": 0}, "k"), ({"long_context": 0}, "long_context"),
                                           ({"num_prompts": 10**5}, "num_prompts")])
def test_bench_options_refuse_what_cannot_work(kwargs, field):
    with pytest.raises(OptionsError) as caught:
        LlamaCppBenchOptions(**kwargs)
    assert caught.value.field == field


def test_speed_ratio_pairs_units_and_bootstraps_them():
    slow = [[2.0, 4.0, 6.0], [2.2, 4.2, 6.2]]
    fast = [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    ratio = speed_ratio(slow, fast, "prompts", 0)
    assert ratio.ratio == pytest.approx(12.3 / 6.0)
    assert ratio.low <= ratio.ratio <= ratio.high and ratio.per_repeat == pytest.approx((2.0, 12.6 / 6))
    assert "paired bootstrap over prompts" in ratio.method


def test_a_first_difference_between_near_tied_tokens_is_a_near_tie():
    top = ((), ((5, -0.693), (7, -0.693 - NEAR_TIE_NATS / 2)))
    assert first_difference(0, (1, 7), (1, 5), top).kind == "near tie"
    far = ((), ((5, -0.1), (7, -3.0)))
    assert first_difference(0, (1, 7), (1, 5), far).kind == "real"
    assert first_difference(0, (1, 9), (1, 5), top).kind == "real"        # not among the top tokens


def test_the_cycle_model_prices_a_token_apart_from_a_verify_batch():
    cycle, share, speedup = cycle_speedup(2.0, 20.0, 5.0, token_ms=8.0)
    assert (cycle, share) == (25.0, 0.8) and speedup == pytest.approx(2.0 * 8.0 / 25.0)
    assert cycle_speedup(2.0, 20.0, 5.0)[2] == pytest.approx(2.0 * 20.0 / 25.0)
    assert not math.isnan(speedup)
