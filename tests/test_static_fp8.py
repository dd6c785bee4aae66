"""`--scheme fp8`: static per-tensor FP8 calibrated on a calibration set through Quark's in-memory path."""

from __future__ import annotations

import json

import pytest
import torch
from calib_fixtures import compare_drafts, write_calibration, write_target
from conftest import folder_hashes, load_tensors

from eagle3_quant import load_draft, quantize_draft
from eagle3_quant.errors import DraftFormatError
from eagle3_quant.quantize.calibration import CALIBRATION_STEPS, calibration_batches
from eagle3_quant.quantize.sensitivity import measure_sensitivity, quark_weight
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.runtime.fp8_linear import Fp8Linear
from eagle3_quant.schemes import get_scheme

ROLES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
         "mlp.up_proj", "mlp.down_proj")


@pytest.fixture(scope="module")
def static_run(tmp_path_factory):
    """One Quark static run per format, shared by the tests that read it."""
    from fixtures.synthetic import write_synthetic_draft

    cache = {}

    def get(fmt: DraftFormat):
        if fmt not in cache:
            root = tmp_path_factory.mktemp(f"static-{fmt.value}")
            src = write_synthetic_draft(root / "src", "tiny", fmt, shards=2 if fmt is DraftFormat.SPECULATORS else 1)
            target = write_target(root / "target")
            cal = write_calibration(root / "cal", target)
            before = folder_hashes(src)
            result = quantize_draft(src, root / "out", scheme="fp8", calib=cal, device="cpu", engine="vllm")
            assert folder_hashes(src) == before
            cache[fmt] = (src, target, cal, result)
        return cache[fmt]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [DraftFormat.SPECFORGE, DraftFormat.SPECULATORS])
def test_static_export_dtypes_scales_and_untouchedload_tensors(static_run, fmt):
    src, _, _, result = static_run(fmt)
    before, after = load_tensors(src), load_tensors(result.output)
    p = fmt.layer_prefix
    for role in ROLES:
        module = p + role
        w = after[module + ".weight"]
        assert w.dtype == torch.float8_e4m3fn and w.shape == before[module + ".weight"].shape
        for kind in ("weight_scale", "input_scale"):
            scale = after[f"{module}.{kind}"]
            assert scale.dtype == torch.float32 and scale.numel() == 1, (module, kind)
            assert torch.isfinite(scale).all() and scale.item() > 0
        ref = before[module + ".weight"].float()
        assert after[module + ".weight_scale"].item() == pytest.approx(ref.abs().max().item() / 448, rel=1e-6)
        rel = (w.float() * after[module + ".weight_scale"] - ref).norm() / ref.norm()
        assert rel < 0.05
    # one input feeds q/k/v and one gate/up: their static scales agree, as vLLM's fused layers need
    assert len({after[p + f"self_attn.{r}_proj.input_scale"].item() for r in "qkv"}) == 1
    assert after[p + "mlp.gate_proj.input_scale"].item() == after[p + "mlp.up_proj.input_scale"].item()
    untouched = set(before) - {p + r + ".weight" for r in ROLES}
    for name in untouched:
        assert after[name].dtype == before[name].dtype and torch.equal(after[name], before[name]), name
    assert set(after) == set(before) | {f"{p}{r}.{k}" for r in ROLES for k in ("weight_scale", "input_scale")}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", [DraftFormat.SPECFORGE, DraftFormat.SPECULATORS])
def test_static_config_keeps_source_keys_and_architectures(static_run, fmt):
    src, _, cal, result = static_run(fmt)
    source = json.loads((src / "config.json").read_text())
    written = json.loads((result.output / "config.json").read_text())
    assert list(written)[: len(source)] == list(source)
    for key, value in source.items():
        assert written[key] == value, key
    qc = written["quantization_config"]
    for kind in ("weight", "input_tensors"):
        spec = qc["global_quant_config"][kind]
        assert (spec["dtype"], spec["qscheme"], spec["is_dynamic"]) == ("fp8_e4m3", "per_tensor", False)
    assert qc["exclude"] == [r"re:(.*\.)?fc$", r"re:(.*\.)?lm_head$"]
    assert result.loader_check.ok and {x.scheme for x in result.loader_check.layers if x.quantized} == {
        "QuarkW8A8Fp8"}
    manifest = json.loads((result.output / "eagle3_quant.json").read_text())
    calib = load_calibration(cal)
    assert manifest["scheme"]["name"] == "fp8"
    assert manifest["calibration"]["samples"] == calib.num_samples
    assert manifest["calibration"]["prediction"]["compute_dtype"] == "bfloat16"   # the rollout Quark observed
    assert manifest["calibration"]["tokens"] == calib.num_tokens - calib.num_samples


