"""Quark's static calibration and GPTQ's rollouts, which print nothing themselves, and SmoothQuant's rollout are
counted in samples: one advance per forward the draft runs on a calibration sample, each task ending at its total."""

from __future__ import annotations

import pytest
from conftest import Counted

from eagle3_quant.cli import main
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.records.calibration import load_calibration

pytestmark = pytest.mark.slow


def test_static_scales_then_gptq_count_every_sample(tiny_pair, tmp_path):
    counted = Counted()
    result = quantize_draft(tiny_pair.draft, tmp_path / "fp8", scheme="fp8", calib=tiny_pair.calib, gptq=True,
                            device="cpu", progress=counted)
    samples = load_calibration(tiny_pair.calib).num_samples
    groups = len(result.manifest.gptq["order"])
    assert groups == 4                           # qkv, o, gate/up, down
    assert counted.tasks == [
        ["Quark: static input scales", samples, "samples", samples],
        [f"GPTQ: Hessians, one rollout per layer group ({groups} groups)", groups * samples, "samples",
         groups * samples],
    ]


def test_dynamic_inputs_count_gptq_only(tiny_pair, tmp_path):
    counted = Counted()
    quantize_draft(tiny_pair.draft, tmp_path / "ptpc", scheme="ptpc_fp8", calib=tiny_pair.calib, gptq=True,
                   device="cpu", progress=counted)
    assert [row[0] for row in counted.tasks] == ["GPTQ: Hessians, one rollout per layer group (4 groups)"]


def test_smoothquant_counts_its_rollout(tiny_pair, tmp_path):
    counted = Counted()
    quantize_draft(tiny_pair.draft, tmp_path / "smooth", scheme="ptpc_fp8", calib=tiny_pair.calib, smooth_alpha=0.5,
                   device="cpu", progress=counted)
    samples = load_calibration(tiny_pair.calib).num_samples
    assert counted.tasks == [["SmoothQuant: the draft's rollout", samples, "samples", samples]]


def test_the_cli_shows_the_counts_quarks_quiet_block_would_swallow(tiny_pair, tmp_path, capsys):
    with pytest.raises(SystemExit) as code:     # Quark's quiet block swaps sys.stderr while these run
        main(["quantize", str(tiny_pair.draft), str(tmp_path / "fp8"), "--scheme", "fp8", "--gptq", "--calib",
              str(tiny_pair.calib), "--device", "cpu"])
    err = capsys.readouterr().err
    samples = load_calibration(tiny_pair.calib).num_samples
    assert code.value.code == 0, err[-2000:]
    assert f"Quark: static input scales: {samples}/{samples} samples" in err
    assert f"GPTQ: Hessians, one rollout per layer group (4 groups): {4 * samples}/{4 * samples} samples" in err
