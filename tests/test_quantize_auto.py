"""`quantize --scheme auto`: the candidate ladder (step bytes from cost.py), its refusals, the gate (the interval's
lower bound and validate's gates, or a refusal saying how many samples would tell), and on the tiny real pair the
measured choice: cheapest first, stopped at the first keeper, each rung reported as it is measured, the choice
confirmed by `validate` on the written artifact."""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from calib_fixtures import write_calibration, write_target
from conftest import folder_hashes
from test_pipeline import Said

from eagle3_quant.cli import main
from eagle3_quant.cost import WeightTensor, checkpoint_cost, project_scheme, step_cost
from eagle3_quant.errors import AcceptanceGateError, CalibrationDataError, DraftFormatError, OptionsError, SchemeError
from eagle3_quant.quantize.api import quantize_draft
from eagle3_quant.quantize.auto import Outcome, choose, misses, samples_needed
from eagle3_quant.quantize.auto_ladder import Candidate, build_ladder, vocab_sizes
from eagle3_quant.quantize.auto_measure import Trial, clearly_failing
from eagle3_quant.quantize.options import QuantizeOptions
from eagle3_quant.reading.draft import read_draft
from eagle3_quant.records.auto_choice import KEPT, NOT_MEASURED
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.runtime.acceptance import PairedRatio
from eagle3_quant.scheme_gates import gates_for_scheme
from eagle3_quant.schemes import SCHEMES
from eagle3_quant.util.progress import Silent
from fixtures.synthetic import write_synthetic_draft


def test_vocab_sizes_only_where_the_calibration_set_ranks_them():
    assert vocab_sizes(768, 768) == ([384, 256, 192], [])
    sizes, skipped = vocab_sizes(768, 300)
    assert sizes == [256, 192] and skipped == ["vocab 384: the calibration set ranks only 300 of the draft's 768 "
                                               "tokens"]


def test_ladder_step_bytes_are_cost_py_s_and_ascending(tmp_path: Path):
    src = write_synthetic_draft(tmp_path / "src", "tiny")           # 256 of 512 tokens, with d2t
    draft = read_draft(src)
    ladder = build_ladder(draft, (), "both", [128, 64])
    names = [c.name for c in ladder.candidates]
    both = [s for s in SCHEMES if not any(SCHEMES[s].why_not(e) for e in ("vllm", "sglang"))]
    assert "w_mxfp4_a_mxfp4" in both and "w_mxfp4_a_fp8" not in both
    assert len(names) == len(both) * 3 and not any("fc quantized" in n for n in names)
    assert any(s.startswith("w_mxfp4_a_fp8: --engine both: scheme w_mxfp4_a_fp8 cannot be served by sglang")
               for s in ladder.skipped)
    assert {c.engines for c in ladder.candidates} == {("vllm", "sglang")}
    assert [c.step_bytes for c in ladder.candidates] == sorted(c.step_bytes for c in ladder.candidates)
    by_name = {c.name: c.step_bytes for c in ladder.candidates}
    assert by_name["ptpc_fp8"] == checkpoint_cost(src).written.total_bytes
    assert by_name["ptpc_fp8 + vocab 64"] == checkpoint_cost(src, draft_vocab=64).written.total_bytes
    assert ladder.bf16_step_bytes == checkpoint_cost(src).bf16.total_bytes
    tensors = [WeightTensor(n, i.shape, i.dtype) for n, i in sorted(draft.checkpoint.tensors.items())]
    assert by_name["w_mxfp4_a_mxfp4"] == step_cost(project_scheme(tensors, "w_mxfp4_a_mxfp4"), "").total_bytes
    assert by_name["w_mxfp4_a_mxfp4"] < by_name["ptpc_fp8"]
    assert any("fc quantized" in s and "SGLang" in s for s in ladder.skipped)
    vllm = build_ladder(draft, (), "vllm", [128])
    fc = {c.name: c.step_bytes for c in vllm.candidates}
    assert fc["w_mxfp4_a_fp8"] == step_cost(project_scheme(tensors, "w_mxfp4_a_fp8"), "").total_bytes
    assert fc["ptpc_fp8 + fc quantized"] < fc["ptpc_fp8"]
    assert fc["ptpc_fp8 + vocab 128 + fc quantized"] < fc["ptpc_fp8 + vocab 128"]
    assert build_ladder(draft, ("fc",), "vllm", []).skipped          # --exclude fc: no quantized fc candidate
    # MXFP6 joins with --engine vllm, between MXFP4 and FP8 in step bytes; SGLang cannot load it
    assert fc["w_mxfp4_a_mxfp4"] < fc["w_mxfp6_e2m3_a_mxfp6_e2m3"] == fc["w_mxfp6_e3m2_a_mxfp6_e3m2"] < fc["ptpc_fp8"]
    assert any(s.startswith("w_mxfp6_e3m2_a_mxfp6_e3m2: --engine both: scheme w_mxfp6_e3m2_a_mxfp6_e3m2 cannot be "
                            "served by sglang") for s in ladder.skipped)
    # --engine auto (the default): every registered scheme an engine serves joins, each row with its engines
    auto = build_ladder(draft, (), "auto", [128])
    engines = {c.name: c.engines for c in auto.candidates}
    assert {c.name for c in auto.candidates} == set(fc) and not any("fc quantized:" in s for s in auto.skipped)
    assert {c.scheme for c in auto.candidates} | {s.split(":")[0].split()[0] for s in auto.skipped} == set(SCHEMES)
    # AWQ (w4a16_int4's rounding) scales the full vocabulary: no pruned-vocabulary rung quantize could not write
    awq = [c for c in auto.candidates if SCHEMES[c.scheme].rounding == "awq"]
    assert awq and all(c.draft_vocab is None for c in awq)
    assert any(s.startswith("w4a16_int4 with a smaller vocabulary: AWQ") for s in auto.skipped)
    assert engines["ptpc_fp8"] == ("vllm", "sglang") and engines["w_mxfp4_a_mxfp4 + vocab 128"] == ("vllm", "sglang")
    assert engines["w_mxfp4_a_fp8"] == engines["ptpc_fp8 + fc quantized"] == ("vllm",)
    assert all(c.native_devices == SCHEMES[c.scheme].native_devices and c.left_out is None for c in auto.candidates)


