"""`validate_draft`: prove a quantized draft still works - structure, fidelity to its BF16 reference, kernel path."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from eagle3_quant.errors import DraftFormatError, Eagle3QuantError
from eagle3_quant.options import build_options, require_device
from eagle3_quant.reading.artifact import Fp8Artifact
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.layout import EMBEDDING_NAMES
from eagle3_quant.records.artifact import QuantizedArtifact, open_artifact, read_reference
from eagle3_quant.records.calibration import CalibrationSet, load_calibration
from eagle3_quant.records.manifest import MANIFEST_NAME
from eagle3_quant.records.public_names import public_name
from eagle3_quant.records.validation_report import ValidationMetrics
from eagle3_quant.schemes import precision_label, scheme_label
from eagle3_quant.taps.calibration_view import target_depth
from eagle3_quant.taps.summary import taps_metrics
from eagle3_quant.util.json_values import json_safe
from eagle3_quant.util.progress import SILENT, Progress
from eagle3_quant.validate.gate_choice import artifact_scheme
from eagle3_quant.validate.kernel_check import kernel_checks, run_kernel_check
from eagle3_quant.validate.options import ValidateOptions
from eagle3_quant.validate.report import REPORT_NAME, Check, Gates, ValidationReport, failed, gate, skipped
from eagle3_quant.validate.sglang_load import CHECK as SGLANG_CHECK
from eagle3_quant.validate.sglang_load import sglang_load_check
from eagle3_quant.validate.structure import structure_checks
from eagle3_quant.validate.taps_report import candidate_rows, served_view
from eagle3_quant.validate.vllm_load import CHECK_NAME as VLLM_CHECK
from eagle3_quant.validate.vllm_load import VllmLoadOptions, check_vllm_load

FIDELITY_CHECKS = ("top1_agreement", "acceptance_ratio")


def _check_calibration(calib: CalibrationSet, art: Fp8Artifact) -> None:
    cfg = art.config
    if calib.info.target_hidden_size != cfg.target_hidden_size:
        raise DraftFormatError(f"calibration states have target hidden {calib.info.target_hidden_size}, the draft "
                               f"expects {cfg.target_hidden_size}", path=calib.path, field="target_hidden_size")
    calib.check_token_ids(cfg.vocab_size, "the draft's target")


def _target_source(calib: CalibrationSet, target: str | Path | None, missing: str, where: str) -> str | Path:
    """`target`, else the calibration set's target: where the parts the draft shares with it come from."""
    source = target or calib.info.target
    if not source:
        raise DraftFormatError(f"{missing} and no target is known", field="target",
                               hint=f"pass --target with the target model's {where}")
    return source


def _embedding(art: Fp8Artifact, calib: CalibrationSet, target: str | Path | None):
    """The target's token embedding when the draft has none (from `target`, else the calibration set's target)."""
    if any(name in art.checkpoint.tensors for name in EMBEDDING_NAMES):
        return None
    from eagle3_quant.runtime.embedding import read_target_embedding

    return read_target_embedding(_target_source(calib, target, "the draft has no token embedding",
                                                "folder or Hub id"))


def _shared_lm_head(art: Fp8Artifact, calib: CalibrationSet, target: str | Path | None):
    """The target's lm_head when the draft shares it (no lm_head.weight), as vLLM serves it; else None."""
    if "lm_head.weight" in art.checkpoint.tensors:
        return None
    from eagle3_quant.runtime.embedding import read_target_lm_head

    return read_target_lm_head(_target_source(calib, target, "the draft shares the target's lm_head",
                                              "folder or Hub id"))


def _fidelity(art: Fp8Artifact, reference: DraftCheckpoint | None, calib: CalibrationSet | None,
              target: str | Path | None, gates: Gates, k: int, device: str | None,
              max_samples: int | None, view: CalibrationSet | None = None,
              layers: int | None = None, label: str = "FP8",
              progress: Progress = SILENT) -> tuple[list[Check], dict, list[dict]]:
    """The gates on `view` (the layers vLLM feeds the artifact), and the acceptance under every candidate `calib`
    holds."""
    if reference is None or calib is None:
        missing = " and ".join(x for x, v in (("a reference draft (--reference)", reference),
                                               ("calibration data (--calib)", calib)) if v is None)
        return [skipped(name, f"needs {missing}") for name in FIDELITY_CHECKS], {}, []
    import torch

    from eagle3_quant.runtime.loading import load_draft
    from eagle3_quant.runtime.serving import serving_numerics
    from eagle3_quant.validate.fidelity import calibration_fidelity, fidelity_gates

    embedding = _embedding(art, calib, target)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    numerics = serving_numerics(art.config.torch_dtype)     # both drafts computed as the engine serves them
    lm_head = _shared_lm_head(art, calib, target)
    bf16_draft = load_draft(reference.path, device, numerics.dtype, embedding=embedding,
                            lm_head=lm_head if reference.layout.shared_lm_head else None,
                            read=(dict(reference.config.raw), reference.checkpoint))
    try:
        fp8_draft = load_draft(art.path, device, numerics.dtype, embedding=embedding, lm_head=lm_head,
                               read=(art.raw_config, art.checkpoint))
    except Eagle3QuantError as exc:
        return [failed(name, f"the {label} draft does not load: {exc}") for name in FIDELITY_CHECKS], {}, []
    total = view.num_samples if max_samples is None else min(max_samples, view.num_samples)
    with progress.task("fidelity: both drafts on the calibration set", total, unit="samples") as advance:
        result = calibration_fidelity(fp8_draft, bf16_draft, view, k, max_samples, advance)
    metrics = {**result.metrics(), "compute_dtype": numerics.dtype_name, "prediction": numerics.record(),
               "device": device, "aux_layer_ids": list(view.info.aux_layer_ids)}
    rows = candidate_rows(art.config, calib, layers, fp8_draft, bf16_draft, k, max_samples, view.info.aux_layer_ids,
                          (result.reference, result.candidate), progress)
    checks = fidelity_gates(result, gates, label, k)
    return checks, metrics, rows