@pytest.mark.slow
def test_sensitivity_simulates_the_static_weights_bit_for_bit(static_run):
    src, _, _, result = static_run(DraftFormat.SPECFORGE)
    before, after = load_tensors(src), load_tensors(result.output)
    for role in ROLES:
        module = "midlayer." + role
        weight, scale = quark_weight(before[module + ".weight"], get_scheme("fp8"))
        assert torch.equal(weight.view(torch.int8), after[module + ".weight"].view(torch.int8)), module
        assert scale.item() == after[module + ".weight_scale"].item()


@pytest.mark.slow
def test_sensitivity_default_plan_row_predicts_the_static_artifact(static_run):
    src, target, cal, result = static_run(DraftFormat.SPECFORGE)
    report = measure_sensitivity(src, cal, scheme="fp8", device="cpu", groups=["o_proj"])
    differ, kl = compare_drafts(load_draft(src, embedding=target), load_draft(result.output, embedding=target), cal)
    assert report.default_plan.disagreement == pytest.approx(differ)
    assert report.default_plan.kl == pytest.approx(kl, rel=1e-4)


@pytest.mark.slow
def test_input_scales_are_the_calibration_absmax_over_448(static_run):
    """Independent replay: hook every linear of the BF16 runtime over the same batches and steps."""
    src, target, cal, result = static_run(DraftFormat.SPECFORGE)
    draft = load_draft(src, embedding=target)
    seen: dict[str, float] = {}

    def hook(name):
        def record(_module, args, _output):
            seen[name] = max(seen.get(name, 0.0), args[0].detach().abs().max().float().item())
        return record

    for name, module in draft.linears().items():
        module.register_forward_hook(hook(name))
    for batch in calibration_batches(load_calibration(cal), "cpu"):
        draft.propose_all(batch["input_ids"], batch["aux_hidden_states"], CALIBRATION_STEPS)
    written = load_tensors(result.output)
    for role in ROLES:
        module = "midlayer." + role
        assert written[module + ".input_scale"].item() == pytest.approx(seen[module] / 448, rel=1e-6), module


@pytest.mark.slow
def test_static_output_runs_in_the_runtime(static_run):
    src, target, cal, result = static_run(DraftFormat.SPECFORGE)
    fp8 = load_draft(result.output, embedding=target)
    assert all(isinstance(fp8.linears()["midlayer." + r], Fp8Linear) for r in ROLES)
    assert fp8.layer.self_attn.q_proj.input_scale is not None
    reference = load_draft(result.output, embedding=target, fp8_mode="dequant")
    assert compare_drafts(fp8, reference, cal) == (0.0, 0.0)      # scaled_mm == dequantized, bit for bit
    disagreement, _ = compare_drafts(load_draft(src, embedding=target), fp8, cal)
    assert disagreement <= 0.3


def test_calibration_for_another_target_width_is_refused(make_draft, tmp_path):
    src = make_draft()
    cal = write_calibration(tmp_path / "cal", write_target(tmp_path / "t"), target_hidden=48)
    with pytest.raises(DraftFormatError, match="target_hidden_size"):
        quantize_draft(src, tmp_path / "out", scheme="fp8", calib=cal, device="cpu")
    assert not (tmp_path / "out").exists()


def test_draft_without_embedding_needs_a_readable_target(make_draft, tmp_path):
    src = make_draft()
    cal = write_calibration(tmp_path / "cal", tmp_path / "no-such-target")
    with pytest.raises(DraftFormatError, match="info.target"):
        quantize_draft(src, tmp_path / "out", scheme="fp8", calib=cal, device="cpu")
    assert not (tmp_path / "out").exists()
