"""`validate` of a GGUF draft (`eagle3-quant gguf`): the offline prediction in llama.cpp's arithmetic.

Every tensor of the GGUF is dequantized by ggml's own formulas (llama.cpp's gguf-py), put back under the checkpoint
names it was made from (q/k rows in the checkpoint's order again, d2t as offsets), and the toolkit's runtime runs it
in fp32 with every linear's input converted as ggml's CPU matmul converts it for that weight type (Q8_0 for
Q8_0/Q4_0/MXFP4/NVFP4 weights, Q8_K for k-quants, BF16 for BF16: `runtime/ggml_activations.py`); the BF16
reference runs the same way (BF16 weights, BF16 inputs). Both read the calibration set at the layers the GGUF
feeds (``eagle3.target_layers``). Checks: the file (eagle3, the layers written, the types the manifest lists),
weight SQNR of the quantized tensors, top-1 agreement and acceptance ratio against the gates of the GGUF type;
vLLM's and SGLang's loaders and the FP8 kernel path are skipped: a GGUF is llama.cpp's, which `bench --engine
llamacpp` measures.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import torch

from eagle3_quant.engines.llamacpp.gguf_files import dequantize_gguf, describe_gguf
from eagle3_quant.engines.llamacpp.names import ROPE_PERMUTED, VEC_DOT_TYPE, rope_row_order
from eagle3_quant.engines.llamacpp.tools import LlamaCppTools, find_tools
from eagle3_quant.errors import DraftFormatError
from eagle3_quant.reading.draft import DraftCheckpoint, read_draft
from eagle3_quant.reading.layout import EMBEDDING_NAMES
from eagle3_quant.records.calibration import CalibrationSet, load_calibration
from eagle3_quant.records.gguf_artifact import GgufArtifact, open_gguf_artifact
from eagle3_quant.records.public_names import public_name, recorded_source_path
from eagle3_quant.records.validation_report import ValidationMetrics
from eagle3_quant.scheme_gates import FP8_GATES, MXFP4_GATES, SchemeGates
from eagle3_quant.taps.calibration_view import draft_view
from eagle3_quant.util.json_values import json_safe
from eagle3_quant.util.outdir import scratch_for
from eagle3_quant.validate.report import REPORT_NAME, Check, ValidationReport, failed, gate, passed, skipped

GGUF_GATES = {
    "bf16": FP8_GATES, "q8_0": FP8_GATES, "q6_k": FP8_GATES,
    "q5_k_m": SchemeGates(0.90, 0.98, 20.0, "5-bit k-quant: between FP8 and 4-bit"),
    "q4_k_m": MXFP4_GATES, "q4_0": MXFP4_GATES, "mxfp4": MXFP4_GATES, "nvfp4": MXFP4_GATES,
}
SKIPPED = {"kernel_path": "a GGUF draft runs in llama.cpp's kernels: `bench --engine llamacpp` measures them",
           "vllm_load": "a GGUF draft is for llama.cpp, not vLLM", "sglang_load": "a GGUF draft is for llama.cpp, "
                                                                          "not SGLang"}


def _reference(given: Path | None, artifact: GgufArtifact) -> DraftCheckpoint | None:
    source = given or recorded_source_path(artifact.path)
    return read_draft(source) if source is not None and Path(source).is_dir() else None


def dequantized_folder(tools: LlamaCppTools, artifact: GgufArtifact, reference: DraftCheckpoint,
                       folder: Path) -> dict[str, str | None]:
    """The GGUF as a float32 checkpoint folder under the names it was made from; returns module -> the ggml
    vec_dot type its input takes."""
    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True, exist_ok=True)
    raw = folder / "gguf.safetensors"
    dequantize_gguf(tools, artifact.file, raw)
    tensors = load_file(str(raw))
    raw.unlink()
    cfg, record = reference.config, artifact.record
    state, vec_dot = {}, {}
    for name, row in record.tensors.items():
        if row.source is None or name not in tensors:
            continue
        value = tensors[name]
        heads = {"heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads}.get(ROPE_PERMUTED.get(name))
        if heads:
            order = torch.tensor(rope_row_order(value.shape[0], heads))
            restored = torch.empty_like(value)
            restored[order] = value
            value = restored
        if name == "d2t":
            value = value.to(torch.int64) - torch.arange(value.numel(), dtype=torch.int64)
        state[row.source] = value.contiguous()
        if row.source.endswith(".weight") and len(row.shape) == 2 and row.source not in EMBEDDING_NAMES:
            vec_dot[row.source.removesuffix(".weight")] = VEC_DOT_TYPE.get(row.type)
    if "d2t" in state:
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[state["d2t"] + torch.arange(state["d2t"].numel())] = True
        state["t2d"] = t2d
    save_file(state, str(folder / "model.safetensors"))
    raw_config = {k: v for k, v in dict(reference.config.raw).items() if k != "quantization_config"}
    lm_head = state.get("lm_head.weight")
    raw_config.update(torch_dtype="float32", draft_vocab_size=int(lm_head.shape[0]) if lm_head is not None
                      else cfg.draft_vocab_size)
    (folder / "config.json").write_text(json.dumps(raw_config, indent=2, allow_nan=False) + "\n")
    return vec_dot


def _sqnr(reference: DraftCheckpoint, folder: Path, artifact: GgufArtifact, gates) -> tuple[Check, list[dict]]:
    from safetensors import safe_open

    from eagle3_quant.validate.fidelity import sqnr_db

    layers = []
    with safe_open(str(folder / "model.safetensors"), framework="pt") as fh:
        for name, row in artifact.record.tensors.items():
            if row.type in ("bf16", "f32", "f16", "i64") or row.source is None:
                continue
            ref = reference.checkpoint.tensors.get(row.source)
            if ref is None or list(ref.shape) != list(fh.get_slice(row.source).get_shape()):
                continue
            layers.append({"module": row.source.removesuffix(".weight"), "role": name, "shape": list(ref.shape),
                           "sqnr_db": sqnr_db(ref.load(), fh.get_tensor(row.source))})
    if not layers:
        return skipped("weight_sqnr", "no quantized tensor has a counterpart of its shape in the reference"), []
    worst = min(layers, key=lambda layer: layer["sqnr_db"])
    return gate("weight_sqnr", worst["sqnr_db"], gates.min_weight_sqnr_db,
                f"lowest weight SQNR in dB ({worst['module']}, {artifact.record.label})"), layers


def _structure(tools: LlamaCppTools, artifact: GgufArtifact) -> Check:
    found = describe_gguf(tools, artifact.file)
    record = artifact.record
    wrong = [f"{t.name} is {t.type}, the manifest says {record.type_of(t.name)}" for t in found.tensors
             if record.type_of(t.name) not in (None, t.type)]
    if found.architecture != "eagle3":
        wrong.insert(0, f"architecture {found.architecture!r}")
    if found.arch_field("target_layers") != record.taps.get("target_layers"):
        wrong.append(f"eagle3.target_layers {found.arch_field('target_layers')} != "
                     f"{record.taps.get('target_layers')}")
    if wrong:
        return failed("gguf_file", "; ".join(wrong[:3]))
    return passed("gguf_file", f"eagle3, target layers {record.taps.get('target_layers')}, {len(found.tensors)} "
                               f"tensors of the types the manifest lists ({record.label})")


def validate_gguf(out: Path, options) -> ValidationReport:
    """`validate_draft` for a GGUF artifact (options: a `ValidateOptions`)."""
    artifact = open_gguf_artifact(out)
    tools = find_tools(getattr(options, "llamacpp", None))
    kind = artifact.record.type
    defaults = GGUF_GATES[kind]
    gates, gate_source = options.gates.resolve(None)
    gates = dataclasses.replace(gates, **{n: getattr(defaults, n) for n, s in gate_source.items()
                                          if not s.startswith("set")})
    gate_source = {n: s if s == "set" else f"default for GGUF {artifact.record.label}" for n, s in gate_source.items()}
    reference = _reference(options.reference, artifact)
    cal = load_calibration(options.calib) if options.calib is not None else None
    checks = [_structure(tools, artifact)]
    metrics: dict = {}
    layers: list[dict] = []
    if reference is None:
        checks += [skipped(name, "needs a reference draft (--reference)")
                   for name in ("weight_sqnr", "top1_agreement", "acceptance_ratio")]
    else:
        with scratch_for(out, "validate-gguf") as scratch:
            vec_dot = dequantized_folder(tools, artifact, reference, scratch / "draft")
            check, layers = _sqnr(reference, scratch / "draft", artifact, gates)
            checks.append(check)
            if layers:
                metrics["min_weight_sqnr_db"] = check.data["value"]
            if cal is None:
                checks += [skipped(name, "needs calibration data (--calib)")
                           for name in ("top1_agreement", "acceptance_ratio")]
            else:
                found, numbers = _fidelity(artifact, reference, cal, scratch / "draft", vec_dot, options, gates)
                checks += found
                metrics.update(numbers)
    checks += [skipped(name, why) for name, why in SKIPPED.items()]
    calibration = None if cal is None else {"path": public_name(cal.path.resolve()), "samples": cal.num_samples,
                                            "tokens": cal.num_tokens, "target": public_name(cal.info.target)}
    report = ValidationReport(out, reference.path if reference else None, calibration, gates, tuple(checks),
                              ValidationMetrics.read(json_safe(metrics)), tuple(layers),
                              {"status": "skipped", "reason": SKIPPED["kernel_path"]},
                              artifact_files=dict(artifact.files), gate_source=gate_source,
                              label=f"GGUF {artifact.record.label}")
    path = options.report if options.report is not None else out / REPORT_NAME
    report.write(path)
    return dataclasses.replace(report, report_path=path)


def _fidelity(artifact: GgufArtifact, reference: DraftCheckpoint, cal: CalibrationSet, folder: Path,
              vec_dot: dict[str, str | None], options, gates) -> tuple[list[Check], dict]:
    from eagle3_quant.runtime.embedding import read_target_embedding
    from eagle3_quant.runtime.ggml_activations import ggml_linear_inputs
    from eagle3_quant.runtime.loading import load_draft
    from eagle3_quant.validate.fidelity import calibration_fidelity, fidelity_gates

    if cal.info.target_hidden_size != reference.config.target_hidden_size:
        raise DraftFormatError(f"calibration states have target hidden {cal.info.target_hidden_size}, the draft "
                               f"reads {reference.config.target_hidden_size}", path=cal.path,
                               field="target_hidden_size")
    taps = tuple(artifact.record.taps.get("target_layers") or ())
    view = draft_view(cal, reference.config, taps, "llama.cpp feeds the GGUF draft")
    embedding = None
    if not any(name in reference.checkpoint.tensors for name in EMBEDDING_NAMES):
        embedding = read_target_embedding(options.target or cal.info.target)
    ref_draft = load_draft(reference.path, "cpu", torch.float32, embedding=embedding)
    ggml_linear_inputs(ref_draft, {lin.module: "bf16" for lin in reference.layout.linears})
    candidate = load_draft(folder, "cpu", torch.float32, embedding=embedding)
    ggml_linear_inputs(candidate, vec_dot)
    result = calibration_fidelity(candidate, ref_draft, view, options.k, options.max_samples)
    metrics = {**result.metrics(), "compute_dtype": "float32", "device": "cpu", "aux_layer_ids": list(taps),
               "prediction": {"engine": "llama.cpp (ggml CPU arithmetic)", "compute_dtype": "float32",
                              "dtype_reason": "ggml computes in fp32 on dequantized blocks, each linear's input "
                                              "converted to its weight type's vec_dot type"}}
    checks = fidelity_gates(result, gates, artifact.record.label, options.k, " (ggml arithmetic)")
    return checks, {k: v for k, v in metrics.items() if not (isinstance(v, float) and math.isnan(v))}
