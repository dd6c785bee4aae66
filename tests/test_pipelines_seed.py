"""The seed's pipelines (pipelines/*.yaml) and `calibrate.from_dump`: each parses as `run --dry-run` reads it, each
imports the serving engine's dump so its published draft carries a measured acceptance, and a pipeline that imports
a vLLM dump runs end to end on the tiny pair."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from engine_env import engine_missing
from test_calib_engine_dump import write_dump

from eagle3_quant.cli.run_cmd import flag_overrides
from eagle3_quant.engine_layout import EngineLayout
from eagle3_quant.errors import PipelineSpecError
from eagle3_quant.pipeline import run_pipeline
from eagle3_quant.pipeline_spec import bench_options, calibrate_options, load_pipeline
from eagle3_quant.records.manifest import Manifest

PIPELINES = sorted((Path(__file__).resolve().parents[1] / "pipelines").glob("*.yaml"))
SEED = {"kimi-k2.5-eagle3-fp8": ("lightseekorg/kimi-k2.5-eagle3", "moonshotai/Kimi-K2.5"),
        "kimi-k2.5-eagle3-mla-fp8": ("lightseekorg/kimi-k2.5-eagle3-mla", "moonshotai/Kimi-K2.5"),
        "minimax-m2.5-eagle3-fp8": ("thoughtworks/MiniMax-M2.5-Eagle3", "MiniMaxAI/MiniMax-M2.5")}


SPLIT = {"kimi-k2.5-eagle3-fp8"}          # the seed's deployment: tensor parallel 8 with expert parallelism


def test_the_seed_pipelines_are_all_there():
    assert set(SEED) <= {p.stem for p in PIPELINES}


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.stem)
def test_every_pipeline_parses_as_run_dry_run_reads_it(path):
    target = yaml.safe_load(path.read_text())["target"]
    if target.startswith("~") and not Path(target).expanduser().is_dir():
        pytest.skip(f"{target} is made by `make real-pair`, not run here")
    spec = load_pipeline(path, flag_overrides(repo_id=f"alice/{path.stem}"))
    assert spec.push.repo_id == f"alice/{path.stem}" and spec.out == Path(spec.workdir) / "draft-fp8"
    assert load_pipeline(path, flag_overrides(no_push=True)).push.repo_id.startswith("ORG/")   # left to fill in
    if path.stem in SEED:
        assert (spec.source, spec.target) == SEED[path.stem] and spec.scheme == "ptpc_fp8"
        assert spec.workdir == f"runs/{path.stem}"
        # calibration comes from the serving engine, so validate measures acceptance and the card carries it
        assert spec.validate.enabled
        if path.stem in SPLIT:        # the target runs split in vLLM, as it is served; bench splits it the same way
            layout = EngineLayout(tensor_parallel_size=8, enable_expert_parallel=True)
            assert spec.calibrate.backend == "vllm" and spec.calibrate.data and spec.calibrate.from_dump is None
            assert calibrate_options(spec).layout() == layout
            assert bench_options(spec).layout().llm_kwargs() == {**layout.llm_kwargs(), "trust_remote_code": True}
        else:                         # imported from a dump vLLM wrote
            assert spec.calibrate.from_dump == f"runs/{path.stem}/vllm-dump" and spec.calibrate.format == "vllm"
            assert spec.calibrate.data is None


def write_pipeline(tmp_path: Path, **calibrate) -> Path:
    data = {"pipeline_version": 1, "source": "org/draft", "target": "org/target", "workdir": str(tmp_path / "w"),
            "push": {"enabled": False}, "calibrate": calibrate}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("calibrate, message", [
    ({"data": "d.jsonl", "from_dump": "dump"}, "field 'calibrate.from_dump': set either data"),
    ({"from_dump": "dump", "format": "pickle"}, "field 'calibrate.format': 'pickle' is not one of auto, calibration"),
    ({"from_dump": "dump", "dump_layer_ids": "2,30"}, "field 'calibrate.dump_layer_ids': '2,30' is not a list"),
])
def test_from_dump_fields_are_checked(tmp_path, calibrate, message):
    with pytest.raises(PipelineSpecError) as info:
        load_pipeline(write_pipeline(tmp_path, **calibrate))
    assert message in str(info.value)


def test_from_dump_needs_the_target_and_satisfies_calibrated_options(tmp_path):
    path = write_pipeline(tmp_path, from_dump="dump")
    raw = yaml.safe_load(path.read_text())
    raw.pop("target")
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(PipelineSpecError, match="field 'target': importing a dump reads the target's config"):
        load_pipeline(path)
    spec = load_pipeline(write_pipeline(tmp_path, from_dump="dump", dump_layer_ids=[2, 30, 58, 61]),
                         ["scheme=fp8", "quantize.auto_exclude=0.02"])      # both need a calibration set
    assert spec.calibrate.dump_layer_ids == (2, 30, 58, 61) and spec.scheme == "fp8"


@pytest.mark.slow
def test_pipeline_imports_a_vllm_dump_and_validates_with_it(tmp_path):
    """The tiny real pair: a vLLM dump of the target's greedy continuations (include_output_tokens: the prompt and
    the generated tokens but the last) at every candidate's layers is imported by the pipeline, quantize serves the
    trained layers (measured on it), and validate measures acceptance on it."""
    import torch
    from safetensors.torch import load_file
    from tiny_pair_fixtures import PAIR, TinyPair

    from eagle3_quant.reading.draft import read_draft
    from eagle3_quant.taps.capture import capture_taps

    target = TinyPair(PAIR / "target", PAIR / "draft", None, None, None).load_target()
    layers = len(target.model.layers)
    taps = capture_taps(read_draft(PAIR / "draft").config, layers, "vllm").indices     # [0, 1, 2, 3]
    prompts = load_file(PAIR / "heldout_prompts.safetensors")["prompts"].long()[:6, :24]
    with torch.no_grad():
        full = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=24, do_sample=False,
                               pad_token_id=0)
    dump = write_dump(tmp_path / "dump", target, [row[:-1] for row in full], (*taps, layers))
    data = {"pipeline_version": 1, "source": str(PAIR / "draft"), "target": str(PAIR / "target"),
            "workdir": str(tmp_path / "w"), "push": {"enabled": False},
            "calibrate": {"from_dump": str(dump), "format": "vllm"},
            # 6 samples: a wide interval; top-1 over ~150 positions in bf16 (vLLM's numerics) moves by a few flips
            "validate": {"gates": {"min_acceptance_ratio": 0.9, "min_top1_agreement": 0.8}},
            "bench": {"num_prompts": 4, "max_tokens": 16}}             # vLLM's engine on the set's prompts
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    first = run_pipeline(path)
    status = {s.name: s for s in first.stages}
    assert status["calibrate"].status == "ran" and "6 samples" in status["calibrate"].detail
    assert status["quantize"].status == "ran" and status["validate"].status == "ran", status["validate"].detail
    from eagle3_quant.records.validation_report import read_validation

    report = read_validation(first.spec.out)
    assert report.passed and report.metrics.acceptance_ratio > 0.9     # measured on the imported set
    served = Manifest.read(first.spec.out).serve_taps
    assert served.served == [1, 2, 3] and {m.name for m in served.measured} == {"trained=sglang", "vllm"}
    assert {m.name for m in report.taps_measured} == {"trained=vllm=vllm_v2=sglang", "source:vllm"}   # the artifact's
    missing = engine_missing()
    if missing:
        assert status["bench"].status == "skipped" and status["bench"].detail.startswith("no engine: ")
    else:
        assert status["bench"].status == "ran" and "acceptance ratio" in status["bench"].detail, status["bench"]
        assert "engine_run" in (first.spec.out / "validation.json").read_text()
    again = {s.name: s for s in run_pipeline(path).stages}
    assert again["calibrate"].status == "skipped" and "imported from" in again["calibrate"].detail
    assert missing or (again["bench"].status == "skipped" and "present" in again["bench"].detail)
