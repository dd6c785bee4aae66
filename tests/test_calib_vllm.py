"""`calibrate --backend vllm`: the target in vLLM's real engine (its CPU build here) gives the set the transformers
backend gives (tokens identical, states within bf16 tolerance, the same acceptance under `validate`); bad input, an
engine crash, a timeout and Ctrl-C get one line (exit 2, 130), leave no OUT and no engine process; a killed run
resumes with only the prompts the engine had not finished.

The failure and resume cases run a stand-in engine (a script given as --engine-python that answers the probe and
then hangs, crashes or writes export files): they test the parent's handling without engine time. The values come
from vLLM itself (slow tests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tiny_pair_fixtures import PAIR, fixture_module
from validate_helpers import copy_artifact

from eagle3_quant.calib.api import calibrate_target
from eagle3_quant.calib.vllm_capture import export_dir
from eagle3_quant.cli import main
from eagle3_quant.engines import environment
from eagle3_quant.errors import CalibrationDataError, EngineNotFoundError, OptionsError
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.util.progress import SILENT

TARGET, DRAFT = PAIR / "target", PAIR / "draft"
SMALL = {"num_samples": 4, "seq_len": 96, "generate_tokens": 16}
BF16_TOLERANCE = 2.0 ** -8          # relative: bf16 keeps 8 significant bits


@pytest.fixture(scope="module")
def heldout_text(tmp_path_factory) -> Path:
    """Text rows from the tiny pair's held-out files (never seen by its tokenizer, target or draft)."""
    corpus = fixture_module("tiny_corpus")
    texts = corpus.read_texts(corpus.Corpus.stdlib().heldout_files)
    path = tmp_path_factory.mktemp("data") / "heldout.jsonl"
    path.write_text("".join(json.dumps({"text": t[i:i + 600]}) + "\n" for t in texts for i in range(0, 3000, 1000)))
    return path


STAND_IN = """\
#!{python}
import json, os, sys, time
entry, request_path, result_path = sys.argv[1:4]
if entry.endswith("probe_child.py"):
    json.dump({{"vllm": {{"distribution": "vllm", "version": "0.0+stand-in"}}, "torch": "2", "device": "cpu (stand-in)",
               "python": "3"}}, open(result_path, "w"))
    sys.exit(0)
open({pids!r}, "a").write(f"{{os.getpid()}}\\n")
mode = {mode!r}
request = json.load(open(request_path))
if mode == "hang":
    time.sleep(600)
if mode == "crash":
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "vllm/v1/engine/core.py", line 1, in step', file=sys.stderr)
    print("RuntimeError: CUDA error: an illegal memory access was encountered", file=sys.stderr)
    sys.exit(1)
import torch
from safetensors.torch import save_file
open({asked!r}, "a").write(json.dumps(request["samples"]) + "\\n")
for sample, prompt in zip(request["samples"], request["prompts"]):      # vLLM's files, made up
    output = [1 + (prompt[-1] + k) % 1000 for k in range(1, request["max_tokens"] + 1)]     # never the EOS (0)
    ids = torch.tensor(prompt + output[:-1])
    states = torch.randn(len(ids), len(request["layer_ids"]), 128, generator=torch.Generator().manual_seed(sample))
    base = os.path.join(request["dump"], f"{{sample:06d}}")
    save_file({{"hidden_states": states, "token_ids": ids}}, base + ".safetensors")
    json.dump({{"prompt_next": prompt[1:], "output": output}}, open(base + ".json", "w"))
    if mode == "die-after-one":
        os.kill(os.getpid(), 9)
json.dump({{"generate_s": 0.5, "workarounds": {{}}}}, open(result_path, "w"))
"""


def stand_in(tmp_path: Path, mode: str) -> tuple[Path, Path, Path]:
    """An executable that passes for an engine Python: (its path, the file of its pids, the file of the samples
    each run was asked for)."""
    pids, asked = tmp_path / f"{mode}.pids", tmp_path / f"{mode}.asked"
    path = tmp_path / f"engine-{mode}"
    path.write_text(STAND_IN.format(python=sys.executable, pids=str(pids), asked=str(asked), mode=mode))
    path.chmod(0o755)
    return path, pids, asked


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def cli(out: Path, data: Path, *extra: str) -> list[str]:
    return ["calibrate", str(out), "--target", str(TARGET), "--draft", str(DRAFT), "--data", str(data),
            "--num-samples", "4", "--seq-len", "96", "--generate-tokens", "16", "--backend", "vllm", *extra]


