"""The model card of a GGUF draft (`eagle3-quant gguf`): the file, how it was made, validate's offline prediction in
llama.cpp's arithmetic, what llama.cpp's server measured (`bench --engine llamacpp`) and the `llama-server` line.
Built only from recorded facts (manifest, validation.json, bench.json, speedup_estimate.json); a number none holds is
"not measured"."""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.errors import BenchRecordError, EstimateInputError
from eagle3_quant.export.card_estimate import vocab_text
from eagle3_quant.export.card_names import card_names
from eagle3_quant.records.llamacpp_bench import LlamaCppBenchRun, SpeedRatio
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.records.public_names import public_argv
from eagle3_quant.records.speedup_estimate import ESTIMATE_NAME, SpeedupEstimate
from eagle3_quant.records.validation_report import ValidationSummary
from eagle3_quant.util.formatting import NOT_MEASURED, differences_text, interval, number
from eagle3_quant.util.hashing import sha256_file

TEMPLATE_PATH = Path(__file__).with_name("card_gguf_template.md")
BASE_TAGS = ("eagle3", "speculative-decoding", "draft-model", "gguf", "llama.cpp")


def _speed(ratio: SpeedRatio) -> str:
    return f"{ratio.ratio:.2f}x ({ratio.low:.2f}..{ratio.high:.2f})"


def bench_section(out: Path, files: dict[str, str]) -> dict | None:
    """What llama.cpp measured for exactly these files, as the card's rows; None when nothing was."""
    try:
        run = LlamaCppBenchRun.read(out)
    except BenchRecordError:
        return None
    if not run.measured(files):
        return None
    engine, prompts = run.engine, run.prompts
    target = run.target
    intro = (f"llama.cpp {engine.get('build_info')} ({engine.get('package') or 'own build'}) on "
             f"{engine.get('device')}, {engine.get('threads')} threads; target `{target.get('name')}` "
             f"({target.get('architecture')}, {target.get('layers')} layers); {prompts.count} prompts from "
             f"`{prompts.source}`, {prompts.max_tokens} new tokens, k={run.k}, greedy; speeds from interleaved "
             "repetitions, 95% paired bootstrap intervals.")
    acceptance = [(label, number(row.acceptance_length, ".3f"), " ".join(number(x, ".3f") for x in row.per_position),
                   str(row.drafts)) for label, (_, row) in zip(("BF16 draft", "this draft"), run.acceptance.items(),
                                                                strict=True)]
    ratio = run.acceptance_ratio
    same = run.lossless
    lossless = "Greedy output with the draft equals the output without: " + "; ".join(
        f"{name} {m.equal_sequences}/{m.sequences}{differences_text(m)}" for name, m in same.drafts.items()) + "."
    speed = [(str(s.slots), number(s.tokens_per_s.get("none"), ".1f"), _speed(s.speedup.reference),
              _speed(s.speedup.artifact), _speed(s.artifact_over_reference),
              f"{_speed(s.decode_speedup.reference)}, {_speed(s.decode_speedup.artifact)}") for s in run.speed]
    breakdown = [(f"{p.context} ({p.depth})", name, f"{d.tokens_per_step:.2f}", f"{d.step_ms:.1f}",
                  number(d.draft_ms, ".1f"), f"{d.verify_ms:.1f}", number(d.rest_ms, ".1f"), f"{p.token_ms:.2f}",
                  f"{d.break_even_tokens:.2f}") for p in run.breakdown for name, d in p.drafts.items()]
    text = f"Acceptance ratio this / BF16: **{ratio.ratio:.4f}** (95% {interval(ratio.low, ratio.high)})"
    predicted = run.predicted
    if predicted is not None and predicted.acceptance_ratio is not None:
        text += (f"; `validate` predicted {predicted.acceptance_ratio:.4f} ({interval(*predicted.interval)}) on the "
                 "same prompts in llama.cpp's arithmetic")
    return {"intro": intro, "acceptance": acceptance, "lossless": lossless, "speed": speed, "breakdown": breakdown,
            "ratio": text + ".",
            "verdict": run.verdict, "k": run.k}


