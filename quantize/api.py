"""`quantize_draft`: BF16 Eagle3 draft in, checked FP8 draft out (or nothing at all)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eagle3_quant.export.files import copy_side_files
from eagle3_quant.export.manifest import Manifest, write_manifest
from eagle3_quant.export.quark_config import rewrite_config
from eagle3_quant.export.source_card import repo_id_from_cache_path, source_card_info
from eagle3_quant.export.verify import verify_export
from eagle3_quant.quantize.checks import check_resources, check_vocab_map
from eagle3_quant.quantize.finite_scan import scan_source
from eagle3_quant.quantize.plan import QuantPlan, make_plan
from eagle3_quant.quantize.quark_import import import_quark_in_background
from eagle3_quant.quantize.source_guard import check_source_unchanged, identities
from eagle3_quant.validate.loader_compat import LoaderCheck, check_loader_compat

from eagle3_quant.draft import read_draft
from eagle3_quant.errors import LoaderCompatError, SchemeError
from eagle3_quant.hashing import digest_folder
from eagle3_quant.inspection import estimate_output_bytes
from eagle3_quant.outdir import check_output_target, claimed_output, staged_output
from eagle3_quant.pickle_source import pickle_converted, pickle_only
from eagle3_quant.public_names import public_name, write_local_record
from eagle3_quant.schemes import DEFAULT_SCHEME, get_scheme
from eagle3_quant.source import DraftSource, resolve_source
from eagle3_quant.stage_timer import StageTimer


@dataclass(frozen=True)
class QuantizeResult:
    output: Path
    manifest: Manifest
    plan: QuantPlan
    loader_check: LoaderCheck
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)   # stage -> wall seconds

    @property
    def manifest_path(self) -> Path:
        return self.output / "eagle3_quant.json"


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _check_auto_exclude(calib, threshold: float) -> None:
    """Argument errors first, before any work starts."""
    if calib is None:
        raise SchemeError("--auto-exclude measures layer sensitivity on calibration data: give --calib CAL",
                          field="calib")
    if not 0.0 <= threshold < 1.0:
        raise SchemeError(f"--auto-exclude {threshold} is not a fraction of positions in [0, 1)",
                          field="auto_exclude")


def _auto_exclude(draft, scheme: str, plan: QuantPlan, calib, threshold: float, device: str,
                  ) -> tuple[dict, dict[str, str]]:
    """Measure the planned groups' sensitivity: (report for the manifest, role -> reason to keep it BF16)."""
    from eagle3_quant.quantize.sensitivity import linear_groups, measure_sensitivity

    planned = {d.role for d in plan.quantized}
    groups = [g for g, (roles, _) in linear_groups(draft).items() if set(roles) <= planned]
    report = measure_sensitivity(draft.path, calib, scheme, device, groups=groups)
    reasons = {role: f"auto-exclude: quantizing {g.group} alone changes the draft's top-1 on "
                     f"{g.disagreement:.2%} of {report.positions} calibration positions (> {threshold:.2%}), "
                     f"KL {g.kl:.3g}"
               for g in report.above(threshold) for role in g.roles}
    return {"threshold": threshold, **report.to_dict()}, reasons


def quantize_draft(
    src: str | Path,
    out: str | Path,
    scheme: str = DEFAULT_SCHEME,
    exclude: Sequence[str] | None = None,
    device: str | None = None,
    *,
    quantize_fc: bool = False,
    force: bool = False,
    revision: str | None = None,
    calib: str | Path | None = None,
    auto_exclude: float | None = None,
    verbose: bool = False,
    allow_pickle: bool = False,
) -> QuantizeResult:
    """Quantize an Eagle3 draft with Quark; write OUT atomically; return what was decided and written.

    `exclude` adds module names to the default BF16 set (fc, lm_head); `quantize_fc` removes fc from it.
    `auto_exclude` (needs `calib`): also keep BF16 every layer group whose quantization alone changes the
    draft's top-1 token on more than this fraction of calibration positions (see `measure_sensitivity`).
    `allow_pickle` accepts a draft with only pickle weights: loaded with torch.load(weights_only=True) and
    converted to safetensors beside OUT (the source is only read).
    """
    options = dict(scheme=scheme, exclude=exclude, device=device, quantize_fc=quantize_fc, force=force,
                   calib=calib, auto_exclude=auto_exclude, verbose=verbose)
    with claimed_output(Path(out), force, Path(src)):   # one writer per OUT, from the first check to the rename
        if allow_pickle:
            get_scheme(scheme)
            source = resolve_source(src, revision, include_pickle=True)
            if pickle_only(source.path):
                with pickle_converted(source.path, Path(out), force) as converted:
                    return _quantize(converted, out, None, origin=source, **options)
        return _quantize(src, out, revision, **options)


