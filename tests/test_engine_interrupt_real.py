"""Ctrl-C in the middle of a real engine run: `bench` on the tiny pair in vLLM's CPU build (``make setup-engine``) is
interrupted while vLLM's engine child is loading or serving. The command exits 130, no process it started is alive
afterwards, and nothing of it (the child's folder, vLLM's ``vllm_dist_*`` files) is left in the temp folder."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
from engine_env import needs_engine
from tiny_pair_fixtures import PAIR

pytestmark = [pytest.mark.slow, needs_engine]
ENGINE_RUNNING_S = 8      # how long vLLM's child has run when Ctrl-C comes (it is importing vLLM or loading then)


def descendants(proc: psutil.Process, seen: dict[int, float]) -> bool:
    """Record every descendant (pid -> start time); True when vLLM's serving child is among them."""
    engine = False
    for child in proc.children(recursive=True):
        try:
            seen[child.pid] = child.create_time()
            engine = engine or any("serve_child.py" in part for part in child.cmdline())
        except psutil.Error:
            continue
    return engine


def still_alive(pid: int, started: float) -> bool:
    try:
        process = psutil.Process(pid)
        return process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_ctrl_c_during_a_real_engine_run_leaves_no_process_and_no_temp_file(tiny_pair, tmp_path):
    artifact = shutil.copytree(tiny_pair.fp8, tmp_path / "artifact")
    temp = tmp_path / "temp"
    temp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from eagle3_quant.cli import main; main()", "bench", str(artifact),
         "--target", str(PAIR / "target"), "--reference", str(PAIR / "draft"),
         "--prompts", str(PAIR / "heldout_prompts.safetensors"), "--num-prompts", "2", "--max-tokens", "4",
         "--no-predict"],
        env={**os.environ, "TMPDIR": str(temp)}, stderr=subprocess.PIPE, text=True)
    seen: dict[int, float] = {}
    engine_since = None
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if descendants(psutil.Process(proc.pid), seen) and engine_since is None:
            engine_since = time.monotonic()
        if engine_since is not None and time.monotonic() - engine_since > ENGINE_RUNNING_S:
            break
        time.sleep(0.2)
    assert proc.poll() is None and engine_since is not None, f"vLLM's child never ran: {proc.stderr.read()}"

    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=180)[1]
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted: nothing half-written was kept", err
    assert len(seen) >= 1
    assert [pid for pid, started in seen.items() if still_alive(pid, started)] == []
    assert sorted(p.name for p in temp.iterdir()) == []
    assert not (artifact / "bench.json").exists()
