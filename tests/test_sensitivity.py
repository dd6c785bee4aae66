"""Layer sensitivity on a tiny draft and a calibration set built here; --auto-exclude."""

from __future__ import annotations

import json

import pytest
import torch
from calib_fixtures import compare_drafts, write_calibration, write_target
from conftest import load_tensors
from safetensors.torch import load_file, save_file

from eagle3_quant import load_draft, quantize_draft
from eagle3_quant.cli import main
from eagle3_quant.errors import OptionsError, SchemeError
from eagle3_quant.quantize.sensitivity import measure_sensitivity, quark_weight
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.runtime.fp8_linear import Fp8Linear
from eagle3_quant.schemes import get_scheme

GROUPS = {"fc", "qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"}


@pytest.fixture
def setup(make_draft, tmp_path):
    src = make_draft()
    target = write_target(tmp_path / "target")
    return src, target, write_calibration(tmp_path / "cal", target, samples=4, seq_len=20)


def _plant_down_proj_outlier(src):
    """A huge down_proj weight on an intermediate channel that is always 0 (its gate row is 0): harmless
    in BF16, but a per-tensor FP8 scale sized for it flushes every other down_proj weight toward zero."""
    tensors = load_file(src / "model.safetensors")
    tensors["midlayer.mlp.gate_proj.weight"][7] = 0
    down = tensors["midlayer.mlp.down_proj.weight"].float()
    down[0, 7] = down.abs().max() * 3e5
    tensors["midlayer.mlp.down_proj.weight"] = down.to(torch.bfloat16)
    save_file(tensors, src / "model.safetensors")


def test_report_ranks_every_group_and_matches_an_independent_count(setup):
    src, target, cal = setup
    report = measure_sensitivity(src, cal, scheme="ptpc_fp8", device="cpu")
    assert {g.group for g in report.groups} == GROUPS
    keys = [(-g.disagreement, -g.kl) for g in report.groups]
    assert keys == sorted(keys)
    by_name = {g.group: g for g in report.groups}
    assert by_name["qkv_proj"].modules == ("midlayer.self_attn.q_proj", "midlayer.self_attn.k_proj",
                                           "midlayer.self_attn.v_proj")
    assert not by_name["fc"].default_quantized and by_name["o_proj"].default_quantized
    calib = load_calibration(cal)
    assert report.samples == calib.num_samples and report.positions == calib.num_tokens - calib.num_samples

    # replay o_proj by hand: quantize it alone, compare top-1 and KL with the unquantized draft
    base = load_draft(src, embedding=target)
    other = load_draft(src, embedding=target)
    other.layer.self_attn.o_proj = Fp8Linear(*quark_weight(other.layer.self_attn.o_proj.weight.detach(),
                                                           get_scheme("ptpc_fp8")))
    differ, kl = compare_drafts(base, other, cal)
    assert by_name["o_proj"].disagreement == pytest.approx(differ)
    assert by_name["o_proj"].kl == pytest.approx(kl, rel=1e-4)
    assert 0 <= report.default_plan.disagreement <= 1 and report.default_plan.kl > 0


@pytest.mark.slow
def test_default_plan_row_predicts_the_real_ptpc_artifact(quantized_tiny, tmp_path):
    """The all-at-once row equals what the Quark PTPC output does in the runtime, to the last position."""
    src, out = quantized_tiny()
    target = write_target(tmp_path / "target")
    cal = write_calibration(tmp_path / "cal", target, samples=4, seq_len=20)
    report = measure_sensitivity(src, cal, scheme="ptpc_fp8", device="cpu", groups=["o_proj"])
    differ, kl = compare_drafts(load_draft(src, embedding=target), load_draft(out, embedding=target), cal)
    assert report.default_plan.disagreement == pytest.approx(differ)
    assert report.default_plan.kl == pytest.approx(kl, rel=1e-4)


@pytest.mark.slow
def test_simulated_weights_are_quarks_bit_for_bit(quantized_tiny):
    """Sensitivity quantizes weights exactly as Quark's PTPC file-to-file path writes them."""
    src, out = quantized_tiny()
    before, after = load_tensors(src), load_tensors(out)
    modules = [n.removesuffix(".weight_scale") for n in after if n.endswith(".weight_scale")]
    assert len(modules) == 7
    for module in modules:
        weight, scale = quark_weight(before[module + ".weight"], get_scheme("ptpc_fp8"))
        assert torch.equal(weight.view(torch.int8), after[module + ".weight"].view(torch.int8)), module
        assert torch.equal(scale, after[module + ".weight_scale"])


