"""`bench`'s prompt sources: a calibration set, a .safetensors of token ids, a dataset; bad ones in one line."""

from __future__ import annotations

import json

import pytest
import torch
from calib_fixtures import write_calibration
from safetensors.torch import save_file
from tiny_pair_fixtures import PAIR

from eagle3_quant.bench.options import BenchOptions
from eagle3_quant.bench.prompts import load_prompts
from eagle3_quant.calib.target import TargetSpec
from eagle3_quant.errors import CalibrationDataError, OptionsError
from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter

TARGET = TargetSpec(str(PAIR / "target"), 4, 128, 1024, "float32", "LlamaForCausalLM")


def test_a_calibration_sets_prompts_end_where_the_targets_continuation_starts(tmp_path):
    writer = CalibrationWriter(tmp_path / "cal", CalibrationInfo("t", (1, 2, 3), 8))
    for start in (3, 5):
        writer.add(CalibrationSample(torch.arange(10), torch.zeros(10, 24), torch.arange(10), start))
    writer.close()
    prompts, name = load_prompts(BenchOptions(prompts=str(tmp_path / "cal")), TARGET)
    assert prompts == [[0, 1, 2], [0, 1, 2, 3, 4]] and name == "cal"
    plain = write_calibration(tmp_path / "plain", tmp_path, samples=3, seq_len=24)   # no generated part: cut
    prompts, _ = load_prompts(BenchOptions(prompts=str(plain), prompt_len=8, num_prompts=2), TARGET)
    assert [len(p) for p in prompts] == [8, 8]


def test_a_prompts_tensor_and_a_dataset(tmp_path):
    prompts, name = load_prompts(BenchOptions(prompts=str(PAIR / "heldout_prompts.safetensors"), num_prompts=5),
                                 TARGET)
    assert len(prompts) == 5 and len(prompts[0]) == 64 and name == "heldout_prompts.safetensors"
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": "def main():\n    return 0\n" * 4}) + "\n" for _ in range(3)))
    prompts, _ = load_prompts(BenchOptions(prompts=str(rows), num_prompts=2, prompt_len=16, max_tokens=8), TARGET)
    assert len(prompts) == 2 and all(0 < len(p) <= 16 for p in prompts)


@pytest.mark.parametrize(("tensors", "message"), [
    ({"ids": torch.zeros(2, 4, dtype=torch.int64)}, "tensor 'prompts': no tensor 'prompts' (holds ids)"),
    ({"prompts": torch.zeros(2, 4)}, "tensor 'prompts': must be an integer matrix"),
    ({"prompts": torch.full((2, 4), 5000, dtype=torch.int64)}, "token id 5000 is outside the target's vocabulary"),
])
def test_bad_prompts_are_one_line(tmp_path, tensors, message):
    path = tmp_path / "p.safetensors"
    save_file(tensors, path)
    with pytest.raises(CalibrationDataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_prompts(BenchOptions(prompts=str(path)), TARGET)
    with pytest.raises(OptionsError, match="bench needs prompts"):
        load_prompts(BenchOptions(), TARGET)
