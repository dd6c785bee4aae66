"""One streamed read per file: sha256, NaN/Inf scan and byte comparison share it (quantize/checks, export/verify)."""

from __future__ import annotations

import hashlib
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import eagle3_quant.util.hashing as hashing
from eagle3_quant.errors import CheckpointFileError, DraftFormatError, QuantizationError
from eagle3_quant.plan import make_plan
from eagle3_quant.quantize import verify_export as verify
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.quantize.finite_scan import all_finite, scan_source
from eagle3_quant.quantize.verify_export import verify_export
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.reading.safetensors_header import read_header
from eagle3_quant.schemes import get_scheme
from eagle3_quant.util.hashing import ByteRange, digest_folder, sha256_file

SMALL_CHUNK = 64


@pytest.fixture
def small_chunks(monkeypatch):
    """Pieces of 64 bytes, so every tensor of the tiny draft spans many pieces."""
    monkeypatch.setattr(hashing, "CHUNK", SMALL_CHUNK)
    monkeypatch.setattr(verify, "PIECE", SMALL_CHUNK)


def test_ranges_see_exactly_their_bytes_in_order_and_digest_is_whole_file(tmp_path, small_chunks):
    data = bytes(range(256)) * 5 + b"tail"
    path = tmp_path / "blob"
    path.write_bytes(data)
    seen: dict[str, list[tuple[int, bytes]]] = {"a": [], "b": []}
    ranges = [ByteRange(300, 301, lambda piece, off: seen["b"].append((off, bytes(piece)))),
              ByteRange(10, 200, lambda piece, off: seen["a"].append((off, bytes(piece))))]
    assert sha256_file(path, ranges) == hashlib.sha256(data).hexdigest()
    assert b"".join(p for _, p in seen["a"]) == data[10:200]
    assert [off for off, _ in seen["a"]] == [0, 64, 128]
    assert seen["b"] == [(0, data[300:301])]


def test_digest_folder_on_two_threads_keeps_order_and_visits(tmp_path, small_chunks):
    for i in range(3):
        (tmp_path / f"f{i}").write_bytes(bytes([i]) * (100 + 50 * i))
    seen = []
    ranges = {(tmp_path / "f2").resolve(): [ByteRange(7, 190, lambda piece, off: seen.append(bytes(piece)))]}
    digests = digest_folder(tmp_path, ranges=ranges, workers=2)
    assert [d.path for d in digests] == ["f0", "f1", "f2"]
    assert all(d.sha256 == hashlib.sha256((tmp_path / d.path).read_bytes()).hexdigest() for d in digests)
    assert b"".join(seen) == bytes([2]) * 183


def test_range_beyond_end_of_file_is_refused(tmp_path):
    path = tmp_path / "short"
    path.write_bytes(b"x" * 100)
    with pytest.raises(CheckpointFileError, match="truncated"):
        sha256_file(path, [ByteRange(50, 150, lambda piece, off: None)])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("size", [1, 7, 33, 1000, 4099])
def test_all_finite_catches_nan_and_both_infinities_anywhere(dtype, size):
    clean = torch.randn(size).to(dtype)
    assert all_finite(clean)
    for position in {0, size // 2, size - 1}:
        for bad in (float("nan"), float("inf"), float("-inf")):
            values = clean.clone()
            values[position] = bad
            assert not all_finite(values), (position, bad)


def test_scan_source_digests_every_file(make_draft, small_chunks):
    src = make_draft(shards=2)
    digests = {d.path: d for d in scan_source(read_draft(src))}
    assert set(digests) == {p.name for p in src.iterdir()}
    for name, digest in digests.items():
        assert digest.sha256 == hashlib.sha256((src / name).read_bytes()).hexdigest()
        assert digest.size == (src / name).stat().st_size


@pytest.mark.parametrize("row", [0, 37, 63])
def test_scan_source_names_the_tensor_first_position_and_count(make_draft, small_chunks, row):
    src = make_draft()
    tensors = load_file(src / "model.safetensors")
    weight = tensors["midlayer.mlp.down_proj.weight"]
    weight[row, 5] = float("nan")
    weight[row, 100] = float("inf")          # same row, another 64-byte piece
    weight[row, 159] = float("-inf")         # and the last piece of the row
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(DraftFormatError) as err:
        scan_source(read_draft(src))
    message = str(err.value)
    assert "tensor 'midlayer.mlp.down_proj.weight'" in message
    assert f"holds 3 NaN/Inf value(s) (first at [{row}, 5])" in message


def _copy_of_output(quantized_tiny, tmp_path):
    src, out = quantized_tiny()
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    draft = read_draft(src)
    return draft, copy, make_plan(draft, get_scheme("ptpc_fp8"), None, False)


@pytest.mark.slow
def test_verify_export_digests_match_files(quantized_tiny, tmp_path, small_chunks):
    draft, out, plan = _copy_of_output(quantized_tiny, tmp_path)
    verified = verify_export(draft, out, plan)
    assert verified.tensors == len(read_header(out / "model.safetensors").tensors)
    assert {d.path: d.sha256 for d in verified.files} == {
        p.name: sha256_file(p) for p in out.iterdir() if p.name != "eagle3_quant.json" and p.name[0] != "."}


@pytest.mark.slow
@pytest.mark.parametrize("tensor", ["lm_head.weight", "fc.weight", "d2t"])
def test_verify_export_catches_one_flipped_byte_in_a_copied_tensor(quantized_tiny, tmp_path, small_chunks, tensor):
    draft, out, plan = _copy_of_output(quantized_tiny, tmp_path)
    header = read_header(out / "model.safetensors")
    info = header.tensors[tensor]
    where = header.data_start + info.data_offsets[0] + info.nbytes - 3
    blob = bytearray((out / "model.safetensors").read_bytes())
    blob[where] ^= 0x01
    (out / "model.safetensors").write_bytes(bytes(blob))
    with pytest.raises(QuantizationError, match="differs from the source") as err:
        verify_export(draft, out, plan)
    assert tensor in str(err.value)



@pytest.mark.slow
def test_quantize_refuses_inf_before_writing_anything(make_draft, tmp_path):
    src = make_draft()
    tensors = load_file(src / "model.safetensors")
    tensors["lm_head.weight"][3, 3] = float("-inf")
    save_file(tensors, src / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(DraftFormatError, match=r"lm_head\.weight.*1 NaN/Inf value\(s\) \(first at \[3, 3\]\)") \
            as err:
        quantize_draft(src, tmp_path / "out", device="cpu")
    assert str(src / "model.safetensors") in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


@pytest.mark.slow
def test_quantize_reports_stage_timings(make_draft, tmp_path):
    result = quantize_draft(make_draft(), tmp_path / "out", device="cpu")
    assert {"read headers", "scan source (sha256 + NaN/Inf)", "import quark.torch (background)", "quark",
            "verify + sha256 outputs", "manifest"} <= set(result.timings)
    assert all(seconds >= 0 for seconds in result.timings.values())
    assert sum(v for k, v in result.timings.items() if "background" not in k) <= result.seconds
