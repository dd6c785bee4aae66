"""Two runs on the same draft give byte-identical files and the same manifest apart from time and paths."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.records.public_names import LOCAL_RECORD
from fixtures.synthetic import write_synthetic_draft

pytestmark = pytest.mark.slow

VARYING = {"created_at", "command"}       # top-level manifest keys allowed to differ (the command names a, b)
VARYING_SOURCE = {"path"}                 # where the source copy lies


def copy_in_reverse_order(src, dest):
    """The same files created in the opposite order (directory listing order may follow creation)."""
    dest.mkdir()
    for path in sorted(src.iterdir(), reverse=True):
        shutil.copyfile(path, dest / path.name)
    return dest


def comparable(manifest: dict) -> dict:
    data = {k: v for k, v in manifest.items() if k not in VARYING}
    data["source"] = {k: v for k, v in data["source"].items() if k not in VARYING_SOURCE}
    return data


@pytest.mark.parametrize("fmt, shards", [(DraftFormat.SPECFORGE, 3), (DraftFormat.SPECULATORS, 1)])
def test_two_runs_are_byte_identical(tmp_path, fmt, shards):
    first_src = write_synthetic_draft(tmp_path / "a", "tiny", fmt, shards=shards)
    second_src = copy_in_reverse_order(first_src, tmp_path / "b")
    first = quantize_draft(first_src, tmp_path / "out-a", device="cpu", engine="vllm").output
    second = quantize_draft(second_src, tmp_path / "out-b", device="cpu", engine="vllm").output
    names = sorted(os.listdir(first))
    assert names == sorted(os.listdir(second))
    for name in names:
        if name not in ("eagle3_quant.json", LOCAL_RECORD):   # both record where the source was
            assert (first / name).read_bytes() == (second / name).read_bytes(), name
    index = json.loads((first / "model.safetensors.index.json").read_text())
    assert list(index["weight_map"]) == sorted(index["weight_map"])
    manifests = [json.loads((out / "eagle3_quant.json").read_text()) for out in (first, second)]
    assert manifests[0]["source"]["path"] != manifests[1]["source"]["path"]
    assert comparable(manifests[0]) == comparable(manifests[1])
