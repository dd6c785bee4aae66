"""AWQ's progress: the rollout counted in samples (at most MAX_SAMPLES, spread over the set), Quark's scale and clip
search in linears, each task ending at its total."""

from __future__ import annotations

import pytest
from conftest import Counted

from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.quantize.awq import MAX_SAMPLES, spread
from eagle3_quant.records.calibration import load_calibration


def test_spread_picks_evenly_and_all_when_few():
    assert spread(5, 32) == set(range(5))
    assert spread(128, 32) == set(range(0, 128, 4))
    assert spread(100, 32) == {i * 100 // 32 for i in range(32)} and len(spread(100, 32)) == 32


@pytest.mark.slow
def test_awq_shows_samples_then_linears(tiny_pair, tmp_path):
    counted = Counted()
    quantize_draft(tiny_pair.draft, tmp_path / "int4", scheme="w4a16_int4", calib=tiny_pair.calib, device="cpu",
                   progress=counted)
    names = [row[0] for row in counted.tasks]
    assert names == ["AWQ: the draft's rollout", "AWQ: Quark's scale and clip search"]
    rollout, search = counted.tasks
    samples = load_calibration(tiny_pair.calib).num_samples
    assert rollout[1:] == [min(samples, MAX_SAMPLES), "samples", min(samples, MAX_SAMPLES)]
    assert search[2] == "linears" and search[1] == search[3] == 3 + 2 + 1 + 7    # qkv, gate/up, down; then each
