"""`quantize --serve-taps` on the tiny real pair, whose draft names its ids SpecForge-style (nested [0, 1, 2]):
vLLM feeds it hidden_states[0, 1, 2], it was trained on [1, 2, 3]. The default writes the trained layers for every
engine (measured on a calibration set that holds both candidates, or from the config's convention), `as-is` keeps
the ids; `validate` measures the acceptance under each candidate; the loaders of both engines say what they feed;
a draft without ids is measured (a deeper target built from the tiny one) or refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import Counted, load_tensors
from tiny_pair_fixtures import NEW_TOKENS, PAIR, fixture_module

from eagle3_quant.cli import main
from eagle3_quant.errors import DraftFormatError
from eagle3_quant.export.card import build_card
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.records.calibration import load_calibration
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.taps.capture import capture_taps
from eagle3_quant.taps.conventions import AUX_KEY
from eagle3_quant.validate.api import validate_draft
from eagle3_quant.validate.sglang_load import sglang_missing
from eagle3_quant.validate.vllm_load import vllm_missing_reason

pytestmark = pytest.mark.slow
NESTED = "eagle_config"
# The BF16 draft on the union set (prompts 0-127 + 48 greedy tokens, 6590 chains, k=3, vLLM's serving numerics):
# measured about 2.22 on the trained layers, 1.72 on the layers vLLM feeds it as shipped. Those digits move with the
# CPU and the thread count (bf16 sums), and the 95% interval of a length over these chains is about +-0.03, so the
# tests assert the claim: the trained layers keep the pair's bar (fixtures/make_tiny_pair.py: 2.0), vLLM's shipped
# layers lose most of the gain (below 1.8), for the BF16 and the FP8 draft alike.
TRAINED_BAR, SHIPPED_BAR = 2.0, 1.8
EVERYONE = "trained=vllm=vllm_v2=sglang"     # the candidate every reader feeds after --serve-taps trained


@pytest.fixture(scope="module")
def artifacts(tiny_pair, union_calib, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("serve-taps")
    return {"trained": quantize_draft(tiny_pair.draft, root / "trained", device="cpu", calib=union_calib).output,
            "as-is": quantize_draft(tiny_pair.draft, root / "as-is", device="cpu", serve_taps="as-is").output}


def config_of(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text())
    config.pop("quantization_config", None)
    return config


def test_default_writes_the_trained_layers_for_every_engine_and_no_weight(artifacts, tiny_pair):
    source = config_of(tiny_pair.draft)
    trained = config_of(artifacts["trained"])
    assert trained == {**source, AUX_KEY: [1, 2, 3]}                  # vLLM's key, its count; SGLang's kept
    assert trained[NESTED] == source[NESTED] == {AUX_KEY: [0, 1, 2], "use_aux_hidden_state": True}
    assert config_of(artifacts["as-is"]) == source                    # --serve-taps as-is: the ids unchanged
    a, b = load_tensors(artifacts["trained"]), load_tensors(artifacts["as-is"])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_manifest_records_what_was_written_why_and_the_measured_acceptance(artifacts, union_calib):
    record = Manifest.read(artifacts["trained"]).serve_taps
    assert (record.mode, record.served, record.trained, record.decided_by) == ("trained", [1, 2, 3], [1, 2, 3],
                                                                              "config")
    assert "SpecForge" in record.reason and "the measurement agrees" in record.reason
    assert record.written == {AUX_KEY: [1, 2, 3]} and record.before == {AUX_KEY: None}
    assert record.feeds_before == {"vllm": [0, 1, 2], "vllm_v2": [1, 2], "sglang": [1, 2, 3]}
    assert record.feeds_after == {"vllm": [1, 2, 3], "vllm_v2": [1, 2, 3], "sglang": [1, 2, 3]}
    assert "names a layer twice" in record.problems_before["vllm_v2"]
    assert record.target_layers == 4 and record.k == 3 and record.calibration == union_calib.name
    measured = {m.name: m for m in record.measured}
    assert measured.keys() == {"trained=sglang", "vllm"} and measured["vllm"].indices == [0, 1, 2]
    assert measured["trained=sglang"].drafts == measured["vllm"].drafts > 6000
    trained, shipped = measured["trained=sglang"].acceptance_length, measured["vllm"].acceptance_length
    assert trained >= TRAINED_BAR > SHIPPED_BAR > shipped
    as_is = Manifest.read(artifacts["as-is"]).serve_taps
    assert (as_is.mode, as_is.written, as_is.served, as_is.measured) == ("as-is", {}, [0, 1, 2], [])
    assert as_is.feeds_after == {"vllm": [0, 1, 2], "vllm_v2": None, "sglang": [1, 2, 3]}   # depth unknown: V2's


@pytest.fixture(scope="module")
def counted():
    return {name: Counted() for name in ("trained", "as-is")}


@pytest.fixture(scope="module")
def reports(artifacts, tiny_pair, union_calib, counted):
    return {name: validate_draft(out, reference=tiny_pair.draft, calib=union_calib, kernel=False,
                                 progress=counted[name])
            for name, out in artifacts.items()}


def test_validate_counts_both_drafts_under_the_other_candidate(reports, counted, union_calib):
    samples = load_calibration(union_calib).num_samples
    for name in ("trained", "as-is"):
        assert counted[name].tasks == [
            ["fidelity: both drafts on the calibration set", samples, "samples", samples],
            ["taps: both drafts under the set's 1 other layer choice", 2 * samples, "samples", 2 * samples]], name


def test_validate_measures_the_acceptance_under_each_candidate(reports):
    trained, as_is = (reports[n].metrics for n in ("trained", "as-is"))
    assert trained.aux_layer_ids == (1, 2, 3) and as_is.aux_layer_ids == (0, 1, 2)     # what vLLM feeds
    # named by the artifact's config (every engine feeds the trained layers); the set's other candidate by its source
    rows = {r.name: r for r in trained.taps.measured}
    assert list(rows) == [EVERYONE, "source:vllm"] and rows["source:vllm"].indices == (0, 1, 2)
    assert rows[EVERYONE].fed_by == ("vllm", "vllm_v2", "sglang") and rows["source:vllm"].fed_by == ()
    for precision in ("bf16", "fp8"):
        key = f"acceptance_length_{precision}"
        assert getattr(rows[EVERYONE], key) >= TRAINED_BAR > SHIPPED_BAR > getattr(rows["source:vllm"], key), precision
    assert trained.acceptance_length_fp8 == rows[EVERYONE].acceptance_length_fp8
    assert trained.taps.best == EVERYONE and trained.taps.notes == ()
    fed = {r.name: r.fed_by for r in as_is.taps.measured}
    assert fed == {"trained=sglang": ("sglang",), "vllm": ("vllm",)}
    assert as_is.acceptance_length_bf16 < SHIPPED_BAR                  # the gates: vLLM's layers
    # the same simulation on the same set and weights, in one process: equal on any machine
    assert as_is.acceptance_length_bf16 == rows["source:vllm"].acceptance_length_bf16
    assert as_is.taps.best == "trained=sglang"
    assert any(n.startswith("vllm feeds this draft hidden_states[0, 1, 2]") for n in as_is.taps.notes)
    checks = {c.name: c for c in reports["trained"].checks}
    assert checks["config_consistency"].status == "passed"       # the written key is the manifest's


@pytest.mark.skipif(vllm_missing_reason() is not None, reason="vLLM is not installed (make setup-vllm)")
def test_vllms_own_code_feeds_the_written_layers(reports):
    trained = {c.name: c for c in reports["trained"].checks}["vllm_load"]
    assert trained.status == "passed", trained.detail
    fed = trained.data["fed_layers"]
    assert fed["target_layers"] == 4 and fed["intended"] == [1, 2, 3]
    assert {name: each["layers"] for name, each in fed["runners"].items()} == {"V1": [1, 2, 3], "V2": [1, 2, 3]}
    assert "target layers vLLM feeds it (4-layer target): V1 hidden_states[1, 2, 3]" in trained.detail
    as_is = {c.name: c for c in reports["as-is"].checks}["vllm_load"]
    runners = as_is.data["fed_layers"]["runners"]
    assert runners["V1"] == {"layers": [0, 1, 2], "source": "the draft's config"}
    assert runners["V2"] == {"layers": [1, 2], "source": "defaults [2, 2, 1]"}     # nested ids unread by V2
    assert as_is.status == "failed" and "vLLM V2 feeds 2 states" in as_is.detail


@pytest.mark.skipif(sglang_missing() is not None, reason="SGLang is not installed (make setup-sglang)")
def test_sglangs_own_loader_still_feeds_the_trained_layers(reports):
    for name in ("trained", "as-is"):
        check = {c.name: c for c in reports[name].checks}["sglang_load"]
        assert check.status == "passed", check.detail
        assert check.data["fed_layers"]["layers"] == [1, 2, 3]
        assert check.data["fed_layers"]["ids"] == [0, 1, 2] and check.data["fed_layers"]["source"] == \
            "eagle_config ids + 1"
        assert "target layers SGLang feeds it: hidden_states[1, 2, 3]" in check.detail


def test_the_card_states_each_engines_layers_and_the_acceptance_under_each(artifacts, reports):
    text = build_card(artifacts["trained"], "org/tiny-fp8", target="org/target", base_model="org/draft").text
    assert "### Target layers the engines feed the draft" in text
    assert "| vLLM, model runner V1 | `hidden_states[0, 1, 2]` | `hidden_states[1, 2, 3]` |" in text
    assert "| SGLang 0.5.23 | `hidden_states[1, 2, 3]` | `hidden_states[1, 2, 3]` |" in text
    assert "cannot run: [2, 2, 1] names a layer twice" in text
    assert f"Written: `{AUX_KEY}` = [1, 2, 3] (not set before). No weight was changed for this." in text
    rows = {cells[1]: cells for cells in (line.strip("| ").split(" | ") for line in text.splitlines()
                                          if line.startswith("| `hidden_states["))}
    assert rows.keys() == {f"{EVERYONE} (served)", "source:vllm"}
    served, shipped = rows[f"{EVERYONE} (served)"], rows["source:vllm"]
    assert served[2] == "vLLM, model runner V1, vLLM, model runner V2, SGLang 0.5.23" and shipped[2] == "-"
    # BF16 as quantize measured it, as validate did (the same simulation and set: the same printed digits), FP8
    assert served[3] == served[4] and shipped[3] == shipped[4]
    for column in (3, 5):
        assert float(served[column]) >= TRAINED_BAR > SHIPPED_BAR > float(shipped[column]), column
    assert f"Best measured candidate for this FP8 draft: {EVERYONE}." in text
    assert "OUT --scheme ptpc_fp8 --calib CAL" not in text        # decided by the config, no set needed
    as_is = build_card(artifacts["as-is"], "org/tiny-fp8", target="org/target", base_model="org/draft").text
    assert "`--serve-taps as-is`: the ids as the source wrote them, each engine reading them its own way" in as_is
    assert "--serve-taps as-is" in as_is.split("eagle3-quant quantize", 1)[1].splitlines()[0]


def stretched_target(folder: Path, order: list[int | None]) -> Path:
    """The tiny target with identity layers inserted: layer i of the new target runs the tiny target's layer
    order[i], or (None) a layer whose o_proj and down_proj are zero, so the residual stream passes unchanged. The
    logits are the tiny target's; its hidden_states[k] is the tiny target's after the real layers among the first k."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(PAIR / "target" / "model.safetensors")
    out = {k: v for k, v in tensors.items() if not k.startswith("model.layers.")}
    for new, old in enumerate(order):
        prefix = f"model.layers.{old if old is not None else 0}."
        for name, tensor in tensors.items():
            if name.startswith(prefix):
                zero = old is None and name.endswith(("o_proj.weight", "down_proj.weight"))
                out[f"model.layers.{new}.{name[len(prefix):]}"] = torch.zeros_like(tensor) if zero else tensor.clone()
    folder.mkdir(parents=True)
    save_file(out, folder / "model.safetensors", metadata={"format": "pt"})
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(PAIR / "target" / name, folder / name)
    config = json.loads((PAIR / "target" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": len(order)}))
    return folder


@pytest.fixture(scope="module")
def no_ids(tiny_pair, tmp_path_factory):
    """The tiny draft with its ids removed, on an 8-layer target whose hidden_states[3, 5, 6] are the tiny target's
    [1, 2, 3] (the layers the draft was trained on): the defaults [2, L//2, L-3] counted as outputs. The engines'
    defaults, hidden_states[2, 4, 5], are the tiny target's [0, 1, 2] (how vLLM feeds the tiny draft as shipped)
    and SpecForge's defaults read as inputs, [1, 3, 4], its [0, 1, 1]: a draft without ids that the engines feed
    the wrong layers, silently (vLLM PR #50170)."""
    from transformers import LlamaForCausalLM

    root = tmp_path_factory.mktemp("no-ids")
    target = stretched_target(root / "target", [None, None, 0, None, 1, 2, 3, None])
    draft = root / "draft"
    shutil.copytree(tiny_pair.draft, draft)
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**config, NESTED: {"use_aux_hidden_state": True}}))
    plan = capture_taps(read_draft(draft).config, 8, "vllm")
    capture = fixture_module("tiny_capture")
    model = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    samples = capture.greedy_samples(model, tiny_pair.prompts[:64], NEW_TOKENS, taps=plan.indices)
    calib = capture.write_calibration(samples, root / "calib", str(target), plan.indices, plan.record.extra())
    return draft, calib, root


