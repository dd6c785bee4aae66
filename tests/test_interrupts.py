"""Ctrl-C, SIGTERM and SIGKILL in the middle of Quark writing: no partial OUT, and a re-run completes.

The real CLI runs in subprocesses on a ~70 MB draft in 6 shards; each is signalled as soon as the first
quantized shard appears in its hidden staging folder (with a 150 MB draft that moment came 2.5 s before
the output would have been renamed into place).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from corpus.builders import tiny, tree_state

from eagle3_quant.cli import main
from eagle3_quant.errors import QuantizationError
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.util.hashing import sha256_file
from eagle3_quant.util.interrupts import handling_interrupts, requested
from eagle3_quant.util.outdir import staged_output
from fixtures.synthetic import DraftShape, write_synthetic_draft

MID_SIZE = DraftShape(1024, 6144, 8, 2, 128, 32000, 8000, target_layers=32)
# name -> (signal, sent when the staging folder holds a shard file (mid-write) or as soon as it exists)
SIGNALS = {"sigint": (signal.SIGINT, "*.safetensors"), "sigkill": (signal.SIGKILL, "*.safetensors"),
           "sigterm": (signal.SIGTERM, "")}


def start(src, out):
    return subprocess.Popen([sys.executable, "-c", "from eagle3_quant.cli import main; main()", "quantize",
                             str(src), str(out), "--device", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def signal_runs(runs: dict, timeout: float = 400) -> dict:
    """Signal each run at its moment (see SIGNALS); returns name -> (returncode, stderr)."""
    pending, deadline = dict(runs), time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for name, (proc, out) in list(pending.items()):
            if proc.poll() is not None:
                pytest.fail(f"{name}: finished before it could be signalled: {proc.stderr.read()}")
            staging = out.parent / f".{out.name}.partial-{proc.pid}"
            sig, pattern = SIGNALS[name]
            if staging.is_dir() and (not pattern or any(staging.glob(pattern))):
                assert not out.exists()
                proc.send_signal(sig)
                del pending[name]
        time.sleep(0.002)
    assert not pending, f"never reached Quark's write: {sorted(pending)}"
    results = {}
    for name, (proc, _) in runs.items():
        _, err = proc.communicate(timeout=120)
        results[name] = (proc.returncode, err)
    return results


@pytest.mark.slow
def test_signals_during_quantize_leave_no_partial_out_and_rerun_completes(tmp_path):
    src = write_synthetic_draft(tmp_path / "src", MID_SIZE, shards=6)
    source_before = tree_state(src)
    runs = {}
    for name in SIGNALS:
        (tmp_path / name).mkdir()
        runs[name] = (start(src, tmp_path / name / "out"), tmp_path / name / "out")
    results = signal_runs(runs)

    for name in ("sigint", "sigterm"):
        code, err = results[name]
        assert code == 130, (name, err)
        assert err.strip().splitlines()[-1] == "interrupted: nothing half-written was kept", err
        assert "Traceback" not in err
        assert list((tmp_path / name).iterdir()) == [], name   # no OUT, no hidden staging or scratch folder
    code, _ = results["sigkill"]
    assert code == -signal.SIGKILL
    leftovers = sorted(p.name for p in (tmp_path / "sigkill").iterdir())
    pid = runs["sigkill"][0].pid
    # hidden; OUT never appeared; the writer lock file stays too (unlocked: the kernel dropped the lock)
    assert leftovers == [".out.lock", f".out.partial-{pid}", f".out.partial-input-{pid}"]
    assert tree_state(src) == source_before

    for name in ("sigkill", "sigint"):   # re-running completes; a SIGKILLed run's leftovers go as stale
        out = quantize_draft(src, tmp_path / name / "out", device="cpu").output
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["out"]
        for entry in Manifest.read(out).outputs:
            assert sha256_file(out / entry.path) == entry.sha256
    assert tree_state(src) == source_before


def swallow_an_interrupt() -> None:
    """What some library code does: the KeyboardInterrupt raised by Ctrl-C is caught and lost."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        pass


def test_a_swallowed_interrupt_never_puts_out_in_place(tmp_path):
    src = tiny(tmp_path)
    before = tree_state(tmp_path)
    with handling_interrupts(), pytest.raises(KeyboardInterrupt):
        with staged_output(tmp_path / "out", src) as staging:
            (staging / "model.safetensors").write_bytes(b"complete")
            swallow_an_interrupt()
    assert tree_state(tmp_path) == before


def test_an_interrupt_turned_into_an_error_exits_130(tmp_path, monkeypatch, capsys):
    import eagle3_quant.quantize.api as api

    def interrupted(*args, **kwargs):
        swallow_an_interrupt()
        raise QuantizationError("Quark file-to-file quantization failed: could not determine the shape")

    monkeypatch.setattr(api, "quantize_draft", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        main(["quantize", str(tiny(tmp_path)), str(tmp_path / "out")])
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "interrupted: nothing half-written was kept\n"
    assert not requested()   # nothing carried over to later work in this process
