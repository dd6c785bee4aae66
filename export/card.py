"""The model card (OUT/README.md): what the artifact is, how it was made, how good it is, how to serve it.

Built only from recorded facts: the manifest (`eagle3_quant.json`), the validation report and config.json.
A number the report does not hold is printed as "not measured", never estimated. The card is not listed in
the manifest's outputs (the manifest hashes the quantized artifact, the card is derived from it afterwards).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3_quant.engines.draft_support import ENGINE_NAMES
from eagle3_quant.errors import PublishError
from eagle3_quant.export.card_auto import auto_section
from eagle3_quant.export.card_engine import engine_rows
from eagle3_quant.export.card_estimate import estimate_rows, vocab_text
from eagle3_quant.export.card_names import card_names
from eagle3_quant.export.card_taps import taps_section
from eagle3_quant.reading.source_card import source_card_info
from eagle3_quant.records.evidence import CARD_NAME, check_integrity, manifest_digests
from eagle3_quant.records.manifest import LayerRecord, Manifest, SourceRecord
from eagle3_quant.records.public_names import public_argv
from eagle3_quant.records.validation_report import (
    ValidationSummary,
    acceptance_measurements,
    read_validation,
)
from eagle3_quant.schemes import SCHEMES, amd_gemm, precision_label, precision_words
from eagle3_quant.util.formatting import NOT_MEASURED, number
from eagle3_quant.util.hashing import sha256_file

TEMPLATE_PATH = Path(__file__).with_name("card_template.md")
BASE_TAGS = ("eagle3", "speculative-decoding", "draft-model")
LIBRARY_NAME = "vllm"
DEFAULT_ROLES_KEPT = frozenset({"fc", "lm_head"})


@dataclass(frozen=True)
class DraftCard:
    """A rendered card and the facts it was built from."""

    text: str
    metadata: dict[str, Any]
    repo_id: str
    base_model: str | None
    target: str | None
    validation: ValidationSummary
    path: Path | None = None          # where it was written; None when only rendered

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8"))


def _config_verifier(out: Path, config: dict | None = None) -> str | None:
    """The verifier a speculators config names (`config`: config.json as already read, else read here)."""
    try:
        config = config if config is not None else json.loads((out / "config.json").read_text(encoding="utf-8"))
        spec = config.get("speculators_config")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    verifier = spec.get("verifier") if isinstance(spec, dict) else None
    name = verifier.get("name_or_path") if isinstance(verifier, dict) else None
    return name if isinstance(name, str) else None


def _metric_rows(validation: ValidationSummary, label: str) -> list[tuple[str, str]]:
    m = validation.metrics
    kernel = validation.kernel
    if kernel.get("status"):
        where = ", ".join(str(kernel[k]) for k in ("device", "backend") if kernel.get(k))
        kernels = [str(k.get("name", k)) if isinstance(k, dict) else str(k) for k in kernel.get("kernels") or []][:3]
        kernel_text = f"{kernel['status']}" + (f" on {where}" if where else "") + (
            f"; kernels: {', '.join(f'`{k}`' for k in kernels)}" if kernels else "")
    else:
        kernel_text = NOT_MEASURED
    return [
        ("acceptance length, BF16 draft", number(m.acceptance_length_bf16, ".3f", NOT_MEASURED)),
        (f"acceptance length, {label} draft", number(m.acceptance_length_fp8, ".3f", NOT_MEASURED)),
        (f"acceptance ratio {label} / BF16", number(m.acceptance_ratio, ".4f", NOT_MEASURED)),
        ("acceptance predicted with", validation.prediction or NOT_MEASURED),
        (f"top-1 agreement {label} vs BF16", number(m.top1_agreement, ".4f", NOT_MEASURED)),
        (f"logit KL (BF16 to {label})", number(m.kl, ".3g", NOT_MEASURED)),
        (f"{label} kernel check", kernel_text),
        ("validation gates", validation.gates or NOT_MEASURED),
    ]


def _engines_text(manifest: Manifest) -> str:
    """The engines the artifact is for and why another is left out (manifests before --engine auto: unknown)."""
    engines = manifest.engines
    if engines is None:
        return "not recorded"
    served = ", ".join(ENGINE_NAMES.get(e, e) for e in engines.serves) or "none"
    left = "; ".join(f"{ENGINE_NAMES.get(e, e)} left out: {why}" for e, why in engines.left_out.items())
    return f"{served} (`--engine {engines.requested}`)" + (f"; {left}" if left else "")


def _reproduce(source: SourceRecord, base_model: str, scheme: str, layers: list[LayerRecord], repo_id: str,
               pruned_to: int | None = None, gptq: bool = False, serve_taps=None,
               engine: str | None = None) -> list[str]:
    src = source.repo_id or base_model
    revision = f" --revision {source.commit}" if source.repo_id and source.commit else ""
    flags = [f" --exclude {d.module}" for d in layers if not d.quantized and d.role not in DEFAULT_ROLES_KEPT]
    if any(d.quantized and d.role == "fc" for d in layers):
        flags.append(" --quantize-fc")
    calib = " --calib CAL" if SCHEMES.get(scheme) and SCHEMES[scheme].needs_calibration else ""
    if pruned_to is not None:
        flags.append(f" --draft-vocab {pruned_to}" + ("" if calib else " --calib CAL"))
    if gptq:
        flags.append(" --gptq" + ("" if calib or pruned_to is not None else " --calib CAL"))
    if serve_taps is not None and serve_taps.mode == "as-is":
        flags.append(" --serve-taps as-is")
    elif serve_taps is not None and serve_taps.decided_by == "measurement" and not (calib or pruned_to or gptq):
        flags.append(" --calib CAL")        # the layers were chosen by measuring the candidates on it
    if engine and engine != "auto":
        flags.append(f" --engine {engine}")
    return [f"eagle3-quant quantize {src} OUT --scheme {scheme}{revision}{calib}{''.join(flags)}",
            f"eagle3-quant validate OUT --reference {src}{calib or (' --calib CAL' if pruned_to else '')}",
            f"eagle3-quant push OUT --repo-id {repo_id}"]


def _calibration_text(manifest: Manifest, label: str) -> str:
    calib, gptq = manifest.calibration, manifest.gptq
    if calib and calib.get("samples"):
        text = (f"{calib['samples']} samples, {calib.get('tokens', '?')} draft positions over "
                f"{calib.get('steps', '?')} draft steps (static input scales)")
    elif gptq:
        text = "no activation scales (per token at run time)"
    else:
        return "none: no data needed (weight scales from the weights, activation scales per token at run time)"
    if gptq:
        text += (f"; GPTQ rounding (Quark's) of the {label} weights on {gptq.get('samples', '?')} samples, "
                 f"{gptq.get('positions', '?')} draft positions x {gptq.get('steps', '?')} draft steps")
    return text


def _sglang_check(validation: ValidationSummary):
    return next((c for c in validation.checks if c.name == "sglang_load"), None)


def _recorded_command(argv: list[str] | None) -> str:
    """The recorded quantize command (verb, flags, public names; older manifests' local paths reduced to names)."""
    return " ".join(public_argv(argv)) if argv and argv[0].startswith("eagle3-quant") else ""


def build_card(out: str | Path, repo_id: str | None = None, *, target: str | None = None,
               base_model: str | None = None, pipeline: str | None = None,
               validation: ValidationSummary | None = None, manifest: Manifest | None = None,
               config: dict | None = None, checked: bool = False) -> DraftCard:
    """Render the card in memory from OUT's manifest, validation report and config (`manifest`, `config`: as the
    caller already read them). Refused for an artifact whose files are not what its manifest lists (`checked`:
    the caller has just checked that), and for a name it cannot give by its Hub id (`card_names`)."""
    from huggingface_hub import ModelCard, ModelCardData

    out = Path(out)
    manifest = manifest or Manifest.read(out, PublishError)
    if not checked:
        check_integrity(out, manifest, PublishError)
    digests = manifest_digests(manifest)
    validation = validation or read_validation(out, digests)
    if manifest.gguf is not None:
        from eagle3_quant.export.card_gguf import build_gguf_card

        text, metadata, found = build_gguf_card(out, manifest, validation, digests, repo_id, target, base_model,
                                                not acceptance_measurements(out, validation, digests))
        return DraftCard(text, metadata, found.repo_id, found.base_model, found.target, validation)
    names = card_names(out, manifest, validation, _config_verifier(out, config), repo_id, target, base_model)
    repo_id, target, base_model = names.repo_id, names.target, names.base_model
    source, scheme = manifest.source, manifest.scheme
    report_sha256 = sha256_file(validation.path) if validation.path.is_file() else None
    license_info = source.card
    if license_info is None and source.path and Path(source.path).is_absolute() and Path(source.path).is_dir():
        license_info = source_card_info(source.path)  # manifests written before licenses were recorded
    label = precision_label(scheme.name)
    card_data = ModelCardData(base_model=base_model, base_model_relation="quantized", library_name=LIBRARY_NAME,
                              tags=[*BASE_TAGS, label.lower(), "amd-quark", scheme.name], **(license_info or {}))
    layers = manifest.layers
    quantized = [d for d in layers if d.quantized]
    kept = [d for d in layers if not d.quantized]
    versions = manifest.versions
    source_text = (f"[{source.repo_id}](https://huggingface.co/{source.repo_id}) at commit "
                   f"`{source.commit or source.revision or 'main'}`" if source.repo_id
                   else f"[{base_model}](https://huggingface.co/{base_model}), quantized from a local copy")
    card = ModelCard.from_template(
        card_data, template_path=str(TEMPLATE_PATH),
        title=repo_id.split("/")[-1], repo_id=repo_id, source=source, scheme=scheme,
        scheme_summary=SCHEMES[scheme.name].summary if scheme.name in SCHEMES else "",
        source_link=f"[{base_model}](https://huggingface.co/{base_model})",
        source_text=source_text, target_text=f"`{target}`", target_cli=target,
        versions={k: versions.get(k, "?") for k in (
            "eagle3-quant", "amd-quark", "torch", "transformers", "safetensors", "huggingface_hub")} | versions,
        quantized_modules=", ".join(f"`{d.module}`" for d in quantized) or "none",
        kept_modules=", ".join(f"`{d.module}` ({d.reason})" for d in kept) or "none",
        vllm_patterns=", ".join(f"`{p}`" for p in manifest.exclude.vllm_patterns) or "none",
        tools=", ".join(f"{k} {versions[k]}" for k in ("eagle3-quant", "amd-quark", "torch", "transformers",
                                                        "huggingface_hub") if k in versions),
        layers=layers, fc_quantized=any(d.role == "fc" for d in quantized),
        validation_headline=validation.headline, metric_rows=_metric_rows(validation, label),
        label=label, precision=precision_words(scheme.name), amd_gemm=amd_gemm(scheme.name),
        estimate_rows=estimate_rows(out, digests, report_sha256, validation.metrics.per_position_acceptance_fp8),
        engine_rows=engine_rows(validation.engine_run),
        vocab_text=vocab_text(manifest.vocab_pruning),
        auto=auto_section(manifest.auto_choice), taps=taps_section(manifest.serve_taps, validation),
        checks=validation.checks, pipeline=pipeline, sglang=_sglang_check(validation),
        engines_text=_engines_text(manifest),
        sglang_left_out=(manifest.engines.left_out.get("sglang") if manifest.engines is not None else None),
        vllm_taps_notes=[n for n in validation.taps_notes if n.startswith("vllm ")],
        sglang_taps_notes=[n for n in validation.taps_notes if n.startswith("sglang ")],
        reproduce=_reproduce(source, base_model, scheme.name, layers, repo_id,
                             (manifest.vocab_pruning or {}).get("draft_vocab"), manifest.gptq is not None,
                             manifest.serve_taps, manifest.engines.requested if manifest.engines else None),
        recorded_command=_recorded_command(manifest.command), device=manifest.device,
        outputs=manifest.outputs, inputs=manifest.inputs, calibration_text=_calibration_text(manifest, label),
        unmeasured=not acceptance_measurements(out, validation, digests),
    )
    return DraftCard(str(card), card.data.to_dict(), repo_id, base_model, target, validation)


def write_card(out: str | Path, card: DraftCard) -> DraftCard:
    """Write README.md atomically (temp file in OUT, then rename): a reader never sees half a card."""
    out = Path(out)
    final = out / CARD_NAME
    tmp = out / f".{CARD_NAME}.tmp-{os.getpid()}"
    try:
        tmp.write_text(card.text, encoding="utf-8")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return DraftCard(card.text, card.metadata, card.repo_id, card.base_model, card.target, card.validation, final)


def make_card(out: str | Path, repo_id: str | None = None, *, target: str | None = None,
              base_model: str | None = None, pipeline: str | None = None, write: bool = True) -> DraftCard:
    """Build OUT's model card and (unless write=False) write it to OUT/README.md. A validation report that is there
    but cannot be read is refused naming it (none, or another artifact's: the card says not validated)."""
    out = Path(out)
    manifest = Manifest.read(out, PublishError)
    check_integrity(out, manifest, PublishError)
    validation = read_validation(out, manifest_digests(manifest))
    if validation.state == "unreadable":
        raise PublishError(validation.problem, path=validation.path,
                           hint="run `eagle3-quant validate OUT` again, or remove the file")
    card = build_card(out, repo_id, target=target, base_model=base_model, pipeline=pipeline, validation=validation,
                      manifest=manifest, checked=True)
    return write_card(out, card) if write else card