def test_planted_outlier_is_found_by_the_static_scheme(setup):
    src, _, cal = setup
    _plant_down_proj_outlier(src)
    report = measure_sensitivity(src, cal, scheme="fp8", device="cpu", groups=["down_proj", "o_proj", "qkv_proj"])
    assert [g.group for g in report.groups][0] == "down_proj"
    down, runner_up = report.groups[0], report.groups[1]
    assert down.disagreement > 0.15 and down.kl > 10 * runner_up.kl
    assert [g.group for g in report.above(0.15)] == ["down_proj"]


def test_bad_requests_are_refused(setup, tmp_path):
    src, _, cal = setup
    with pytest.raises(SchemeError, match="valid: fc, qkv_proj"):
        measure_sensitivity(src, cal, groups=["attention"])
    with pytest.raises(SchemeError, match="--calib"):
        quantize_draft(src, tmp_path / "o", auto_exclude=0.01)
    with pytest.raises(OptionsError, match="fraction"):
        quantize_draft(src, tmp_path / "o", calib=cal, auto_exclude=1.5)
    assert not (tmp_path / "o").exists()


def test_cli_prints_ranked_table_and_json(setup, capsys):
    src, _, cal = setup
    with pytest.raises(SystemExit) as exit_info:
        main(["sensitivity", str(src), "--calib", str(cal), "--device", "cpu", "--group", "o_proj", "--group",
              "down_proj", "--json"])
    assert exit_info.value.code == 0
    data = json.loads(capsys.readouterr().out)
    assert {g["group"] for g in data["groups"]} == {"o_proj", "down_proj"} and data["scheme"] == "ptpc_fp8"
    assert data["prediction"]["compute_dtype"] == "bfloat16" and data["prediction"]["engine"] == "vllm"
    with pytest.raises(SystemExit) as exit_info:
        main(["sensitivity", str(src), "--calib", str(cal), "--device", "cpu", "--max-samples", "2"])
    out = " ".join(capsys.readouterr().out.split())   # rich wraps a title longer than its table
    assert exit_info.value.code == 0 and "disagreement" in out and "gate_up_proj" in out and "2 samples" in out
    assert "computed with vllm's numerics in bfloat16" in out


@pytest.mark.slow
def test_auto_exclude_keeps_the_sensitive_group_bf16_and_says_why(setup, tmp_path):
    src, _, cal = setup
    _plant_down_proj_outlier(src)
    result = quantize_draft(src, tmp_path / "out", scheme="fp8", calib=cal, device="cpu", auto_exclude=0.15)
    decisions = {d.role: d for d in result.plan.decisions}
    assert not decisions["down_proj"].quantize and decisions["down_proj"].reason.startswith("auto-exclude:")
    assert "down_proj" in decisions["down_proj"].reason and "> 15.00%" in decisions["down_proj"].reason
    assert all(decisions[r].quantize for r in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"))
    assert result.loader_check.ok
    manifest = json.loads((tmp_path / "out" / "eagle3_quant.json").read_text())
    assert manifest["exclude"]["reasons"]["midlayer.mlp.down_proj"] == decisions["down_proj"].reason
    assert manifest["sensitivity"]["threshold"] == 0.15
    assert {g["group"] for g in manifest["sensitivity"]["groups"]} == {"qkv_proj", "o_proj", "gate_up_proj",
                                                                      "down_proj"}
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert r"re:(.*\.)?down_proj$" in config["quantization_config"]["exclude"]
    written = load_file(tmp_path / "out" / "model.safetensors")
    assert written["midlayer.mlp.down_proj.weight"].dtype == torch.bfloat16
    assert "midlayer.mlp.down_proj.input_scale" not in written


@pytest.mark.slow
def test_target_agreement_reads_the_drafts_top1_as_a_target_id(tiny_pair):
    """The tiny pair's draft has a 768-token vocabulary mapped through d2t: its top-1 counts as a hit when
    draft id + d2t[draft id] is the target's next token (compared raw, the rate fell to chance, 0.39%)."""
    from eagle3_quant.quantize.calibration import calibration_batches

    report = measure_sensitivity(tiny_pair.draft, tiny_pair.calib, groups=("o_proj",), max_samples=8, device="cpu")
    draft = load_draft(tiny_pair.draft, embedding=tiny_pair.target)
    hits = positions = raw_hits = 0
    with torch.no_grad():
        for batch in calibration_batches(load_calibration(tiny_pair.calib), "cpu", with_targets=True, max_samples=8):
            top = draft(batch["input_ids"], batch["aux_hidden_states"])[0].argmax(-1)
            hits += int((draft.to_target_ids(top) == batch["targets"]).sum())
            raw_hits += int((top == batch["targets"]).sum())
            positions += top.numel()
    assert report.positions == positions
    assert report.baseline_target_agreement == pytest.approx(hits / positions)
    assert report.baseline_target_agreement > 0.5 > raw_hits / positions