def _trial(scheme: str, ratio: float, low: float, high: float, top1: float = 0.99, sqnr: float = 40.0,
           step_bytes: int = 100) -> Trial:
    return Trial(Candidate(scheme, None, False, step_bytes), PairedRatio(ratio, low, high, 0.95, 2000), top1, sqnr,
                 None, 0.1)


def _outcome(trial: Trial, gate: float) -> Outcome:
    found = misses(trial, gate)
    return Outcome(trial.candidate, trial, KEPT if not found else "missed: " + "; ".join(found))


def test_the_gate_is_the_lower_bound_and_validate_s_gates():
    fp8 = gates_for_scheme("ptpc_fp8")
    assert misses(_trial("ptpc_fp8", 1.002, 0.991, 1.013), 0.99) == []
    assert misses(_trial("ptpc_fp8", 1.002, 0.985, 1.019), 0.99) == ["lower bound 0.9850 < 0.99"]   # point keeps it
    # a user gate below the scheme's: validate's point gate still holds, as do its top-1 and SQNR gates
    low_gate = misses(_trial("ptpc_fp8", 0.985, 0.97, 0.99, top1=0.90, sqnr=20.0), 0.95)
    assert low_gate == [f"ratio 0.9850 < {fp8.min_acceptance_ratio} (validate)",
                        f"top-1 0.900 < {fp8.min_top1_agreement} (validate)",
                        f"weight SQNR 20.0 dB < {fp8.min_weight_sqnr_db} (validate)"]
    mx = gates_for_scheme("w_mxfp4_a_mxfp4")       # its own, lower top-1 gate
    assert misses(_trial("w_mxfp4_a_mxfp4", 1.0, 0.99, 1.01, top1=mx.min_top1_agreement, sqnr=18.0), 0.99) == []
    assert misses(Trial(Candidate("ptpc_fp8", None, False, 1), None, float("nan"), None, None, 0.1), 0.99) == \
        ["no measurable chain"]


def test_a_probe_stops_only_what_the_rest_of_the_samples_cannot_lift():
    """On 8 of 32 samples the whole set's interval will be half as wide: a ratio whose probe upper bound, less that
    half-width, stays under the gate cannot keep it; validate's top-1 gate likewise on its upper bound."""
    mx = gates_for_scheme("w_mxfp4_a_fp8")
    below = PairedRatio(0.97, 0.95, 0.99, 0.95, 2000)          # 0.99 - 0.02 / 2 = 0.98 < 0.99
    assert clearly_failing(below, 0.95, 8, 32, 0.99, mx) == \
        "ratio at most 0.9900 (95% CI 0.9500..0.9900), so the whole set's lower bound at most 0.9800 < 0.99"
    assert clearly_failing(below, 0.95, 8, 32, 0.97, mx) == ""  # 0.98 keeps a 0.97 gate
    wide = PairedRatio(0.99, 0.96, 1.02, 0.95, 2000)            # 1.02 - 0.015 = 1.005: the rest may lift it
    assert clearly_failing(wide, 0.95, 8, 32, 0.99, mx) == ""
    assert clearly_failing(wide, 0.84, 8, 32, 0.99, mx) == f"top-1 at most 0.840 < {mx.min_top1_agreement} (validate)"
    assert clearly_failing(None, math.nan, 8, 32, 0.99, mx) == ""


