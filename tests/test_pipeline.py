"""`eagle3-quant run PIPELINE.yaml`: schema, overrides, resumable stages, push to a local Hub."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from hub_server.fixtures import PASSED_REPORT, bound

from eagle3_quant.cli import main
from eagle3_quant.errors import PipelineSpecError
from eagle3_quant.pipeline import plan_pipeline, run_pipeline
from eagle3_quant.pipeline_spec import load_pipeline, quantize_options
from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter, load_calibration
from eagle3_quant.schemes import SCHEMES
from eagle3_quant.util.progress import Silent

EXAMPLE = Path(__file__).resolve().parents[1] / "pipelines" / "kimi-k2.5-eagle3-fp8.yaml"
REPO = "alice/pipeline-fp8"


def write_pipeline(tmp_path, **fields) -> Path:
    data = {"pipeline_version": 1, "source": "org/draft", "workdir": str(tmp_path / "work"),
            "push": {"repo_id": REPO}}
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_example_pipeline_is_valid_and_names_the_kimi_draft():
    spec = load_pipeline(EXAMPLE, [("push.repo_id", "alice/kimi-fp8")])
    assert spec.source == "lightseekorg/kimi-k2.5-eagle3" and spec.target == "moonshotai/Kimi-K2.5"
    assert spec.push.repo_id == "alice/kimi-fp8" and spec.scheme == "ptpc_fp8"
    assert spec.out == Path("runs/kimi-k2.5-eagle3-fp8/draft-fp8")
    with pytest.raises(PipelineSpecError) as placeholder:      # the file's ORG/... is never pushed to
        load_pipeline(EXAMPLE)
    assert placeholder.value.field == "push.repo_id" and "'ORG/kimi-k2.5-eagle3-fp8' is a placeholder: " \
        "pass --repo-id" in placeholder.value.message
    assert load_pipeline(EXAMPLE, [("push.enabled", False)]).push.repo_id == "ORG/kimi-k2.5-eagle3-fp8"


@pytest.mark.parametrize("fields, message", [
    ({"sheme": "ptpc_fp8"}, "unknown key(s) 'sheme'; valid keys: source, workdir, pipeline_version"),
    ({"push": {"repo": "x/y"}}, "field 'push': unknown key(s) 'repo'; valid keys: repo_id, enabled"),
    ({"quantize": {"exclude": "o_proj"}}, "field 'quantize.exclude': 'o_proj' is not a list of a strings"),
    ({"calibrate": {"num_samples": "many"}}, "field 'calibrate.num_samples': 'many' is not an integer"),
    ({"scheme": "int4"}, "unknown scheme 'int4'; valid schemes: ptpc_fp8, fp8"),
    ({"scheme": "fp8"}, "field 'calibrate.data': scheme 'fp8' needs calibration data"),
    ({"push": {"repo_id": None}}, "field 'push.repo_id': required when push is enabled"),
    ({"pipeline_version": 2}, "version 2 is not supported"),
    ({"quantize": {"auto_exclude": 0.02}}, "field 'quantize.auto_exclude': auto_exclude measures sensitivity"),
    ({"quantize": {"draft_vocab": 32000}}, "field 'quantize.draft_vocab': draft_vocab ranks the target's own"),
    ({"quantize": {"smooth_alpha": 0.5}}, "field 'quantize.smooth_alpha': smooth_alpha measures each input channel"),
    ({"quantize": {"gptq": True}}, "field 'quantize.gptq': gptq takes each linear's input Hessian"),
    ({"quantize": {"draft_vocab": "32K"}}, "field 'quantize.draft_vocab': '32K' is not an integer or null"),
])
def test_schema_errors_name_the_field_and_the_valid_choices(tmp_path, fields, message):
    with pytest.raises(PipelineSpecError) as info:
        load_pipeline(write_pipeline(tmp_path, **fields))
    assert message in str(info.value)


def test_missing_required_field_and_bad_file(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("workdir: w\npush: {enabled: false}\n")
    with pytest.raises(PipelineSpecError, match="field 'source': required"):
        load_pipeline(path)
    path.write_text("source: [unclosed\n")
    with pytest.raises(PipelineSpecError, match="not a readable YAML file"):
        load_pipeline(path)
    with pytest.raises(PipelineSpecError, match="no such pipeline file"):
        load_pipeline(tmp_path / "nope.yaml")


def test_a_scheme_whose_default_rounding_measures_takes_the_calibration_set(tmp_path):
    """w4a16_int4 runs AWQ on calibration data by default (schemes.Scheme.needs_data): without a calibrate stage the
    file is refused at load naming the field; with one, quantize gets the set even where nothing else asks for it;
    quantize.rtn (round to nearest) needs none."""
    with pytest.raises(PipelineSpecError) as info:
        load_pipeline(write_pipeline(tmp_path, scheme="w4a16_int4"))
    assert info.value.field == "calibrate.data" and "AWQ by default; quantize.rtn: true" in info.value.message
    staged = load_pipeline(write_pipeline(tmp_path, scheme="w4a16_int4", target="org/target",
                                          calibrate={"data": "prompts.jsonl"}, quantize={"serve_taps": "as-is"}))
    assert quantize_options(staged).calib == staged.calib
    rtn = load_pipeline(write_pipeline(tmp_path, scheme="w4a16_int4", quantize={"rtn": True, "serve_taps": "as-is"}))
    assert quantize_options(rtn).calib is None and quantize_options(rtn).rtn
    assert not SCHEMES["w4a16_int4"].needs_data(rounding_replaced=True) and SCHEMES["nvfp4"].needs_data(True)


def test_overrides_apply_before_validation(tmp_path):
    path = write_pipeline(tmp_path)
    spec = load_pipeline(path, ["push.dry_run=true", "quantize.exclude=[o_proj, down_proj]", "push.tag=v2"])
    assert spec.push.dry_run is True and spec.quantize.exclude == ("o_proj", "down_proj") and spec.push.tag == "v2"
    with pytest.raises(PipelineSpecError, match="unknown key"):
        load_pipeline(path, ["push.dryrun=true"])
    with pytest.raises(PipelineSpecError, match="is not KEY=VALUE"):
        load_pipeline(path, ["push.dry_run"])


class Said(Silent):
    """A Progress that keeps what the run says."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        self.lines.append(text)


