"""`run`: each stage judged before it is skipped (present *and* valid), saying on the progress what it runs and why;
a damaged artifact is made again. The calibration set's case (a truncated shard) is in test_pipeline.py, with the
real capture."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from test_pipeline import Said

from eagle3_quant.pipeline import plan_pipeline, run_pipeline


def pipeline_over(quantized_tiny, tmp_path: Path) -> Path:
    """A pipeline whose workdir already holds the shared tiny artifact, quantized from its source as the file says."""
    src, built = quantized_tiny()
    shutil.copytree(built, tmp_path / "work" / "draft-fp8")
    data = {"pipeline_version": 1, "source": str(src), "workdir": str(tmp_path / "work"),
            "validate": {"kernel": False, "vllm": False, "sglang": False}, "bench": {"enabled": False},
            "push": {"enabled": False}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_each_stage_says_what_it_runs_and_why(quantized_tiny, tmp_path):
    path = pipeline_over(quantized_tiny, tmp_path)
    said = Said()
    result = run_pipeline(path, progress=said)
    assert [s.status for s in result.stages] == ["skipped", "skipped", "ran", "disabled", "disabled"]
    assert said.lines[0].startswith(f"pipeline {path}: relative paths start from the current folder {Path.cwd()}")
    assert said.lines[1].startswith("[1/5] calibrate: skipped: no calibrate.data")
    assert said.lines[2] == f"[2/5] quantize: skipped: present: {tmp_path / 'work' / 'draft-fp8'} matches its " \
                            "manifest and this pipeline"
    assert said.lines[3] == "[3/5] validate: runs (no validation report)"
    assert said.lines[4].startswith("[3/5] validate: ran in ") and said.lines[4].endswith(" s: passed")
    assert said.lines[5:] == ["[4/5] bench: disabled: bench.enabled is false",
                              "[5/5] push: disabled: push.enabled is false"]


def test_an_artifact_whose_manifest_does_not_read_is_made_again(quantized_tiny, tmp_path):
    path = pipeline_over(quantized_tiny, tmp_path)
    manifest = tmp_path / "work" / "draft-fp8" / "eagle3_quant.json"
    manifest.write_text('{"outputs": [')
    plan = {s.name: (s.status, s.detail) for s in plan_pipeline(path).stages}
    assert plan["quantize"][0] == "would run" and plan["quantize"][1].startswith(
        "replaced: its manifest does not read (not valid JSON")
    assert plan["validate"] == ("would run", "the artifact is made in this run")
    assert manifest.read_text() == '{"outputs": ['          # the plan wrote nothing
    result = run_pipeline(path)
    quantize = result.stages[1]
    assert quantize.status == "ran" and "(replaced: its manifest does not read" in quantize.detail
    assert result.ok and result.stages[2].status == "ran"