def test_a_set_too_small_to_tell_is_refused_with_the_samples_that_would():
    """A ratio above the gate whose interval reaches below it: the half-width must shrink by (ratio - low) /
    (ratio - gate), samples by its square."""
    close = _trial("ptpc_fp8", 1.004, 0.984, 1.024, step_bytes=50)
    assert samples_needed(close, 0.99, 16) == 33                 # 16 * (0.020 / 0.014)^2 = 32.7
    assert samples_needed(_trial("ptpc_fp8", 0.989, 0.97, 1.0), 0.99, 16) is None
    far = _trial("w_mxfp4_a_mxfp4", 0.95, 0.93, 0.97, top1=0.80, step_bytes=10)   # cheaper, but clearly below
    with pytest.raises(AcceptanceGateError) as err:
        choose([_outcome(far, 0.99), _outcome(close, 0.99)], 0.99, 16)
    assert err.value.field == "calib" and "16 calibration samples are too few to tell" in err.value.message
    assert "ptpc_fp8, has 1.0040 (95% CI 0.9840..1.0240)" in err.value.message
    assert "calibrate --num-samples 33" in err.value.message and "nothing written" in err.value.message
    with pytest.raises(AcceptanceGateError, match="no candidate keeps the gate") as err:
        choose([_outcome(far, 0.99)], 0.99, 16)
    assert "w_mxfp4_a_mxfp4's 0.9500" in err.value.message and err.value.field == "min_acceptance_ratio"
    kept = _trial("fp8", 1.01, 0.995, 1.02, step_bytes=80)
    assert choose([_outcome(far, 0.99), _outcome(kept, 0.99), _outcome(close, 0.99)], 0.99, 16).trial is kept


def test_an_older_record_reads_and_renders():
    """A manifest written before the lower-bound gate: no status, top-1, SQNR or native devices; it reads, and its
    table says kept / missed from keeps_gate."""
    from eagle3_quant.records.auto_choice import AutoChoiceRecord, table_rows

    row = {"name": "ptpc_fp8", "scheme": "ptpc_fp8", "draft_vocab": None, "quantize_fc": False, "step_bytes": 10,
           "step_bytes_over_bf16": 0.7, "acceptance_ratio": 1.0, "interval": [0.99, 1.01], "coverage": None,
           "keeps_gate": True, "chosen": True}
    old = {"min_acceptance_ratio": 0.99, "gate": "point", "engine": "both", "k": 3, "calibration": "cal",
           "drafts": 100, "acceptance_length_bf16": 2.0, "bf16_step_bytes": 14,
           "candidates": [row, {**row, "name": "fp8", "scheme": "fp8", "keeps_gate": False, "chosen": False}],
           "chosen": "ptpc_fp8", "seconds": 1.0, "skipped": []}
    record = AutoChoiceRecord.from_dict(old)
    assert record.gate == "point" and record.device_profile is None and record.samples is None
    assert [r[-2:] for r in table_rows(record)] == [("kept", "chosen"), ("missed", "")]
    assert {r[6] for r in table_rows(record)} == {"-"}
    assert AutoChoiceRecord.from_dict(record.to_dict()) == record


def test_refusals_before_any_work(tmp_path: Path, capsys):
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    cal = write_calibration(tmp_path / "cal", write_target(tmp_path / "target"), samples=8)
    with pytest.raises(SchemeError, match="--calib"):
        QuantizeOptions(scheme="auto")
    for bad in (0, -0.5, 1.0001, float("nan")):
        with pytest.raises(OptionsError, match=r"\(0, 1\]"):
            QuantizeOptions(scheme="auto", calib=cal, min_acceptance_ratio=bad)
    with pytest.raises(OptionsError, match="engine"):
        QuantizeOptions(scheme="auto", calib=cal, engine="trt")
    with pytest.raises(OptionsError, match="unknown device profile 'a100'; valid: mi355x, mi300x, h200, h100, b200"):
        QuantizeOptions(scheme="auto", calib=cal, device_profile="a100")
    for flag, value in (("device_profile", "h200"), ("measure_all", True)):
        with pytest.raises(SchemeError, match="chooses among --scheme auto's candidates") as err:
            QuantizeOptions(**{flag: value})
        assert err.value.field == flag
    with pytest.raises(SchemeError, match="--draft-vocab"):
        QuantizeOptions(scheme="auto", calib=cal, draft_vocab=64)
    with pytest.raises(SchemeError, match="--quantize-fc"):
        QuantizeOptions(scheme="auto", calib=cal, quantize_fc=True)
    other = write_calibration(tmp_path / "cal-other", tmp_path / "target", samples=8, target_hidden=32)
    with pytest.raises(DraftFormatError, match="target_hidden_size"):
        quantize_draft(src, tmp_path / "out", scheme="auto", calib=other, device="cpu")
    few = write_calibration(tmp_path / "cal-few", tmp_path / "target", samples=7)
    with pytest.raises(CalibrationDataError, match="7 samples cannot tell one; give at least 8"):
        quantize_draft(src, tmp_path / "out", scheme="auto", calib=few, device="cpu")
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", str(src), str(tmp_path / "out"), "--scheme", "auto", "--calib", str(cal),
              "--min-acceptance-ratio", "1.0001"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "min_acceptance_ratio" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal", "cal-few", "cal-other", "src", "target"]


