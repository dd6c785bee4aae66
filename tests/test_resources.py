"""Memory and disk: the probes, the estimates, and refusal before any tensor is read."""

from __future__ import annotations

import errno
import os

import pytest
from corpus.builders import SINGLE, pickle_draft, tiny, tree_state

from eagle3_quant.errors import QuantizationError, ResourceError
from eagle3_quant.plan import make_plan
from eagle3_quant.quantize import checks
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.quantize.checks import QUARK_BASE_BYTES, peak_memory_bytes
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.safetensors_header import TensorInfo
from eagle3_quant.schemes import get_scheme
from eagle3_quant.util import resources
from eagle3_quant.util.outdir import is_disk_full, staged_output


def test_memory_probe_reads_this_machine():
    available = resources.available_memory_bytes()
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert available is not None and 0 < available <= total


def test_disk_probe_walks_up_to_an_existing_folder(tmp_path):
    free, probe = resources.free_disk_bytes(tmp_path / "not" / "yet" / "there")
    assert probe == tmp_path and free == os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize


@pytest.mark.parametrize("shards", [1, 3])
def test_peak_estimate_is_the_largest_shard_plus_float32_working_copies(tmp_path, shards):
    draft = read_draft(tiny(tmp_path, shards=shards))
    quantized = {d.module + ".weight" for d in make_plan(draft, get_scheme("ptpc_fp8")).quantized}
    per_file: dict = {}
    for name, info in draft.checkpoint.tensors.items():
        size, work = per_file.get(info.file, (0, 0))
        per_file[info.file] = (size + info.nbytes, max(work, 8 * info.numel if name in quantized else 0))
    expected = QUARK_BASE_BYTES + max(size + work for size, work in per_file.values())
    assert peak_memory_bytes(draft, quantized, per_shard=True)[0] == expected
    whole = QUARK_BASE_BYTES + draft.checkpoint.total_bytes + 8 * 160 * 64   # largest quantized: 160 x 64
    assert peak_memory_bytes(draft, quantized, per_shard=False)[0] == whole


def test_refused_before_any_tensor_is_read(tmp_path, monkeypatch):
    src = tiny(tmp_path)

    def no_reading(*args, **kwargs):
        raise AssertionError("a tensor was read before the resource check")

    monkeypatch.setattr(TensorInfo, "load", no_reading)          # every tensor read goes through it
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: 500 * 10**6)
    with pytest.raises(ResourceError, match=r"needs about 0\.60 GB of memory, 0\.50 GB available"):
        quantize_draft(src, tmp_path / "out", device="cpu")
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: 10**12)
    monkeypatch.setattr(resources, "free_disk_bytes", lambda folder: (50_000, folder))
    with pytest.raises(ResourceError, match=r"needs 0\.12 MB of free disk, 0\.05 MB available"):
        quantize_draft(src, tmp_path / "out", device="cpu")


def test_thresholds_pass_when_there_is_room(tmp_path, monkeypatch):
    draft = read_draft(tiny(tmp_path))
    quantized = {d.module + ".weight" for d in make_plan(draft, get_scheme("ptpc_fp8")).quantized}
    need, _ = peak_memory_bytes(draft, quantized, per_shard=True)
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: need)
    monkeypatch.setattr(resources, "free_disk_bytes", lambda folder: (int(200_000 * resources.DISK_MARGIN), folder))
    checks.check_resources(draft, tmp_path / "out", 200_000, quantized)
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: need - 1)
    with pytest.raises(ResourceError):
        checks.check_resources(draft, tmp_path / "out", 200_000, quantized)


def test_pickle_conversion_is_checked_for_room_first(tmp_path, monkeypatch):
    src = pickle_draft(tmp_path)
    before = tree_state(tmp_path)
    monkeypatch.setattr(resources, "free_disk_bytes", lambda folder: (1000, folder))
    with pytest.raises(ResourceError, match="converting the pickle weights to safetensors"):
        quantize_draft(src, tmp_path / "out", device="cpu", allow_pickle=True)
    assert tree_state(tmp_path) == before


def test_disk_full_is_recognised_through_wrappers():
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    wrapped = QuantizationError("Quark failed: Error while serializing: I/O error: No space left on device (os "
                                "error 28)")
    assert is_disk_full(wrapped)
    try:
        try:
            raise OSError(errno.ENOSPC, "full")
        except OSError as inner:
            raise RuntimeError("write failed") from inner
    except RuntimeError as outer:
        assert is_disk_full(outer)
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(KeyboardInterrupt())


def test_staged_output_removes_the_folders_it_created_on_failure(tmp_path):
    src = tiny(tmp_path)
    before = tree_state(tmp_path)
    with pytest.raises(ResourceError, match="disk full while writing the output"):
        with staged_output(tmp_path / "a" / "b" / "out", src) as staging:
            (staging / SINGLE).write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert tree_state(tmp_path) == before


def test_stale_folders_of_dead_runs_are_removed_live_ones_kept(tmp_path):
    src = tiny(tmp_path)
    dead = 2**22 + 12345   # above the default pid_max: no such process
    for name in (f".out.partial-{dead}", f".out.partial-input-{dead}", f".out.old-{dead}",
                 f".out.partial-{os.getppid()}"):
        (tmp_path / name).mkdir()
    with staged_output(tmp_path / "out", src) as staging:
        (staging / "x").write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out")) == [
        f".out.partial-{os.getppid()}"]