def _check_resources(draft, out: Path, plan: QuantPlan, in_memory: bool) -> None:
    quantized = {d.module for d in plan.quantized}
    output_bytes = estimate_output_bytes(draft, quantized, static_input=not plan.scheme.input.dynamic)
    check_resources(draft, out, output_bytes, {m + ".weight" for m in quantized}, per_shard=not in_memory)


def _quantize(src: str | Path, out: str | Path, revision: str | None, *, scheme: str,
              exclude: Sequence[str] | None, device: str | None, quantize_fc: bool, force: bool,
              calib: str | Path | None, auto_exclude: float | None, verbose: bool,
              origin: DraftSource | None = None) -> QuantizeResult:
    started = time.perf_counter()
    chosen = get_scheme(scheme)
    if chosen.needs_calibration and calib is None:
        raise SchemeError(f"scheme {chosen.name!r} has static input scales and needs calibration data "
                          "(--calib CAL, made by `eagle3-quant calibrate`)", field="calib")
    if auto_exclude is not None:
        _check_auto_exclude(calib, auto_exclude)
    timer = StageTimer()
    with timer.stage("read headers"):
        draft = read_draft(src, revision)
        scanned_identities = identities((origin or draft.source).path, draft)   # before any tensor is read
        out = check_output_target(Path(out), draft.path, force)
        plan = make_plan(draft, chosen, exclude, quantize_fc)
        in_memory = chosen.needs_calibration or auto_exclude is not None   # the whole draft held at once
        _check_resources(draft, out, plan, in_memory)
        check_vocab_map(draft)
    quark_import = import_quark_in_background(verbose)   # overlaps the source scan below
    source = origin or draft.source
    with timer.stage("scan source (sha256 + NaN/Inf)"):
        inputs = scan_source(draft)
        if origin is not None:      # converted from pickle: the manifest lists the files the user gave
            inputs = digest_folder(source.path)
    device = device or default_device()
    sensitivity = None
    if auto_exclude is not None:
        with timer.stage("auto-exclude sensitivity"):
            sensitivity, reasons = _auto_exclude(draft, chosen.name, plan, calib, auto_exclude, device)
        plan = make_plan(draft, chosen, exclude, quantize_fc, reasons)
        if not plan.quantized:
            raise SchemeError(f"--auto-exclude {auto_exclude} keeps every linear BF16: nothing left to quantize",
                              field="auto_exclude")
        _check_resources(draft, out, plan, in_memory)   # fewer linears quantized: a larger output

    with staged_output(out, draft.path, force) as staging:
        with timer.stage("import quark.torch (wait)"):
            timer.seconds["import quark.torch (background)"] = quark_import.result()[1]
        calibration = None
        with timer.stage("quark"):
            if chosen.needs_calibration:
                from eagle3_quant.quantize.static import run_static_fp8

                calibration = run_static_fp8(draft, plan, Path(calib), staging, device, verbose).to_dict()
            else:
                from eagle3_quant.quantize.quark_file import run_file_to_file

                run_file_to_file(draft, plan, staging, device, verbose)
        with timer.stage("config + side files"):
            for written in staging.glob("*.safetensors"):
                os.chmod(written, 0o644)
            config = rewrite_config(staging / "config.json", draft.config.raw, plan)
            copy_side_files(draft.path, staging)
        with timer.stage("verify + sha256 outputs"):
            verified = verify_export(draft, staging, plan)   # after the last write: its digests go in the manifest
        with timer.stage("re-check source (sha256)"):   # after the last read of it: what was used was scanned
            check_source_unchanged(source.path, inputs, scanned_identities, draft)
        loader = check_loader_compat(config["quantization_config"], plan.intended())
        if not loader.ok:
            raise LoaderCompatError("vLLM would not load this as intended: " + "; ".join(loader.problems[:3]),
                                    path=out)
        with timer.stage("manifest"):
            manifest = write_manifest(staging, {
                "source": {"path": public_name(source.path), "hub_id": repo_id_from_cache_path(source.path),
                           "repo_id": source.repo_id,
                           "revision": source.revision, "commit": source.commit,
                           "format": draft.format.value, "architecture": draft.config.architecture,
                           "pickle_converted": origin is not None, "card": source_card_info(source.path)},
                "scheme": {"name": chosen.name, "weight": chosen.weight.describe(),
                           "input": chosen.input.describe()},
                "exclude": {"modules": [d.module for d in plan.excluded],
                            "vllm_patterns": config["quantization_config"]["exclude"],
                            "reasons": {d.module: d.reason for d in plan.excluded}},
                "layers": [{"role": d.role, "module": d.module, "shape": [d.out_features, d.in_features],
                            "quantized": d.quantize, "reason": d.reason} for d in plan.decisions],
                "device": device,
                **({"calibration": calibration} if calibration else {}),
                **({"sensitivity": sensitivity} if sensitivity else {}),
            }, inputs, verified.files)
            write_local_record(staging, source.path)   # hidden, never published: validate's default reference
    return QuantizeResult(out, manifest, plan, loader, time.perf_counter() - started, timer.seconds)