def _with_next_rung(checks: list[Check], artifact: QuantizedArtifact, reference: DraftCheckpoint | None
                    ) -> list[Check]:
    """A missed fidelity gate names what to try next: the rung `--scheme auto` would measure after this one."""
    missed = [c for c in checks if c.status == "failed" and c.name in FIDELITY_CHECKS]
    if not missed or reference is None:
        return checks
    from eagle3_quant.quantize.next_rung import next_rung

    hint = next_rung(artifact.manifest, reference)
    if hint is None:
        return checks
    return [dataclasses.replace(c, detail=f"{c.detail}; try {hint}") if c in missed else c for c in checks]


def _sqnr(artifact: QuantizedArtifact, reference: DraftCheckpoint | None, gates: Gates) -> tuple[Check, list[dict]]:
    if reference is None:
        return skipped("weight_sqnr", "needs a reference draft (--reference)"), []
    from eagle3_quant.validate.fidelity import weight_sqnr

    art = artifact.files
    folded = artifact.smoothed_tensors     # --smooth-alpha: these weights hold its scales, the reference does not
    layers = [layer for layer in weight_sqnr(art, reference) if layer["module"] + ".weight" not in folded]
    if not layers and folded:
        return skipped("weight_sqnr", "--smooth-alpha folded its scales into every quantized weight: the reference's "
                                      "weights differ from them by design (the export compared them with the "
                                      "smoothed source)"), []
    if not layers:
        return failed("weight_sqnr", "no quantized weight has a counterpart of the same shape in the reference"), []
    worst = min(layers, key=lambda layer: -math.inf if math.isnan(layer["sqnr_db"]) else layer["sqnr_db"])
    return gate("weight_sqnr", worst["sqnr_db"], gates.min_weight_sqnr_db,
                f"lowest weight SQNR in dB ({worst['module']})"), layers


def _vllm_load(out: Path, view: CalibrationSet | None, unreadable: bool, enabled: bool,
               layers: int | None = None) -> Check:
    if not enabled:
        return skipped(VLLM_CHECK, "vLLM check turned off (--no-vllm)")
    if unreadable:
        return skipped(VLLM_CHECK, "the quantized weights or scales are malformed (fp8_weights)")
    return check_vllm_load(out, VllmLoadOptions(calib=view.path if view is not None else None,
                                                taps=view.info.aux_layer_ids if view is not None else None,
                                                num_target_layers=layers))


def _check_owned(artifact: QuantizedArtifact, report: Path | None) -> None:
    """validate writes only into what it owns: a folder without quantized weights (a BF16 draft) is refused, and one
    without this tool's manifest (someone else's quantized draft) unless its report goes elsewhere (--report)."""
    out = artifact.path
    if artifact.manifest is not None:
        return
    if not artifact.files.fp8_modules and not artifact.files.quant_config:
        raise DraftFormatError(f"holds no quantized weights and no {MANIFEST_NAME}: a BF16 draft, not an artifact",
                               path=out, hint="validate what `eagle3-quant quantize` writes from it, with this "
                                              "folder as --reference")
    if report is None or Path(report).expanduser().resolve().is_relative_to(out):
        raise DraftFormatError(f"has no {MANIFEST_NAME}: not an artifact eagle3-quant wrote, and validate writes into "
                               "its own artifacts only", path=out,
                               hint="pass --report PATH to validate it without writing into it")


def _target_precision(cal: CalibrationSet) -> dict:
    """The calibration set's target precision when it was a quantized target (`calibrate` records it)."""
    precision = (cal.info.extra or {}).get("target_precision")
    return {"target_precision": precision} if isinstance(precision, dict) else {}