def not_greedy_calibration(folder: Path, target: Path, samples: int = 8, length: int = 24) -> Path:
    """Token ids the target never predicts next (target_next = id + 1): no chain start is a greedy continuation."""
    from eagle3_quant.records.calibration import CalibrationInfo, CalibrationSample, CalibrationWriter

    gen = torch.Generator().manual_seed(0)
    writer = CalibrationWriter(folder, CalibrationInfo(target=str(target), aux_layer_ids=(1, 2, 3),
                                                       target_hidden_size=64, source="tests"))
    for _ in range(samples):
        ids = torch.randint(0, 511, (length,), generator=gen)
        writer.add(CalibrationSample(ids, torch.randn(length, 3 * 64, generator=gen).to(torch.bfloat16), ids + 1))
    writer.flush()
    return folder


def test_no_measurable_chain_exits_1_and_writes_nothing(tmp_path: Path, capsys):
    """No ratio can be measured, so no candidate keeps a gate: exit 1, one line, nothing written."""
    src = write_synthetic_draft(tmp_path / "src", "tiny")
    cal = not_greedy_calibration(tmp_path / "cal", write_target(tmp_path / "target"))
    before = folder_hashes(src)
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", str(src), str(tmp_path / "out"), "--scheme", "auto", "--calib", str(cal),
              "--device", "cpu", "--engine", "both"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "no chain start" in err[-1] and err[-1].startswith("error: ") and not any("Traceback" in e for e in err)
    assert folder_hashes(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal", "src", "target"]


class Recorder(Silent):
    """What a run says, and how many samples its tasks counted."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.ticks = 0

    def say(self, text: str) -> None:
        self.said.append(text)

    @contextmanager
    def task(self, name: str, total: int, done: int = 0, unit: str = "prompts"):
        def advance(items: int, tokens: int = 0) -> None:
            self.ticks += items

        yield advance


AUTO_PROMPTS = 16      # the target's greedy continuations of 16 held-out prompts: ~800 chains


@pytest.fixture(scope="module")
def auto_pair(tmp_path_factory):
    """The tiny real pair with a small calibration set of the target's own greedy continuations."""
    from safetensors.torch import load_file
    from tiny_pair_fixtures import NEW_TOKENS, PAIR, TinyPair, fixture_module

    capture = fixture_module("tiny_capture")
    root = tmp_path_factory.mktemp("auto-pair")
    prompts = load_file(PAIR / "heldout_prompts.safetensors")["prompts"].long()
    pair = TinyPair(PAIR / "target", PAIR / "draft", root / "unused", root / "calib", prompts)
    capture.write_calibration(capture.greedy_samples(pair.load_target(), prompts[:AUTO_PROMPTS], NEW_TOKENS),
                              pair.calib, str(pair.target))
    return pair


@pytest.fixture(scope="module")
def auto_on_tiny_pair(auto_pair, tmp_path_factory):
    """One `quantize --scheme auto` through the CLI on the tiny real pair: (out, manifest, stdout, stderr)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("auto") / "auto"
    printed, said = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exit_, contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
        main(["quantize", str(auto_pair.draft), str(out), "--scheme", "auto", "--calib", str(auto_pair.calib),
              "--device", "cpu", "--engine", "both"])     # the ladder both engines load (auto widens it)
    assert exit_.value.code == 0, said.getvalue()
    return out, Manifest.read(out), printed.getvalue(), said.getvalue()


@pytest.mark.slow
def test_tiny_pair_auto_stops_at_the_first_keeper_which_validate_passes(auto_on_tiny_pair, auto_pair):
    from eagle3_quant.validate.api import validate_draft

    out, manifest, _, said = auto_on_tiny_pair
    record = manifest.auto_choice
    assert record.prediction["compute_dtype"] == "bfloat16"          # measured as vLLM serves the draft
    assert record.gate == "lower" and record.min_acceptance_ratio == 0.99 and record.engine == "both"
    assert record.samples == AUTO_PROMPTS and not record.measure_all and record.device_profile is None
    rows = record.candidates
    assert [r.step_bytes for r in rows] == sorted(r.step_bytes for r in rows)
    assert {r.scheme for r in rows} == {s for s in SCHEMES if not SCHEMES[s].why_not("sglang")}
    assert all(r.engines == ["vllm", "sglang"] for r in rows) and manifest.engines.serves == ["vllm", "sglang"]
    chosen = record.chosen_candidate
    at = rows.index(chosen)
    assert chosen.status == KEPT and chosen.keeps_gate and chosen.interval[0] >= 0.99
    assert all(r.measured and r.status.startswith("missed: ") for r in rows[:at])      # nothing cheaper kept it
    assert all(not r.measured and r.status == NOT_MEASURED and r.acceptance_ratio is None for r in rows[at + 1:])
    for r in rows[:at + 1]:
        assert r.acceptance_ratio is not None or r.status.startswith("missed: before any sample: weight SQNR")
        assert r.acceptance_ratio is None or r.interval[0] <= r.acceptance_ratio <= r.interval[1]
        assert (r.coverage is not None) == (r.draft_vocab is not None)
    assert chosen.native_devices == list(SCHEMES[chosen.scheme].native_devices)
    assert manifest.scheme.name == chosen.scheme
    assert (manifest.vocab_pruning or {}).get("draft_vocab") == chosen.draft_vocab
    config = json.loads((out / "config.json").read_text())
    assert config["draft_vocab_size"] == (chosen.draft_vocab or 768)
    cost = checkpoint_cost(out)         # `cost` of the artifact counts the same BF16 baseline and step as auto did
    assert (cost.bf16.total_bytes, cost.written.total_bytes) == (record.bf16_step_bytes, chosen.step_bytes)
    # validate on the same set, with the scheme's default gates: it passes them, measuring what auto measured
    report = validate_draft(out, reference=auto_pair.draft, calib=auto_pair.calib, target=auto_pair.target,
                            kernel=False, vllm=False, sglang=False)
    status = {c.name: c.status for c in report.checks}
    assert status["acceptance_ratio"] == status["top1_agreement"] == status["weight_sqnr"] == "passed"
    assert report.metrics.acceptance_ratio == pytest.approx(chosen.acceptance_ratio, abs=1e-9)
    assert report.metrics.acceptance_ratio_interval == pytest.approx(chosen.interval, abs=1e-9)
    assert report.metrics.top1_agreement == pytest.approx(chosen.top1_agreement, abs=1e-9)
    assert report.metrics.min_weight_sqnr_db == pytest.approx(chosen.min_weight_sqnr_db, abs=1e-6)
    assert report.metrics.drafts == record.drafts
    if chosen.coverage is not None:
        assert manifest.vocab_pruning["coverage"] == pytest.approx(chosen.coverage)
    print("\n" + "\n".join(f"{r.name:32s} {r.step_bytes:>9,} {r.acceptance_ratio} {r.status}" for r in rows))


@pytest.mark.slow
def test_tiny_pair_auto_says_each_rung_as_it_is_measured(auto_on_tiny_pair):
    """stderr (the CLI's progress) names every measured rung in ladder order, with its ratio, its gate and the
    time left, before the table on stdout."""
    _, manifest, printed, said = auto_on_tiny_pair
    measured = [r for r in manifest.auto_choice.candidates if r.measured]
    text = " ".join(said.split())                   # the console wraps long lines
    total = len(manifest.auto_choice.candidates)
    at = [text.index(f"{i}/{total} {r.name}: " + (f"ratio {r.acceptance_ratio:.4f}" if r.acceptance_ratio is not None
                                                   else "not drafted")) for i, r in enumerate(measured, 1)]
    assert at == sorted(at) and f"{len(measured) + 1}/{total}" not in text
    for row, start, end in zip(measured, at, [*at[1:], len(text)], strict=True):
        assert row.status in text[start:end] and " left)" in text[start:end]
    assert f"--scheme auto: {total} of {total} candidates to measure, cheapest first up to the first that keeps" in text
    assert "acceptance ratio (95% CI)" not in said and "acceptance ratio (95% CI)" in printed


@pytest.mark.slow
def test_tiny_pair_auto_table_in_cli_and_card(auto_on_tiny_pair):
    from eagle3_quant.export.card import build_card

    out, manifest, printed, _ = auto_on_tiny_pair
    chosen = manifest.auto_choice.chosen_candidate
    assert "acceptance ratio (95% CI)" in printed and f"chose {chosen.name}" in printed
    assert f"natively on {', '.join(chosen.native_devices)}" in " ".join(printed.split())
    card = build_card(out, "org/tiny-auto", target="org/target", base_model="org/draft").text
    assert "### How this candidate was chosen" in card and "acceptance ratio (95% CI)" in card
    assert f"Chosen: **{chosen.name}**" in card and "lower bound" in card
    assert all(f"| {r.name} | {r.step_bytes:,} |" in card for r in manifest.auto_choice.candidates)
    assert f"| {NOT_MEASURED} |" in card or manifest.auto_choice.candidates[-1].chosen


@pytest.mark.slow
def test_tiny_pair_measure_all_measures_every_rung_and_chooses_the_same(auto_on_tiny_pair, auto_pair, tmp_path):
    """--measure-all: the whole table, the same choice, and the rungs the early stop measured unchanged."""
    _, manifest, _, _ = auto_on_tiny_pair
    progress = Recorder()
    result = quantize_draft(auto_pair.draft, tmp_path / "all", QuantizeOptions(
        scheme="auto", calib=auto_pair.calib, device="cpu", engine="both", measure_all=True), progress=progress)
    every, early = result.manifest.auto_choice, manifest.auto_choice
    assert every.measure_all and every.chosen == early.chosen
    assert all(r.measured and r.status.startswith(("kept", "missed: ")) for r in every.candidates)
    for a, b in zip(early.candidates, every.candidates, strict=True):
        assert a.name == b.name
        if a.measured and not _stopped_early(a):
            assert (a.acceptance_ratio, a.interval, a.top1_agreement) == \
                (b.acceptance_ratio, b.interval, b.top1_agreement)
        if _stopped_early(a):               # the early stop is sound here: every sample confirms the miss
            assert b.status.startswith("missed: ") and a.min_weight_sqnr_db == b.min_weight_sqnr_db
    assert progress.ticks == AUTO_PROMPTS * (1 + len(every.candidates))     # the BF16 draft once, then each rung
    assert sum(": kept (" in s or ": missed: " in s for s in progress.said) == len(every.candidates)


def _stopped_early(row) -> bool:
    return row.status.startswith(("missed: before any sample", "missed: stopped after"))


def first_samples(calib: Path, folder: Path, n: int) -> Path:
    """The first `n` samples of a calibration set, as a set of their own."""
    from eagle3_quant.records.calibration import CalibrationWriter, load_calibration

    source = load_calibration(calib)
    writer = CalibrationWriter(folder, source.info)
    for _, sample in zip(range(n), source.samples(), strict=False):
        writer.add(sample)
    writer.flush()
    return folder


@pytest.mark.slow
def test_tiny_pair_too_few_samples_to_tell_says_how_many(auto_pair, tmp_path, capsys):
    """On 8 samples, a gate above every lower bound that keeps validate's gates and below one of their ratios:
    nothing keeps it, and the refusal names the rung and the samples that would tell."""
    few = first_samples(auto_pair.calib, tmp_path / "cal-8", 8)
    every = quantize_draft(auto_pair.draft, tmp_path / "all", QuantizeOptions(
        scheme="auto", calib=few, device="cpu", engine="both", measure_all=True,
        min_acceptance_ratio=0.5)).manifest.auto_choice
    valid = [r for r in every.candidates if all(m.startswith("lower bound") for m in _row_misses(r, 1.0))]
    gate = round(max(r.interval[0] for r in valid) + 5e-4, 4)
    close = [r for r in valid if r.acceptance_ratio > gate]
    assert gate <= 1 and close, [(r.name, r.acceptance_ratio, r.interval) for r in valid]
    needed = samples_needed(_row_trial(close[0]), gate, 8)
    assert needed > 8
    with pytest.raises(SystemExit) as exit_:
        main(["quantize", str(auto_pair.draft), str(tmp_path / "out"), "--scheme", "auto", "--calib", str(few),
              "--device", "cpu", "--engine", "both", "--min-acceptance-ratio", str(gate)])
    assert exit_.value.code == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"8 calibration samples are too few to tell: the cheapest candidate whose ratio clears " \
        f"--min-acceptance-ratio {gate}, {close[0].name}, has {close[0].acceptance_ratio:.4f}" in err
    assert f"calibrate --num-samples {needed}" in err and "nothing written" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_tiny_pair_each_device_profile_measures_what_it_runs_natively(auto_pair, tmp_path):
    """MXFP4's GEMM is native on MI355X, not on H200 (schemes.py): with attention alone quantized (--exclude mlp) and
    gate 0.97, MI355X writes MXFP4 (tiny pair: 0.9978, 0.9807..1.0139, top-1 0.883) and H200, which leaves every
    MXFP4 row out saying why, the cheapest FP8."""
    records = {}
    for profile in ("mi355x", "h200"):
        records[profile] = quantize_draft(auto_pair.draft, tmp_path / profile, QuantizeOptions(
            scheme="auto", calib=auto_pair.calib, device="cpu", engine="both", exclude=("mlp",),
            min_acceptance_ratio=0.97, device_profile=profile)).manifest.auto_choice
    for profile, record in records.items():
        assert record.device_profile == profile
        for row in record.candidates:
            native = profile in SCHEMES[row.scheme].native_devices
            assert row.status.startswith("left out: ") != native, row
            if not native:
                assert row.status == f"left out: {profile} runs no {row.scheme} GEMM natively (native on " \
                    f"{', '.join(SCHEMES[row.scheme].native_devices)})" and not row.measured
        assert profile in record.chosen_candidate.native_devices
    mi355x, h200 = records["mi355x"].chosen_candidate, records["h200"].chosen_candidate
    assert (mi355x.scheme, h200.scheme) == ("w_mxfp4_a_mxfp4", "fp8")
    assert mi355x.step_bytes < h200.step_bytes


@pytest.mark.slow
def test_tiny_pair_a_candidate_measures_what_validate_measures_on_its_artifact(auto_pair, tmp_path):
    """One scheme Quark writes for the ladder (AWQ or NVFP4: ``auto_measure.in_memory`` is false; with fc quantized
    too) and one new scheme simulated in memory: ratio, interval, top-1 and weight SQNR equal `validate`'s on the
    artifact `quantize` writes, on the same set."""
    from eagle3_quant.quantize.auto_measure import Measurer, in_memory
    from eagle3_quant.quantize.calibration import check_calibration
    from eagle3_quant.quantize.vocab_prune import target_token_counts
    from eagle3_quant.records.calibration import load_calibration
    from eagle3_quant.validate.api import validate_draft

    written = [s for s in SCHEMES.values() if not in_memory(s)]
    simulated = [s for s in SCHEMES.values() if in_memory(s) and s.weight.kind not in ("fp8", "mx")]
    if not written or not simulated:
        pytest.skip("the registry holds no scheme measured through Quark's own write, or none beside FP8 and MX")
    draft = read_draft(auto_pair.draft)
    view = check_calibration(draft, load_calibration(auto_pair.calib), (1, 2, 3))   # the trained layers it is served
    measurer = Measurer(draft, view, auto_pair.calib, target_token_counts(auto_pair.calib, 1024), (), "auto", "cpu", 3,
                        write=quantize_draft)
    try:
        for scheme, fc in ((written[0], True), (simulated[0], False)):
            trial = measurer.measure(Candidate(scheme.name, None, fc, 0))
            out = quantize_draft(auto_pair.draft, tmp_path / scheme.name, scheme=scheme.name, calib=auto_pair.calib,
                                 quantize_fc=fc, device="cpu").output
            metrics = validate_draft(out, reference=auto_pair.draft, calib=auto_pair.calib, target=auto_pair.target,
                                     kernel=False, vllm=False, sglang=False).metrics
            assert (metrics.acceptance_ratio, *metrics.acceptance_ratio_interval) == pytest.approx(
                (trial.paired.ratio, trial.paired.low, trial.paired.high), abs=1e-9), scheme.name
            assert metrics.top1_agreement == pytest.approx(trial.top1, abs=1e-9)
            assert metrics.min_weight_sqnr_db == pytest.approx(trial.min_sqnr_db, abs=1e-6)
    finally:
        measurer.close()


def _row_trial(row) -> Trial:
    return Trial(Candidate(row.scheme, row.draft_vocab, row.quantize_fc, row.step_bytes),
                 PairedRatio(row.acceptance_ratio, *row.interval, 0.95, 2000), row.top1_agreement,
                 row.min_weight_sqnr_db, row.coverage, 0.0)


def _row_misses(row, gate: float) -> list[str]:
    return misses(_row_trial(row), gate)


def auto_pipeline(tmp_path: Path, **quantize) -> Path:
    import yaml

    data = {"pipeline_version": 1, "source": "org/draft", "target": "org/target", "scheme": "auto",
            "workdir": str(tmp_path / "work"), "push": {"enabled": False},
            "calibrate": {"data": "org/chats"}, "quantize": quantize}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_pipeline_scheme_auto_reaches_quantize_options(tmp_path: Path):
    import yaml

    from eagle3_quant.errors import PipelineSpecError
    from eagle3_quant.pipeline_spec import load_pipeline, quantize_options

    spec = load_pipeline(auto_pipeline(tmp_path, min_acceptance_ratio=0.98, engine="vllm"))
    options = quantize_options(spec)
    assert (options.scheme, options.calib, options.min_acceptance_ratio, options.engine) == (
        "auto", spec.calib, 0.98, "vllm")
    with pytest.raises(PipelineSpecError, match=r"field 'quantize.min_acceptance_ratio': must be in \(0, 1\]"):
        load_pipeline(auto_pipeline(tmp_path, min_acceptance_ratio=1.5))
    path = auto_pipeline(tmp_path)
    data = yaml.safe_load(path.read_text())
    del data["calibrate"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PipelineSpecError, match="field 'calibrate.data': scheme 'auto' needs calibration data"):
        load_pipeline(path)


def test_reference_once_pairs_as_calibration_fidelity(quantized_tiny, tmp_path: Path):
    """`--scheme auto` drafts the reference once (`draft_chains`) and pairs it with each candidate: the ratio, its
    interval, the stats and the top-1 agreement equal `calibration_fidelity`'s, which `validate` runs."""
    from eagle3_quant.records.calibration import load_calibration
    from eagle3_quant.runtime.acceptance import (
        acceptance_stats,
        calibration_fidelity,
        chain_acceptance,
        draft_chains,
        paired_ratio,
        top1_agreement,
    )
    from eagle3_quant.runtime.loading import load_draft

    src, out = quantized_tiny()
    cal = load_calibration(write_calibration(tmp_path / "cal", write_target(tmp_path / "target"), samples=4))
    ref, cand = load_draft(src, "cpu", torch.float32), load_draft(out, "cpu", torch.float32)
    for draft in (ref, cand):
        draft.set_embedding(torch.randn(512, 64, generator=torch.Generator().manual_seed(1)))
    whole = calibration_fidelity(cand, ref, cal, 3)
    chains_ref, chains_cand = draft_chains(ref, cal, 3), draft_chains(cand, cal, 3)
    assert whole.reference.drafts > 0
    assert paired_ratio(chains_ref.accepted, chains_cand.accepted) == whole.ratio
    assert all(torch.equal(a, b) for a, b in zip(chain_acceptance(ref, cal, 3), chains_ref.accepted, strict=True))
    assert acceptance_stats(chains_ref.accepted, 3) == whole.reference
    assert acceptance_stats(chains_cand.accepted, 3) == whole.candidate
    assert top1_agreement(chains_ref, chains_cand) == whole.top1_agreement < 1.0


@pytest.mark.slow
def test_run_says_each_auto_rung_of_its_quantize_stage(auto_pair, tmp_path: Path):
    """`run` hands its progress to quantize: a pipeline with `scheme: auto` says each measured rung as `quantize
    --scheme auto` does, between the stage's own lines."""
    import shutil

    import yaml

    from eagle3_quant.pipeline import run_pipeline

    work = tmp_path / "work"
    shutil.copytree(auto_pair.calib, work / "calib")       # present, whole, for this target: the stage skips
    data = {"pipeline_version": 1, "source": str(auto_pair.draft), "target": str(auto_pair.target),
            "scheme": "auto", "workdir": str(work), "calibrate": {"data": "org/chats", "num_samples": AUTO_PROMPTS},
            "quantize": {"min_acceptance_ratio": 0.9}, "validate": {"enabled": False},
            "bench": {"enabled": False}, "push": {"enabled": False}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    said = Said()
    result = run_pipeline(path, progress=said)
    assert [s.status for s in result.stages] == ["skipped", "ran", "disabled", "disabled", "disabled"]
    record = Manifest.read(work / "draft-fp8").auto_choice
    measured = [r for r in record.candidates if r.measured]
    lines = said.lines
    runs, ran = lines.index("[2/5] quantize: runs (no artifact in " f"{work / 'draft-fp8'})"), \
        next(i for i, line in enumerate(lines) if line.startswith("[2/5] quantize: ran in "))
    rungs = [line for line in lines[runs + 1:ran] if f"/{len(record.candidates)} " in line]
    assert len(rungs) == len(measured) >= 1
    assert all(f"{r.name}: ratio {r.acceptance_ratio:.4f}" in line for r, line in zip(measured, rungs, strict=True))


@pytest.mark.slow
def test_auto_pairs_every_rung_with_the_serve_taps_drafting(auto_pair):
    """The BF16 draft's chains the serve-taps measurement drafted are the reference auto pairs every rung with:
    the same chains its own drafting gives (drafted once, not twice)."""
    from eagle3_quant.quantize.auto import AUTO_K
    from eagle3_quant.quantize.auto_measure import Measurer
    from eagle3_quant.quantize.calibration import check_calibration
    from eagle3_quant.quantize.serve_taps import decide_serve_taps, measure_serve_taps
    from eagle3_quant.quantize.vocab_prune import target_token_counts
    from eagle3_quant.records.calibration import load_calibration

    draft = read_draft(auto_pair.draft)
    measured = measure_serve_taps(draft, auto_pair.calib, "cpu")
    taps = decide_serve_taps(draft, "trained", auto_pair.calib, ("vllm",), "cpu", measured)
    reused = measured.chains(taps.indices, AUTO_K)
    assert reused is not None and measured.chains(taps.indices, AUTO_K + 1) is None
    calibration = check_calibration(draft, load_calibration(auto_pair.calib), taps.indices)
    counts = target_token_counts(auto_pair.calib, draft.config.vocab_size)
    own = Measurer(draft, calibration, auto_pair.calib, counts, (), "auto", "cpu", AUTO_K).drafts()
    assert len(own.accepted) == len(reused.accepted) == AUTO_PROMPTS
    assert all(torch.equal(a, b) for a, b in zip(own.accepted, reused.accepted, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(own.first, reused.first, strict=True))
    ticks = []
    Measurer(draft, calibration, auto_pair.calib, counts, (), "auto", "cpu", AUTO_K,
             reference=reused).drafts(lambda: ticks.append(1))
    assert len(ticks) == AUTO_PROMPTS          # progress counts the reference's samples all the same


def test_the_table_keeps_a_stopped_rung_to_where_it_stopped():
    from eagle3_quant.cli.render_auto import short_gate

    assert short_gate("missed: stopped after 32 of 128 samples: ratio at most 0.9806 (95% CI 0.9608..0.9806), so "
                      "the whole set's lower bound at most 0.9757 < 0.99") == "missed: stopped after 32 of 128 samples"
    assert short_gate("missed: before any sample: weight SQNR 9.1 dB < 12 (validate)") == \
        "missed: before any sample"
    assert short_gate("missed: lower bound 0.9860 < 0.99") == "missed: lower bound 0.9860 < 0.99"
    assert short_gate(KEPT) == KEPT