def write_calibration(folder: Path, target: str, samples: int) -> None:
    """A present set of the draft's width (quantize reads it: the layers it serves the draft are checked on it)."""
    writer = CalibrationWriter(folder, CalibrationInfo(target=target, aux_layer_ids=(1, 2, 3), target_hidden_size=64),
                               shard_samples=samples)
    for _ in range(samples):
        writer.add(CalibrationSample(torch.arange(4), torch.zeros(4, 192, dtype=torch.bfloat16), torch.arange(4)))
    writer.flush()


@pytest.mark.slow
def test_pipeline_runs_resumes_and_pushes(make_draft, tmp_path, hub, capsys):
    src = make_draft()
    path = write_pipeline(tmp_path, source=str(src), target="example-org/target",
                          push={"allow_unvalidated": True, "allow_unmeasured": True, "base_model": "org/draft"})
    first = run_pipeline(path)
    status = {s.name: s.status for s in first.stages}
    assert status["calibrate"] == "skipped" and status["quantize"] == "ran" and status["push"] == "ran", \
        [(s.name, s.detail) for s in first.stages]
    assert first.push.commit_oid and REPO in hub.store.repos
    commits = hub.store.commit_count(REPO)

    # a passing validation report appears (as `eagle3-quant validate` writes it): validate is skipped, the card
    # changes, and only the card and the report are uploaded; quantize is skipped (outputs match the manifest)
    (first.spec.out / "validation.json").write_text(json.dumps(bound(PASSED_REPORT, first.spec.out)))
    second = run_pipeline(path)
    status = {s.name: s for s in second.stages}
    assert status["quantize"].status == "skipped" and "matches its manifest" in status["quantize"].detail
    assert status["validate"].status == "skipped" and status["validate"].detail == "present: passed"
    assert sorted(f.path for f in second.push.uploaded) == ["README.md", "validation.json"]

    # nothing changed: no commit; the CLI prints one summary table and exits 0
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(path)])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "no commit" in out and "calibrate" in out and "skipped" in out
    assert hub.store.commit_count(REPO) == commits + 1


@pytest.mark.slow
def test_pipeline_requantizes_when_exclusions_change_and_skips_present_calibration(make_draft, tmp_path, hub):
    src = make_draft()
    path = write_pipeline(tmp_path, source=str(src), target="example-org/target", push={"enabled": False},
                          calibrate={"data": "some/dataset", "num_samples": 3})
    write_calibration(tmp_path / "work" / "calib", "example-org/target", 3)
    first = run_pipeline(path)
    assert first.stages[0].status == "skipped" and first.stages[0].detail == "present: 3 samples, 12 tokens"
    assert first.stages[1].status == "ran", first.stages[1].detail
    second = run_pipeline(path, ["quantize.exclude=[o_proj]"])
    assert second.stages[1].status == "ran" and "replaced: the exclusions changed" in second.stages[1].detail
    layers = json.loads((first.spec.out / "eagle3_quant.json").read_text())["layers"]
    assert [d["quantized"] for d in layers if d["role"] == "o_proj"] == [False]
    # push disabled: nothing written to the Hub (quantize may read the target's config there, for its depth)
    assert {s.name: s.status for s in second.stages}["push"] == "disabled"
    assert [r for r in hub.requests if r.method not in ("GET", "HEAD")] == []


@pytest.mark.slow
def test_pipeline_stops_before_push_without_validation(make_draft, tmp_path, hub, capsys):
    path = write_pipeline(tmp_path, source=str(make_draft()))
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(path), "--set", "validate.enabled=false"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2
    assert "error: push: " in captured.err and "refusing to publish: no validation report" in captured.err
    assert "not run" not in captured.out and "disabled" in captured.out
    assert hub.requests == []


