"""The time `--scheme auto` has left, on values: drafting at the faster of the last two draftings' rates, plus each
unbuilt rung's weights at the average of its kind without the first (or one drafting when none)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from eagle3_quant.quantize.auto_time import MeasuringCost, Stopwatch


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


def test_stopwatch_keeps_seconds_when_nothing_ran_beside():
    watch = Stopwatch(lambda: False)
    time.sleep(0.05)                                      # no CPU, but nothing beside: wall seconds stand
    assert watch.alone(7.0) == 7.0
    assert watch.elapsed() >= 0.05 and watch.elapsed_alone() >= 0.05


@pytest.mark.parametrize("beside_at", [(True, True), (True, False), (False, True)])
def test_stopwatch_counts_this_threads_cpu_share_when_work_ran_beside(beside_at):
    readings = iter(beside_at)
    watch = Stopwatch(lambda: next(readings))
    time.sleep(0.2)                  # waiting, as for a GIL another thread holds: almost no CPU on this thread
    assert 0 <= watch.alone(10.0) < 2.0


@pytest.mark.slow
def test_a_background_import_counts_as_running_until_it_ends():
    code = ("from eagle3_quant.quantize.quark_import import import_quark_in_background, importing_in_background\n"
            "assert not importing_in_background()\n"
            "future = import_quark_in_background()\n"
            "print(importing_in_background())\n"
            "future.result()\n"
            "print(importing_in_background())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["True", "False"]