def validate_draft(out: str | Path, options: ValidateOptions | None = None, *,
                   artifact: QuantizedArtifact | None = None, reference_checkpoint: DraftCheckpoint | None = None,
                   progress: Progress = SILENT, **overrides) -> ValidationReport:
    """Validate the quantized draft OUT; write the JSON report (default OUT/validation.json) and return it.

    `options` (a `ValidateOptions`; keywords override its fields): `reference`, the BF16 draft (default: the
    manifest's source folder if it still exists); `calib`, a calibration set (``eagle3-quant calibrate``) for the
    data checks; `target`, where to take the token embedding from when the draft has none (default: the
    calibration set's target); `k`, draft steps per chain; `gates`, a Gates or a mapping of its fields; `vllm`,
    run the ``vllm_load`` check (vLLM's own loader and forward, in a subprocess; ``skipped`` without vLLM);
    `sglang`, run the ``sglang_load`` check (SGLang's own loader; ``skipped`` without SGLang); `progress`, where
    each phase and the samples done are told (the CLI's bar; silent by default).
    Bad inputs raise an Eagle3QuantError; a draft that fails a check returns a report with ``passed`` False.
    """
    opts = build_options(ValidateOptions, options, overrides)
    from eagle3_quant.records.gguf_artifact import is_gguf_artifact

    if artifact is None and is_gguf_artifact(Path(out).expanduser()):
        from eagle3_quant.validate.gguf import validate_gguf

        return validate_gguf(Path(out).expanduser().resolve(), opts)
    reference, calib, report, gates = opts.reference, opts.calib, opts.report, opts.gates
    k, target, device, kernel, max_samples = opts.k, opts.target, opts.device, opts.kernel, opts.max_samples
    vllm, sglang = opts.vllm, opts.sglang
    require_device(device)
    out = Path(out).expanduser().resolve()
    artifact = artifact or open_artifact(out)
    if artifact.manifest_error is not None:   # a manifest present must be well-formed, its paths inside OUT
        bad = artifact.manifest_error
        raise DraftFormatError(bad.message, path=bad.path, tensor=bad.tensor, field=bad.field, hint=bad.hint)
    _check_owned(artifact, report)
    art = artifact.files
    scheme = artifact_scheme(artifact.manifest, art.quant_config)
    gates, gate_source = gates.resolve(scheme)
    validated_files = artifact.artifact_files
    ref = reference_checkpoint or read_reference(reference, artifact)
    cal = load_calibration(calib) if calib is not None else None
    depth_known = target_depth(cal, target)
    view = None
    if cal is not None:          # a set of another draft, or without the layers vLLM feeds it, before any work
        _check_calibration(cal, art)
        view = served_view(cal, art.config, depth_known)

    checks = structure_checks(artifact, ref, scheme_label(scheme))
    sqnr_check, layers = _sqnr(artifact, ref, gates)
    checks.append(sqnr_check)
    fidelity_checks, metrics, taps_rows = _fidelity(art, ref, cal, target, gates, k, device, max_samples, view,
                                                    depth_known, precision_label(scheme), progress)
    checks += _with_next_rung(fidelity_checks, artifact, ref)
    if layers:
        metrics["min_weight_sqnr_db"] = sqnr_check.data["value"]
    metrics["taps"] = taps_metrics(art.config, depth_known, taps_rows)
    unreadable = any(c.name == "fp8_weights" and c.status == "failed" for c in checks)
    if kernel and not unreadable:
        progress.say("kernel check: the quantized linears on this device")
        kernel_result = run_kernel_check(out, device)
        checks += kernel_checks(kernel_result)
    else:
        reason = "the quantized weights or scales are malformed (fp8_weights)" if unreadable else \
            "kernel check turned off (--no-kernel)"
        kernel_result = {"status": "skipped", "reason": reason}
        checks.append(skipped("kernel_path", reason))
    if vllm and not unreadable:
        progress.say("vLLM load check: vLLM's own loader and forward, in a child process")
    checks.append(_vllm_load(out, view, unreadable, vllm, depth_known))
    if sglang:
        progress.say("SGLang load check: SGLang's own loader, in a child process")
    checks.append(sglang_load_check(out, num_target_layers=depth_known) if sglang
                  else skipped(SGLANG_CHECK, "turned off (--no-sglang)"))
    calibration = None if cal is None else {"path": public_name(cal.path.resolve()), "samples": cal.num_samples,
                                            "tokens": cal.num_tokens, "target": public_name(cal.info.target),
                                            **_target_precision(cal)}
    result = ValidationReport(out, ref.path if ref is not None else None, calibration, gates, tuple(checks),
                              ValidationMetrics.read(json_safe(metrics)), tuple(layers), kernel_result,
                              artifact_files=validated_files,
                              gate_source=gate_source, label=scheme_label(scheme))
    report_path = report if report is not None else out / REPORT_NAME
    result.write(report_path)
    return dataclasses.replace(result, report_path=report_path)
