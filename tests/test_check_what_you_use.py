"""What is scanned is what is used, and one writer per OUT.

Races are made deterministic: a hook replaces (or rewrites) the source shard right after the real safety scan
returned, i.e. while the rest of `quantize` (Quark included) runs on it; and the writer lock is held by the test
(as a first run would hold it) while a second, real `eagle3-quant quantize` process tries OUT.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from eagle3_quant.errors import CheckpointFileError, OutputExistsError
from eagle3_quant.quantize import api as quantize_api
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.util.hashing import sha256_file
from eagle3_quant.util.outdir import claimed_output
from eagle3_quant.util.outlock import lock_path
from fixtures.synthetic import write_synthetic_draft

CLI = [sys.executable, "-c", "from eagle3_quant.cli import main; main()"]


def swap_after_scan(monkeypatch, shard: Path, replacement: Path, in_place: bool) -> None:
    real_scan = quantize_api.scan_source

    def scan_then_swap(draft):
        digests = real_scan(draft)
        if in_place:   # same inode, same size, other bytes
            with shard.open("r+b") as fh:
                fh.seek(-64, os.SEEK_END)
                fh.write(replacement.read_bytes()[-64:])
        else:          # a new file renamed over the shard, as an editor or a sync tool would
            os.replace(replacement, shard)
        return digests

    monkeypatch.setattr(quantize_api, "scan_source", scan_then_swap)


@pytest.mark.parametrize("in_place", [False, True], ids=["replaced", "rewritten"])
def test_shard_swapped_after_the_scan_is_refused(tmp_path, monkeypatch, in_place):
    src = write_synthetic_draft(tmp_path / "src", "tiny", seed=0)
    other = write_synthetic_draft(tmp_path / "other", "tiny", seed=1) / "model.safetensors"
    shard = src / "model.safetensors"
    assert shard.stat().st_size == other.stat().st_size and sha256_file(shard) != sha256_file(other)
    swap_after_scan(monkeypatch, shard, other, in_place)
    out = tmp_path / "out"
    with pytest.raises(CheckpointFileError, match="changed while it was being quantized") as info:
        quantize_draft(src, out, device="cpu")
    assert info.value.path == str(shard)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "src"]


def test_side_file_added_after_the_scan_is_refused(tmp_path, monkeypatch):
    """It would be copied into OUT without being hashed into the manifest's inputs."""
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    real_scan = quantize_api.scan_source

    def scan_then_add(draft):
        digests = real_scan(draft)
        (src / "tokenizer.json").write_text("{}\n")
        return digests

    monkeypatch.setattr(quantize_api, "scan_source", scan_then_add)
    with pytest.raises(CheckpointFileError, match="changed while it was being quantized") as info:
        quantize_draft(src, tmp_path / "out", device="cpu")
    assert info.value.path == str(src / "tokenizer.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_calibration_writer_refuses_non_finite_states(tmp_path):
    import torch

    from eagle3_quant.errors import DraftFormatError
    from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter

    writer = CalibrationWriter(tmp_path / "cal", CalibrationInfo("org/t", (1, 2, 3), 4))
    states = torch.zeros(5, 12)
    states[2, 3] = float("inf")
    ids = torch.arange(5)
    with pytest.raises(DraftFormatError, match=r"sample 0: field 'aux_hidden_states'.*1 NaN/Inf"):
        writer.add(CalibrationSample(ids, states, ids))


def test_manifest_inputs_are_the_bytes_used(tmp_path):
    src = write_synthetic_draft(tmp_path / "src", "tiny", shards=2)
    result = quantize_draft(src, tmp_path / "out", device="cpu")
    recorded = {entry.path: entry.sha256 for entry in result.manifest.inputs}
    assert recorded == {p.name: sha256_file(p) for p in src.iterdir()}
    assert not lock_path(result.output).exists()


def test_second_writer_without_force_is_refused_while_the_first_holds_out(tmp_path, capsys):
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    out = tmp_path / "out"
    with claimed_output(out, force=False):           # the first run has claimed OUT, not yet written it
        with ThreadPoolExecutor(1) as other_thread:     # claims nest within one thread only
            attempt = other_thread.submit(quantize_draft, src, out, device="cpu")
            with pytest.raises(OutputExistsError, match=rf"another eagle3-quant run \(pid {os.getpid()}\)"):
                attempt.result(timeout=120)
        run = subprocess.run([*CLI, "quantize", str(src), str(out), "--device", "cpu"], capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert f"another eagle3-quant run (pid {os.getpid()}) is writing this folder" in run.stderr
    assert not out.exists()
    assert not lock_path(out.resolve()).exists()


def test_writers_with_force_are_serialized(tmp_path):
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    out = tmp_path / "out"
    with claimed_output(out, force=False):
        proc = subprocess.Popen([*CLI, "quantize", str(src), str(out), "--device", "cpu", "--force"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(8)                              # it would have staged its output by now, were it not waiting
        assert proc.poll() is None
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.partial")] == []
        assert not out.exists()
        (out).mkdir()                              # what the first run put in place
        (out / "first.txt").write_text("first run\n")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    manifest = Manifest.read(out)
    assert not (out / "first.txt").exists()          # replaced whole, never mixed
    assert {e.path: e.sha256 for e in manifest.outputs} == \
        {p.name: sha256_file(p) for p in out.iterdir() if p.name != "eagle3_quant.json" and p.name[0] != "."}


def test_two_real_writers_on_one_out(tmp_path):
    """Started together without --force: exactly one writes OUT, the other is refused in one line."""
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    out = tmp_path / "out"
    procs = [subprocess.Popen([*CLI, "quantize", str(src), str(out), "--device", "cpu"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=400), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert refused.startswith("error: ") and refused.count("\n") == 1
    assert "another eagle3-quant run" in refused or "already exists" in refused
    manifest = Manifest.read(out)
    assert {e.path: e.sha256 for e in manifest.outputs} == \
        {p.name: sha256_file(p) for p in out.iterdir() if p.name != "eagle3_quant.json" and p.name[0] != "."}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]