@pytest.mark.slow
def test_pipeline_push_stage_refuses_an_unmeasured_draft(make_draft, tmp_path, hub, capsys):
    path = write_pipeline(tmp_path, source=str(make_draft()), push={"allow_unvalidated": True})
    with pytest.raises(SystemExit) as exit_info:
        main(["run", str(path), "--set", "validate.enabled=false"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and "never measured" in captured.err
    assert "validate OUT --calib" in captured.err and "push.allow_unmeasured" in captured.err
    assert [r for r in hub.requests if r.method not in ("GET", "HEAD")] == [] and hub.store.repos == {}


@pytest.mark.slow
def test_pipeline_calibrates_with_the_real_stage_then_resumes(tiny_target, tiny_draft, chat_jsonl, tmp_path, hub,
                                                               monkeypatch):
    monkeypatch.setenv("HOME", str(tiny_target.parent))     # a target named from the home folder, as `~/...`
    path = write_pipeline(tmp_path, source=str(tiny_draft), target=f"~/{tiny_target.name}", push={"enabled": False},
                          calibrate={"data": str(chat_jsonl), "num_samples": 5, "seq_len": 48,
                                     "min_tokens": 4})
    first = run_pipeline(path)
    calibrate = first.stages[0]
    assert calibrate.status == "ran" and calibrate.detail.startswith("5 samples, ")
    assert first.stages[1].status == "ran", first.stages[1].detail
    second = run_pipeline(path)
    assert [s.status for s in second.stages[:2]] == ["skipped", "skipped"]
    assert second.stages[0].detail.startswith("present: 5 samples")
    # a shard present but damaged (truncated): judged before the skip, so the set is made again, whole
    shard = first.spec.calib / "shard-00000.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    plan = plan_pipeline(path)
    assert plan.stages[0].status == "would run" and "is damaged (shard-00000.safetensors differs from the sha256" \
        in plan.stages[0].detail and shard.stat().st_size == len(shard.read_bytes())      # the plan touched nothing
    said = Said()
    third = run_pipeline(path, progress=said)
    assert third.stages[0].status == "ran" and third.stages[0].detail.startswith("5 samples, ")
    assert load_calibration(first.spec.calib).shard_problems() == []
    assert third.stages[1].status == "skipped"          # the artifact itself is unchanged
    assert any(line.startswith("[1/5] calibrate: runs (the set in ") and "is damaged" in line for line in said.lines)
    assert hub.requests == []


def test_pipeline_auto_exclude_records_threshold_and_requantizes_when_it_changes(tiny_target, chat_jsonl, tmp_path,
                                                                                 hub):
    import json

    from calib_capture_fixtures import DRAFT, DRAFT_IDS, TARGET

    from fixtures.synthetic import write_synthetic_draft

    # same hidden size as the target, so the draft can borrow the target's embedding for the sensitivity runs
    shape = replace(DRAFT, hidden=TARGET.hidden, head_dim=TARGET.hidden // DRAFT.heads, target_hidden=None)
    tiny_draft = write_synthetic_draft(tmp_path / "draft", shape, aux_layer_ids=DRAFT_IDS)

    calibrate = {"data": str(chat_jsonl), "num_samples": 5, "seq_len": 48, "min_tokens": 4}
    path = write_pipeline(tmp_path, source=str(tiny_draft), target=str(tiny_target), push={"enabled": False},
                          calibrate=calibrate, quantize={"auto_exclude": 0.9},
                          bench={"enabled": False})      # vLLM's engine is the seed pipeline test's
    first = run_pipeline(path)
    assert first.stages[1].status == "ran", first.stages[1].detail
    manifest = json.loads((tmp_path / "work" / "draft-fp8" / "eagle3_quant.json").read_text())
    assert manifest["sensitivity"]["threshold"] == 0.9
    assert run_pipeline(path).stages[1].status == "skipped"
    path = write_pipeline(tmp_path, source=str(tiny_draft), target=str(tiny_target), push={"enabled": False},
                          calibrate=calibrate, quantize={"auto_exclude": 0.8},
                          bench={"enabled": False})
    again = run_pipeline(path)
    assert again.stages[1].status == "ran" and "auto_exclude was 0.9" in again.stages[1].detail


def test_the_served_targets_online_quantization_reaches_calibrate_and_bench(tmp_path):
    from eagle3_quant.pipeline_spec import bench_options, calibrate_options, load_pipeline

    path = write_pipeline(tmp_path, target="org/target", target_quantization="fp8",
                          calibrate={"data": "org/chats", "backend": "vllm"})
    spec = load_pipeline(path)
    assert calibrate_options(spec).target_quantization == "fp8"
    assert bench_options(spec).target_quantization == "fp8"
    with pytest.raises(PipelineSpecError) as refused:        # transformers cannot quantize the target as vLLM does
        load_pipeline(write_pipeline(tmp_path, target="org/target", target_quantization="fp8",
                                     calibrate={"data": "org/chats"}))
    assert refused.value.field == "calibrate.target_quantization"
    with pytest.raises(PipelineSpecError) as unknown:
        load_pipeline(write_pipeline(tmp_path, target="org/target", target_quantization="int3",
                                     calibrate={"data": "org/chats", "backend": "vllm"}))
    assert "int3" in unknown.value.message