def test_a_draft_without_ids_is_refused_on_a_silent_default(no_ids, capsys):
    draft, _, root = no_ids
    with pytest.raises(DraftFormatError, match=r"names no aux layer ids.*give --calib CAL .*--serve-taps as-is"):
        quantize_draft(draft, root / "refused", device="cpu")
    with pytest.raises(SystemExit) as code:
        main(["quantize", str(draft), str(root / "refused"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert f"field '{AUX_KEY}'" in err and not (root / "refused").exists()


def test_a_draft_without_ids_is_measured_and_the_best_candidate_written(no_ids):
    draft, calib, root = no_ids
    out = quantize_draft(draft, root / "fp8", device="cpu", calib=calib).output
    record = Manifest.read(out).serve_taps
    lengths = {m.name: m.acceptance_length for m in record.measured}
    assert [m.indices for m in record.measured] == [[2, 4, 5], [1, 3, 4], [3, 5, 6]]
    assert set(lengths) == {"vllm=vllm_v2=sglang=defaults", "specforge-defaults-as-inputs", "defaults-as-outputs"}
    # measured here (64 prompts): 1.741, 1.600 and 2.301
    assert lengths["defaults-as-outputs"] > 2.2 > 1.8 > max(
        lengths["vllm=vllm_v2=sglang=defaults"], lengths["specforge-defaults-as-inputs"])
    assert (record.decided_by, record.served) == ("measurement", [3, 5, 6])
    assert "defaults-as-outputs" in record.reason
    assert record.written == {f"{NESTED}.{AUX_KEY}": [2, 4, 5], AUX_KEY: [3, 5, 6]}    # each engine's count
    assert record.feeds_before == {"vllm": [2, 4, 5], "vllm_v2": [2, 4, 5], "sglang": [2, 4, 5]}
    assert record.feeds_after == {"vllm": [3, 5, 6], "vllm_v2": [3, 5, 6], "sglang": [3, 5, 6]}
    report = validate_draft(out, reference=draft, calib=calib, kernel=False, vllm=False, sglang=False)
    assert report.metrics.aux_layer_ids == (3, 5, 6) and report.metrics.acceptance_length_fp8 > 2.2
    assert report.metrics.taps.best == EVERYONE
    names = [r.name for r in report.metrics.taps.measured]
    assert names == [EVERYONE, "source:vllm=vllm_v2=sglang=defaults", "source:specforge-defaults-as-inputs"]
    as_is = quantize_draft(draft, root / "as-is", device="cpu", serve_taps="as-is").output
    assert config_of(as_is) == config_of(draft)
