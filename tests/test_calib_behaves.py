"""Calibration that behaves (issue 23): tokens/s and the time left in its progress, `--device`, `--batch-size` and
`--threads` options checked like every other, torch threads that share the machine."""

from __future__ import annotations

import pytest
import torch

from eagle3_quant.calib import threads as share
from eagle3_quant.calib.options import CalibrationOptions
from eagle3_quant.errors import CalibrationDataError, OptionsError
from eagle3_quant.util.progress import Throughput, clock


def test_throughput_counts_tokens_per_second_and_the_time_left():
    counted = Throughput(total=128, done=8, started=100.0)        # 8 prompts captured before a resume
    assert counted.line(now=101.0) == "8/128 prompts"              # nothing timed yet: no rate, no estimate
    counted.add(4, 1000)
    assert counted.tokens_per_s(now=110.0) == 100.0
    assert counted.seconds_left(now=110.0) == 116 * 10 / 4          # 116 prompts at 2.5 s each
    assert counted.line(now=110.0) == "12/128 prompts, 100 tokens/s, 0:04:50 left"
    assert clock(3725) == "1:02:05"


def test_the_cli_progress_prints_rate_and_time_left_in_a_log(monkeypatch, capsys):
    from eagle3_quant.cli import progress as cli_progress

    monkeypatch.setattr(cli_progress, "LINE_EVERY_S", 0.0)
    with cli_progress.TerminalProgress().task("capture", 4, 1) as advance:
        advance(1, 300)
        advance(2, 500)
    lines = capsys.readouterr().err.strip().splitlines()        # stderr is not a terminal here: plain lines
    assert lines[0].startswith("capture: 2/4 prompts, ") and " tokens/s, " in lines[0] and lines[0].endswith(" left")
    assert lines[-1].startswith("capture: 4/4 prompts, ") and lines[-1].endswith("0:00:00 left")


def test_options_check_device_batch_size_and_threads():
    assert CalibrationOptions(device="cuda:1", batch_size=4, threads=2).batch_size == 4
    for field, value in (("device", "gpu"), ("batch_size", 0), ("threads", -1), ("batch_size", 1.5)):
        with pytest.raises((OptionsError, CalibrationDataError)) as caught:
            CalibrationOptions(**{field: value})
        assert caught.value.field == field


def test_a_gpu_device_on_a_machine_without_one_is_refused_in_one_line(monkeypatch):
    from eagle3_quant.calib.target import TargetSpec, load_model

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = TargetSpec("t", 2, 8, 16, "float32", "LlamaForCausalLM")
    with pytest.raises(CalibrationDataError) as caught:
        load_model(spec, "float32", device="cuda:0")
    assert caught.value.field == "device" and "no GPU" in caught.value.message


def test_fair_threads_takes_the_cores_nobody_else_runs_on():
    assert share.fair_threads(16, 0) == 16
    assert share.fair_threads(16, 5) == 11
    assert share.fair_threads(2, 11) == 1                         # at least one
    assert share.fair_threads(8, None) == 8                       # unknown load: every core


def test_thread_share_follows_the_load_unless_fixed(monkeypatch):
    before = torch.get_num_threads()
    load = {"busy": 0}
    monkeypatch.setattr(share, "usable_cores", lambda: 4)
    monkeypatch.setattr(share, "runnable_elsewhere", lambda: load["busy"])
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        shared = share.ThreadShare()
        assert shared.threads == 4 and shared.fixed is None
        load["busy"] = 3
        shared.update()                                           # checked at most every RECHECK_S seconds
        assert shared.threads == 4
        shared.checked -= share.RECHECK_S
        shared.update()
        assert shared.threads == 1 and shared.history == [4, 1]
        assert share.ThreadShare(2).threads == 2                  # --threads 2: kept whatever the load
        torch.set_num_threads(3)
        with share.ThreadShare(1) as one:
            assert one.threads == 1
        assert torch.get_num_threads() == 3                       # the caller's count given back
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert share.ThreadShare().fixed == 3
    finally:
        torch.set_num_threads(before)


def test_runnable_elsewhere_reads_this_machine():
    busy = share.runnable_elsewhere()
    assert busy is None or 0 <= busy < 10_000