def _estimate(out: Path, files: dict[str, str], report_sha256: str | None) -> str | None:
    path = out / ESTIMATE_NAME
    if not path.is_file():
        return None
    try:
        est = SpeedupEstimate.read(path)
    except (OSError, EstimateInputError):
        return None
    if est.artifact_files != files or est.validation_sha256 != report_sha256:
        return None
    token = est.token_ms or est.verify_ms
    text = (f"{est.tokens_per_round:.3f} tokens a cycle (offline) x one target token {token:.2f} ms / (drafting "
            f"{est.draft_ms:.2f} + verify {est.verify_ms:.2f} ms) = **{est.speedup_vs_no_spec:.2f}x**")
    if est.measured:
        low, high = est.measured["interval"]
        text += (f"; llama.cpp measured {est.measured['speedup']:.2f}x ({low:.2f}..{high:.2f}) decoding: the "
                 f"estimate is {'inside' if est.measured['inside_interval'] else 'outside'} its interval")
    return text + "."


def _metric_rows(validation: ValidationSummary, label: str) -> list[tuple[str, str]]:
    m = validation.metrics
    return [("acceptance length, BF16 draft", number(m.acceptance_length_bf16, ".3f", NOT_MEASURED)),
            (f"acceptance length, {label}", number(m.acceptance_length_fp8, ".3f", NOT_MEASURED)),
            (f"acceptance ratio {label} / BF16", number(m.acceptance_ratio, ".4f", NOT_MEASURED)),
            (f"top-1 agreement {label} vs BF16", number(m.top1_agreement, ".4f", NOT_MEASURED)),
            ("lowest weight SQNR (dB)", number(m.min_weight_sqnr_db, ".1f", NOT_MEASURED)),
            ("validation gates", validation.gates or NOT_MEASURED)]


def build_gguf_card(out: Path, manifest: Manifest, validation: ValidationSummary, files: dict[str, str],
                    repo_id: str | None, target: str | None, base_model: str | None, unmeasured: bool):
    """(card text, its metadata, the names it used)."""
    from huggingface_hub import ModelCard, ModelCardData

    record = manifest.gguf
    names = card_names(out, manifest, validation, None, repo_id, target, base_model)
    report_sha256 = sha256_file(validation.path) if validation.path.is_file() else None
    bench = bench_section(out, files)
    data = ModelCardData(base_model=names.base_model, base_model_relation="quantized", library_name="gguf",
                         tags=[*BASE_TAGS, record.label.lower()], **(manifest.source.card or {}))
    taps = record.taps
    taps_text = f"{taps.get('target_layers')} (the input of each target layer): {taps.get('origin')}"
    if taps.get("converter_alone") != taps.get("target_layers"):
        taps_text += (f"; llama.cpp's converter alone would have written {taps.get('converter_alone')}, layers the "
                      "draft was not trained on")
    quantized_by = None if record.type == "bf16" else (
        "its blocks carried bit for bit from a Quark artifact" if record.carried else "llama-quantize")
    card = ModelCard.from_template(
        data, template_path=str(TEMPLATE_PATH), title=names.repo_id.split("/")[-1], label=record.label,
        source_link=f"[{names.base_model}](https://huggingface.co/{names.base_model})",
        target_text=f"`{names.target}`", quantized_by=quantized_by,
        build=record.llama_cpp.get("build_info"), versions=manifest.versions, file=record.file,
        k=bench["k"] if bench else 3, summary=_summary(record.type), made_by=record.made_by, taps=taps_text,
        kept="; ".join(f"`{n}`: {why}" for n, why in record.kept.items()) or "nothing",
        fallbacks="; ".join(record.fallbacks), carried=(f"{record.carried['tensors']} tensors: "
                                                        f"{record.carried['proof']}" if record.carried else None),
        vocab_text=vocab_text(manifest.vocab_pruning),
        llama_cpp=", ".join(f"{k} {v}" for k, v in record.llama_cpp.items() if v is not None),
        tensors=[(name, " x ".join(map(str, row.shape)), row.type, f"`{row.source}`" if row.source else "-")
                 for name, row in record.tensors.items()],
        validation_headline=validation.headline, metric_rows=_metric_rows(validation, record.label),
        bench=bench, estimate=_estimate(out, files, report_sha256), unmeasured=unmeasured,
        reproduce=[f"eagle3-quant gguf {names.base_model} OUT --target {names.target} --type {record.type}",
                   f"eagle3-quant validate OUT --reference {names.base_model} --calib CAL",
                   "eagle3-quant bench OUT --target TARGET.gguf --prompts P",
                   f"eagle3-quant push OUT --repo-id {names.repo_id}"],
        recorded_command=" ".join(public_argv(manifest.command)) if manifest.command else "")
    return str(card), card.data.to_dict(), names


def _summary(kind: str) -> str:
    from eagle3_quant.engines.llamacpp.types import gguf_type

    return gguf_type(kind).summary