def refused(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines[-1].startswith("error: ") and sum(x.startswith("error: ") for x in lines) == 1, err
    assert "Traceback" not in err
    return lines[-1]


def test_no_engine_environment_is_refused_before_any_work(tmp_path, heldout_text, capsys, monkeypatch):
    monkeypatch.delenv(environment.ENV_VAR, raising=False)
    line = refused(cli(tmp_path / "cal", heldout_text, "--engine-python", str(tmp_path / "nowhere" / "python")),
                   capsys)
    assert str(tmp_path / "nowhere") in line and "make setup-engine" in line and "--engine-python" in line
    monkeypatch.setattr(environment, "project_engine_python", lambda: tmp_path / ".venv-engine" / "bin" / "python")
    with pytest.raises(EngineNotFoundError, match="no engine environment.*make setup-engine.*--engine-python"):
        calibrate_target(TARGET, DRAFT, heldout_text, tmp_path / "cal", backend="vllm", **SMALL)
    assert not (tmp_path / "cal").exists() and not export_dir(tmp_path / "cal").exists()


@pytest.mark.parametrize(("field", "value", "backend"), [
    ("backend", "sglang", "vllm"), ("tensor_parallel_size", 8, "transformers"), ("tensor_parallel_size", 0, "vllm"),
    ("engine_args", {"speculative_config": {}}, "vllm"), ("max_memory", {0: "10GiB"}, "vllm"),
    ("engine_timeout", 0, "vllm")])
def test_engine_options_are_checked(tmp_path, heldout_text, field, value, backend):
    options = {"backend": backend, field: value}
    with pytest.raises((CalibrationDataError, OptionsError), match=field):     # the layout's own: OptionsError
        calibrate_target(TARGET, DRAFT, heldout_text, tmp_path / "cal", **options, **SMALL)
    assert not (tmp_path / "cal").exists()


@pytest.mark.parametrize(("mode", "timeout", "expected"), [
    ("crash", "60", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    ("die-after-one", "60", "was killed by SIGKILL"),
    ("hang", "8", "did not finish within 8 s (its processes were ended)")])
def test_engine_crash_and_timeout_one_line_no_out_no_process(tmp_path, heldout_text, capsys, mode, timeout,
                                                            expected):
    engine, pids, _ = stand_in(tmp_path, mode)
    out = tmp_path / "cal"
    line = refused(cli(out, heldout_text, "--engine-python", str(engine), "--engine-timeout", timeout), capsys)
    assert expected in line and line.startswith("error: vLLM (vllm 0.0+stand-in)"), line
    log = export_dir(out) / "engine.log"
    assert line.endswith(f"(the engine's last log lines: {log})")
    assert mode != "crash" or "Traceback" in log.read_text() and expected in log.read_text()
    assert not out.exists()
    assert [alive(int(pid)) for pid in pids.read_text().split()] == [False]


def test_ctrl_c_ends_the_engine_and_exits_130(tmp_path, heldout_text):
    engine, pids, _ = stand_in(tmp_path, "hang")
    out = tmp_path / "cal"
    proc = subprocess.Popen([sys.executable, "-c", "from eagle3_quant.cli import main; main()",
                             *cli(out, heldout_text, "--engine-python", str(engine))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted: nothing half-written was kept" and "Traceback" not in err
    assert not out.exists() and not alive(int(pids.read_text().split()[0]))


def test_a_killed_engine_run_resumes_with_the_prompts_it_had_not_finished(tmp_path, heldout_text, capsys):
    out = tmp_path / "cal"
    dying, _, asked_first = stand_in(tmp_path, "die-after-one")
    refused(cli(out, heldout_text, "--engine-python", str(dying)), capsys)
    assert sorted(p.name for p in export_dir(out).iterdir()) == ["000000.json", "000000.safetensors", "engine.log",
                                                                 "export.json"]
    finishing, _, asked_then = stand_in(tmp_path, "finish")
    main_exit = None
    try:
        main(cli(out, heldout_text, "--engine-python", str(finishing)))
    except SystemExit as exc:
        main_exit = exc.code
    assert main_exit in (0, None), capsys.readouterr().err
    assert json.loads(asked_first.read_text()) == [0, 1, 2, 3] and json.loads(asked_then.read_text()) == [1, 2, 3]
    assert not export_dir(out).exists()
    calib = load_calibration(out)
    assert calib.info.extra["capture_backend"] == "vllm" and calib.info.extra["capture_engine"] == "vllm 0.0+stand-in"
    for i, sample in enumerate(calib.samples()):
        prompt_len = sample.generated_from
        layers = len(calib.info.aux_layer_ids)          # every candidate's layers: vLLM's [0, 1, 2], trained [1, 2, 3]
        made_up = torch.randn(prompt_len + 16, layers, 128, generator=torch.Generator().manual_seed(i))
        assert torch.equal(sample.aux_hidden_states, made_up.reshape(prompt_len + 16, layers * 128))
        continuation = sample.input_ids[prompt_len:].tolist()
        last = int(sample.input_ids[prompt_len - 1])
        made_up = [1 + (last + k) % 1000 for k in range(1, 18)]
        assert continuation == made_up[:16] and sample.target_next_ids[prompt_len - 1:].tolist() == made_up


@pytest.fixture(scope="module")
def both_sets(heldout_text, tmp_path_factory):
    """The same prompts captured by each backend (float32, the tiny target's dtype), and each run's result."""
    root = tmp_path_factory.mktemp("backends")
    results = {backend: calibrate_target(TARGET, DRAFT, heldout_text, root / backend, backend=backend, **SMALL)
               for backend in ("transformers", "vllm")}
    return {backend: load_calibration(root / backend) for backend in results}, results


@pytest.mark.slow
def test_vllm_backend_set_equals_the_transformers_set(both_sets):
    sets, results = both_sets
    ours, engine = sets["transformers"], sets["vllm"]
    assert ours.info.differences(engine.info) == ["extra.capture_backend", "extra.capture_engine",
                                                  "extra.engine_layout"]
    assert engine.info.extra["engine_layout"]["tensor_parallel_size"] == 1
    assert engine.info.aux_layer_ids == (0, 1, 2, 3) and engine.info.extra["engine_aux_layer_ids"] == [0, 1, 2]
    assert results["vllm"].generated_tokens == results["transformers"].generated_tokens == 4 * 16
    worst = 0.0
    for a, b in zip(ours.samples(), engine.samples(), strict=True):
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.target_next_ids, b.target_next_ids)
        assert a.generated_from == b.generated_from and b.aux_hidden_states.dtype == torch.float32
        scale = a.aux_hidden_states.abs().amax(dim=-1, keepdim=True)
        worst = max(worst, float(((a.aux_hidden_states - b.aux_hidden_states).abs() / scale).max()))
    assert worst < BF16_TOLERANCE, worst


@pytest.mark.slow
def test_a_target_split_over_two_processes_captures_the_same_set(both_sets, heldout_text, tmp_path):
    """`calibrate --backend vllm --tensor-parallel-size 2`: the hidden-states connector runs in vLLM's worker
    processes, where the synchronous write (no pinned memory on the CPU platform) reaches it through vLLM's plugin
    entry point; rank 0 writes. The same prompts, continuations and next tokens as one process; states within
    fp32 rounding of a split sum (measured: largest difference 9.6e-7 of each position's largest state)."""
    sets, _ = both_sets
    said = []
    progress = SimpleNamespace(say=said.append, task=SILENT.task)
    result = calibrate_target(TARGET, DRAFT, heldout_text, tmp_path / "tp2", backend="vllm", tensor_parallel_size=2,
                              progress=progress, **SMALL)
    said = "\n".join(said)
    assert "vLLM workaround synchronous_write in rank 0: no pinned memory" in said and "tensor parallel 2" in said
    split, single = load_calibration(result.path), sets["vllm"]
    assert single.info.differences(split.info) == ["extra.engine_layout"]
    assert split.info.extra["engine_layout"]["tensor_parallel_size"] == 2
    worst = 0.0
    for a, b in zip(single.samples(), split.samples(), strict=True):
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.target_next_ids, b.target_next_ids)
        scale = a.aux_hidden_states.abs().amax(dim=-1, keepdim=True)
        worst = max(worst, float(((a.aux_hidden_states - b.aux_hidden_states).abs() / scale).max()))
    print(f"largest difference: {worst:.2e} of each position's largest state")
    assert worst < BF16_TOLERANCE, worst


@pytest.mark.slow
def test_validate_accepts_the_vllm_set_with_the_same_acceptance(both_sets, tiny_pair, tmp_path):
    sets, _ = both_sets
    from eagle3_quant.validate.api import validate_draft

    reports = {backend: validate_draft(copy_artifact(tiny_pair.fp8, tmp_path / backend), reference=tiny_pair.draft,
                                       calib=calib.path, kernel=False, vllm=False, sglang=False)
               for backend, calib in sets.items()}
    ours, engine = reports["transformers"].metrics, reports["vllm"].metrics
    assert engine.drafts == ours.drafts > 0
    assert engine.acceptance_length_bf16 == pytest.approx(ours.acceptance_length_bf16, abs=1e-9)
    low, high = ours.acceptance_ratio_interval
    assert low <= engine.acceptance_ratio <= high
    assert reports["vllm"].calibration["samples"] == 4
