"""`quantize --gptq` (quantize/gptq.py): Quark's GPTQ, driven by the draft's own rollout, rounds the FP8 weights
so that each linear's output on the draft's inputs moves less than round-to-nearest's; scales, tensors and config
stay those of the plain artifact, vLLM's and SGLang's own code load it, and the acceptance holds on prompts the
Hessians never saw. The tiny MLA pair's measurement is in tests/test_tiny_mla_pair.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from test_cli import run_cli
from tiny_pair_fixtures import CALIB_PROMPTS, K

from eagle3_quant.errors import SchemeError
from eagle3_quant.plan import make_plan
from eagle3_quant.quantize.gptq import rounding_order
from eagle3_quant.quantize.options import QuantizeOptions
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.runtime.drafting import draft_inputs
from eagle3_quant.runtime.loading import load_draft
from eagle3_quant.schemes import get_scheme
from eagle3_quant.validate.api import validate_draft
from eagle3_quant.validate.report import Gates
from eagle3_quant.validate.sglang_load import sglang_missing
from eagle3_quant.validate.vllm_load import vllm_missing_reason
from fixtures.synthetic import write_synthetic_draft

ATTN, MLP = "midlayer.self_attn.", "midlayer.mlp."


def test_gptq_is_checked_with_the_other_options(tmp_path):
    with pytest.raises(SchemeError, match="--calib") as info:
        QuantizeOptions(gptq=True)
    assert info.value.field == "calib"
    with pytest.raises(SchemeError, match="w_mxfp4_a_mxfp4 has block-scaled weights") as info:
        QuantizeOptions(gptq=True, calib=tmp_path, scheme="w_mxfp4_a_mxfp4", engine="vllm")
    assert info.value.field == "gptq"
    with pytest.raises(SchemeError, match="--gptq") as info:
        QuantizeOptions(scheme="auto", gptq=True, calib=tmp_path)
    assert info.value.field == "gptq"
    assert QuantizeOptions(gptq=True, calib=tmp_path).gptq
    assert QuantizeOptions(gptq=True, calib=tmp_path, scheme="fp8").gptq


def test_cli_gptq_without_calibration_is_one_line_and_writes_nothing(make_draft, tmp_path, capsys):
    code, _, err = run_cli("quantize", str(make_draft()), str(tmp_path / "o"), "--gptq", capsys=capsys)
    assert code == 2 and err.startswith("error: ") and err.strip().count("\n") == 0
    assert "--gptq" in err and "--calib" in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("shape, expected", [
    ("tiny", [[ATTN + "q_proj", ATTN + "k_proj", ATTN + "v_proj"], [ATTN + "o_proj"],
              [MLP + "gate_proj", MLP + "up_proj"], [MLP + "down_proj"]]),
    ("tiny-mla", [[ATTN + "q_a_proj", ATTN + "kv_a_proj_with_mqa"], [ATTN + "q_b_proj"], [ATTN + "o_proj"],
                  [MLP + "gate_proj", MLP + "up_proj"], [MLP + "down_proj"]]),
])
def test_rounding_order_is_vllms_fused_groups_in_forward_order(tmp_path, shape, expected):
    draft = read_draft(write_synthetic_draft(tmp_path / "src", shape))
    assert rounding_order(draft, make_plan(draft, get_scheme("ptpc_fp8"), (), False)) == expected
    without_o = make_plan(draft, get_scheme("ptpc_fp8"), ("o_proj",), True)
    assert rounding_order(draft, without_o) == [["fc"]] + [g for g in expected if g != [ATTN + "o_proj"]]


@pytest.fixture(scope="module")
def llama_gptq(tiny_pair, holdout_calib, tmp_path_factory):
    from eagle3_quant.quantize.api import quantize_draft

    return quantize_draft(tiny_pair.draft, tmp_path_factory.mktemp("gptq") / "fp8", device="cpu",
                          calib=holdout_calib, gptq=True)


def _tensors(folder):
    with safe_open(str(next(folder.glob("*.safetensors"))), framework="pt") as fh:
        return {name: fh.get_tensor(name) for name in fh.keys()}


@torch.no_grad()
def _linear_inputs(tiny_pair, modules, max_samples=32):
    """Every input each linear of the BF16 draft receives over the rollout (k steps), on the judging set."""
    from eagle3_quant.records.calibration import load_calibration

    draft = load_draft(tiny_pair.draft, "cpu", torch.float32, embedding=tiny_pair.target)
    seen = {m: [] for m in modules}
    for m in modules:
        draft.get_submodule(m).register_forward_hook(
            lambda _mod, args, _out, m=m: seen[m].append(args[0].reshape(-1, args[0].shape[-1])))
    for index, sample in enumerate(load_calibration(tiny_pair.calib).samples()):
        if index >= max_samples:
            break
        ids, aux, _ = draft_inputs(sample.input_ids, sample.aux_hidden_states, sample.target_next_ids)
        draft.propose_all(ids, aux, K)
    return {m: torch.cat(x) for m, x in seen.items()}


@pytest.mark.slow
def test_gptq_moves_each_linears_output_less_than_round_to_nearest(tiny_pair, llama_gptq):
    """Same scales as Quark's round-to-nearest artifact, other codes: a larger weight error, a smaller output error
    on inputs the Hessians were not taken from."""
    source, rtn, gptq = _tensors(tiny_pair.draft), _tensors(tiny_pair.fp8), _tensors(llama_gptq.output)
    assert {n: (t.dtype, t.shape) for n, t in gptq.items()} == {n: (t.dtype, t.shape) for n, t in rtn.items()}
    modules = [d.module for d in llama_gptq.plan.quantized]
    inputs = _linear_inputs(tiny_pair, modules)
    for module in modules:
        weight, scale = module + ".weight", module + ".weight_scale"
        assert torch.equal(gptq[scale], rtn[scale]), module          # max|w| / 448 per row, as without GPTQ
        assert not torch.equal(gptq[weight].view(torch.uint8), rtn[weight].view(torch.uint8)), module
        w = source[weight].float()
        errors = {}
        for name, art in (("rtn", rtn), ("gptq", gptq)):
            approx = art[weight].float() * art[scale].reshape(-1, 1)
            sqnr = 10 * torch.log10(w.pow(2).sum() / (approx - w).pow(2).sum())
            out = (inputs[module] @ (approx - w).T).pow(2).sum() / (inputs[module] @ w.T).pow(2).sum()
            errors[name] = (float(sqnr), float(out))
        print(f"\n{module}: weight SQNR {errors['rtn'][0]:.2f} -> {errors['gptq'][0]:.2f} dB, relative output "
              f"error {errors['rtn'][1]:.2e} -> {errors['gptq'][1]:.2e}")
        assert errors["gptq"][1] < 0.5 * errors["rtn"][1], module    # measured 0.08..0.24
        assert 25.0 < errors["gptq"][0] < errors["rtn"][0], module
    for name in set(source) - {m + ".weight" for m in modules}:
        assert torch.equal(gptq[name], source[name]), name           # every other tensor byte for byte


@pytest.mark.slow
def test_gptq_records_itself_reproduces_and_is_on_the_card(tiny_pair, holdout_calib, llama_gptq, tmp_path):
    from eagle3_quant.export.card import build_card
    from eagle3_quant.quantize.api import quantize_draft

    record = llama_gptq.manifest.gptq
    assert record["samples"] == CALIB_PROMPTS and record["steps"] == K and record["positions"] > 0
    assert record["order"] == rounding_order(read_draft(tiny_pair.draft), llama_gptq.plan)
    assert record["prediction"]["compute_dtype"] == "bfloat16"       # the rollout ran as vLLM serves the draft
    again = quantize_draft(tiny_pair.draft, tmp_path / "again", device="cpu", calib=holdout_calib, gptq=True)
    assert [(o.path, o.sha256) for o in again.manifest.outputs] == \
        [(o.path, o.sha256) for o in llama_gptq.manifest.outputs]
    card = build_card(llama_gptq.output, "org/tiny-fp8", target="org/target", base_model="org/draft").text
    assert "GPTQ rounding (Quark's) of the FP8 weights on 128 samples" in card
    assert "--gptq --calib CAL" in card


@pytest.mark.slow
def test_gptq_llama_draft_is_validated_and_loaded_by_the_engines(tiny_pair, llama_gptq, tmp_path):
    """Hessians from the other 128 held-out prompts, judged on the test set: measured ratio 1.0003 (95% CI
    0.9960..1.0044), top-1 0.9677; round-to-nearest on the same set: 1.0017."""
    report = validate_draft(llama_gptq.output, reference=tiny_pair.draft, calib=tiny_pair.calib, gates=Gates())
    m = report.metrics
    print(f"\ntiny pair, PTPC + GPTQ: ratio {m.acceptance_ratio:.4f} {m.acceptance_ratio_interval}, "
          f"top-1 {m.top1_agreement:.4f}")
    assert report.passed, [(c.name, c.detail) for c in report.failed_checks]
    assert m.acceptance_ratio >= 0.99 and m.drafts >= 6000
    status = {c.name: c.status for c in report.checks}
    assert status["vllm_load"] == ("skipped" if vllm_missing_reason() else "passed")
    assert status["sglang_load"] == ("skipped" if sglang_missing() else "passed")


@pytest.mark.slow
def test_pipeline_requantizes_when_gptq_is_switched_and_resumes(make_draft, tmp_path, hub):
    from calib_fixtures import write_calibration, write_target
    from test_pipeline import write_pipeline

    from eagle3_quant.pipeline import run_pipeline

    target = write_target(tmp_path / "target")
    path = write_pipeline(tmp_path, source=str(make_draft()), target=str(target), push={"enabled": False},
                          calibrate={"data": "some/dataset", "num_samples": 3})
    write_calibration(tmp_path / "work" / "calib", target, samples=3)
    first = run_pipeline(path)
    assert first.stages[1].status == "ran", first.stages[1].detail
    manifest = first.spec.out / "eagle3_quant.json"
    assert "gptq" not in json.loads(manifest.read_text())
    second = run_pipeline(path, ["quantize.gptq=true", "quantize.exclude=[o_proj]"])
    assert second.stages[1].status == "ran", second.stages[1].detail
    assert "replaced:" in second.stages[1].detail
    gptq = json.loads(manifest.read_text())["gptq"]
    assert gptq["samples"] == 3 and ATTN + "o_proj" not in sum(gptq["order"], [])
    third = run_pipeline(path, ["quantize.gptq=true", "quantize.exclude=[o_proj]"])
    assert third.stages[1].status == "skipped"
    fourth = run_pipeline(path, ["quantize.exclude=[o_proj]"])
    assert fourth.stages[1].status == "ran" and "replaced: gptq was on" in fourth.stages[1].detail
    assert hub.requests == []


def test_gptq_with_another_drafts_calibration_set_is_refused_before_any_work(make_draft, tmp_path, capsys):
    from calib_fixtures import write_calibration, write_target

    cal = write_calibration(tmp_path / "cal", write_target(tmp_path / "t", hidden=48), target_hidden=48)
    src = make_draft()
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = run_cli("quantize", str(src), str(tmp_path / "o"), "--gptq", "--calib", str(cal), capsys=capsys)
    assert code == 2 and err.startswith("error: ") and err.strip().count("\n") == 0
    assert "info.target_hidden_size" in err and "48" in err and "64" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before      # no OUT, no staging folder left
