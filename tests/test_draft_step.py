"""benchmarks/draft_step.py without a GPU: it says `skipped` and why (never `passed`), judges recorded numbers, and
makes the three drafts it would time (BF16, PTPC, static per-tensor FP8), each stepping once here."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import draft_step

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU run; on a GPU the step is timed")


def test_on_a_cpu_the_step_is_skipped_with_its_reason(tmp_path, capsys):
    out = tmp_path / "step.json"
    record = draft_step.run_step_bench("kimi-k2.5", out_json=out)
    assert record["status"] == "skipped" and "needs a CUDA/ROCm GPU" in record["reason"]
    assert json.loads(out.read_text())["status"] == "skipped"
    assert draft_step.run_step_bench("llama3-8b", device="cuda")["status"] == "skipped"   # asked, none here
    assert draft_step.main(["--shapes", "llama3-8b", "--json", str(tmp_path / "all.json")]) == 0
    assert "needs a CUDA/ROCm GPU" in capsys.readouterr().out
    records = json.loads((tmp_path / "all.json").read_text())["records"]
    assert records["llama3-8b"]["status"] == "skipped" and "passed" not in json.dumps(records)


def _record(graph_error: bool = False) -> dict:
    # a Llama-3.1-8B-shaped step as an H200 timed it (graph ms; the PTPC row as the eager-quantization build ran)
    graph = {"bf16": [0.388, 0.411, 0.451, 0.467], "ptpc": [0.543, 0.572, 0.624, 0.636],
             "fp8_static": [0.300, 0.320, 0.350, 0.370]}
    variants = {name: {"eager_ms": {b: 1.0 for b in ("1", "4", "16", "64")},
                       "graph_ms": dict(zip(("1", "4", "16", "64"), ms, strict=True)), "floor_ms": 0.177}
                for name, ms in graph.items()}
    if graph_error:
        del variants["ptpc"]["graph_ms"]["64"]
        variants["ptpc"]["graph_error"] = {"64": "RuntimeError: capture failed"}
    return {"shape": "llama3-8b", "batches": [1, 4, 16, 64], "variants": variants}


def test_recorded_numbers_give_ratios_goals_and_a_table():
    out = draft_step.summarize(_record())
    assert out["status"] == "passed"
    assert out["ratios"]["ptpc_over_bf16"]["1"] == pytest.approx(0.543 / 0.388)
    goals = {g["goal"]: g["met"] for g in out["goals"]}
    assert goals == {"PTPC step <= 1.0x BF16 (graph)": False, "static per-tensor FP8 step <= 0.85x BF16 (graph)": True,
                     "BF16 step <= 1.5x the cost model's floor (graph)": False}
    assert "goals met 1/3" in out["summary"] and "PTPC/BF16 1.36-1.40x" in out["summary"]
    assert [line.split()[0] for line in out["table"][1:]] == ["bf16", "ptpc", "fp8_static"]


def test_a_step_that_could_not_be_captured_fails_and_shows_where():
    out = draft_step.summarize(_record(graph_error=True))
    assert out["status"] == "failed" and out["ratios"]["ptpc_over_bf16"]["64"] is None
    assert "fail" in out["table"][2]


@pytest.mark.slow
def test_the_three_drafts_are_made_and_each_steps_once_here(tmp_path, monkeypatch):
    """What the GPU run builds, on the tiny shape: the static artifact from its own random calibration set, with a
    target embedding written beside it when the source has none (as the gpu-check's Llama-shaped source)."""
    from eagle3_quant.validate import gpu_timing
    from fixtures.synthetic import write_synthetic_draft

    def once(fn, iters=0, warmup=0):
        fn()
        return 1.0

    monkeypatch.setattr(gpu_timing, "eager_ms", once)
    monkeypatch.setattr(gpu_timing, "graph_ms", once)
    source = write_synthetic_draft(tmp_path / "src", "tiny")               # no embedding in the checkpoint
    folders, setup = draft_step.build_drafts("tiny", tmp_path / "work", "cpu", source=source)
    assert set(folders) == {"bf16", "ptpc", "fp8_static"} and set(setup) == {"ptpc", "fp8_static"}
    assert (tmp_path / "work" / "calib" / "target" / "model.safetensors").is_file()
    config = json.loads((folders["fp8_static"] / "config.json").read_text())
    assert config["quantization_config"]["global_quant_config"]["input_tensors"]["is_dynamic"] is False
    for folder in folders.values():
        entry = draft_step.measure_variant(folder, "cpu", (1, 3), 1)
        assert entry["graph_ms"] == entry["eager_ms"] == {"1": 1.0, "3": 1.0}
