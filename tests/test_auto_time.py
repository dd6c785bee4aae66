"""The time `--scheme auto` has left, on values: drafting at the faster of the last two draftings' rates, plus each
unbuilt rung's weights at the average of its kind without the first (or one drafting when none)."""

from __future__ import annotations

import pytest

from eagle3_quant.quantize.auto_time import MeasuringCost


def test_nothing_timed_tells_nothing():
    assert MeasuringCost(32).left([(False, False)]) is None
    assert MeasuringCost(32).left([]) == 0
    cost = MeasuringCost(32)
    cost.add_drafting(32, 0.0)              # no reading: not a rate of zero
    assert cost.per_sample_s is None


def test_rungs_cost_drafting_plus_their_unbuilt_weights():
    cost = MeasuringCost(100)
    cost.add_drafting(100, 20.0)                          # the reference: 0.2 s a sample
    cost.add_rung(25, 9.0, 4.0, written=False)           # a probe: 5 s drafting 25 samples, 0.2 s a sample
    assert cost.per_sample_s == pytest.approx(0.2)
    # built: drafting alone; unbuilt in memory with only the first build seen: one more drafting (no average yet)
    assert cost.left([(False, True)]) == pytest.approx(20.0)
    assert cost.left([(False, False)]) == pytest.approx(40.0)
    cost.add_rung(100, 13.0, 3.0, written=False)         # 0.1 s a sample; in-memory builds now 4 (first), 3
    assert cost.per_sample_s == pytest.approx(0.1)
    assert cost.left([(False, False), (False, True)]) == pytest.approx((10 + 3) + 10)
    cost.add_rung(100, 60.0, 30.0, written=True)          # slower drafting (load): 0.3 s a sample
    assert cost.per_sample_s == pytest.approx(0.1)       # the faster of the last two
    cost.add_rung(100, 35.0, None, written=False)         # 0.35 s a sample: the load stayed
    assert cost.per_sample_s == pytest.approx(0.3)
    assert cost.left([(True, False)]) == pytest.approx(30 + 30)      # one write seen: its first, so one drafting
    cost.add_rung(100, 80.0, 50.0, written=True)
    assert cost.left([(True, False)]) == pytest.approx(30 + 50)
