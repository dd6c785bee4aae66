"""Data-free checks of an FP8 draft folder: dtypes and scales, finiteness, untouched parts, config, vLLM load.

Every check collects all its problems (the first few are named) instead of stopping at the first one.
"""

from __future__ import annotations

import torch
from safetensors import safe_open

from eagle3_quant.engines.vllm.loader_compat import check_loader_compat, loader_family
from eagle3_quant.quantize.verify_export import same_bytes
from eagle3_quant.reading.artifact import MX_ELEMENT_DTYPES, Fp8Artifact, quant_spec
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.mx_format import packed_width
from eagle3_quant.reading.mx_layout import mx_unpacked_shape
from eagle3_quant.reading.safetensors_header import FLOAT_DTYPES, FP8_DTYPES, TensorInfo
from eagle3_quant.reading.scale_names import WRITTEN_SCALE_SUFFIXES
from eagle3_quant.records.artifact import VOCAB_TENSORS, QuantizedArtifact
from eagle3_quant.records.manifest import MANIFEST_NAME
from eagle3_quant.taps.written_ids import apply_written
from eagle3_quant.validate.int_fp4_structure import check_quant_weights, config_weight_dtype
from eagle3_quant.validate.mx_structure import check_mx_weights
from eagle3_quant.validate.report import Check, failed, passed, skipped

ROWS_PER_CHUNK = 4096
SHOWN = 3


def _listed(problems: list[str]) -> str:
    more = f" (+{len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
    return "; ".join(problems[:SHOWN]) + more



def check_fp8_weights(art: Fp8Artifact) -> Check:
    if art.mx_modules:
        return check_mx_weights(art)
    if art.quant_linears:
        return check_quant_weights(art)
    tensors, problems = art.checkpoint.tensors, []
    per_channel = quant_spec(quant_spec(art.quant_config.get("global_quant_config")).get("weight")).get("qscheme") \
        == "per_channel"
    for module in art.fp8_modules:
        weight = tensors[module + ".weight"]
        if weight.dtype != "F8_E4M3":
            problems.append(f"{weight.name} is {weight.dtype}, vLLM's Quark path expects F8_E4M3 (float8_e4m3fn)")
        rows = weight.shape[0] if weight.shape else 0
        scale = tensors.get(module + ".weight_scale")
        want = ((rows,),) if per_channel else ((1,), ())
        if scale is None:
            problems.append(f"{module}.weight_scale is missing")
        elif scale.dtype != "F32" or scale.shape not in want:
            problems.append(f"{scale.name} is {scale.dtype} {list(scale.shape)}, expected F32 {list(want[0])}")
        else:
            values = scale.load()
            if not bool(torch.isfinite(values).all() and (values > 0).all()):
                problems.append(f"{scale.name} holds {int((~(torch.isfinite(values) & (values > 0))).sum())} "
                                "non-finite or non-positive value(s)")
        inp = tensors.get(module + ".input_scale")
        if inp is not None:
            values = inp.load()
            if inp.dtype != "F32" or inp.numel != 1 or not bool(torch.isfinite(values).all() and (values > 0).all()):
                problems.append(f"{inp.name} must be one finite positive F32 value")
    orphans = sorted(n for n in tensors if n.rsplit(".", 1)[-1] in WRITTEN_SCALE_SUFFIXES
                     and n.rsplit(".", 1)[0] not in art.fp8_modules)
    problems += [f"{n} has no FP8 weight" for n in orphans]
    if not art.fp8_modules:
        problems.append("no FP8 weight in the checkpoint")
    if problems:
        return failed("fp8_weights", _listed(problems))
    kind = "per-channel [N]" if per_channel else "per-tensor"
    return passed("fp8_weights", f"{len(art.fp8_modules)} FP8 E4M3 weights with finite positive {kind} scales",
                  modules=list(art.fp8_modules))


def _bad_count(info: TensorInfo, chunk: torch.Tensor) -> int:
    if info.dtype in FP8_DTYPES:
        # e4m3fn's NaN is 0x7F/0xFF; the fnuz types use 0x80 (no Inf in either)
        bits = chunk.view(torch.uint8)
        nan = (bits & 0x7F) == 0x7F if info.dtype == "F8_E4M3" else bits == 0x80
        return int(nan.sum())
    return int((~torch.isfinite(chunk)).sum())


def check_finite(art: Fp8Artifact) -> Check:
    problems, checked = [], 0
    for info in art.checkpoint.tensors.values():
        if info.dtype not in FLOAT_DTYPES | FP8_DTYPES:
            continue
        checked += 1
        with safe_open(str(info.file), framework="pt") as fh:
            if not info.shape:
                bad = _bad_count(info, fh.get_tensor(info.name))
            else:
                sliced = fh.get_slice(info.name)
                bad = sum(_bad_count(info, sliced[s:s + ROWS_PER_CHUNK])
                          for s in range(0, info.shape[0], ROWS_PER_CHUNK))
        if bad:
            problems.append(f"{info.name} holds {bad} NaN/Inf value(s)")
    if problems:
        return failed("finite", _listed(problems))
    return passed("finite", f"no NaN/Inf (the quantized dtypes' NaN encodings included) in {checked} float tensors")


def check_unchanged(artifact: QuantizedArtifact, reference: DraftCheckpoint | None) -> Check:
    if reference is None:
        return skipped("unchanged_parts", "no reference draft (--reference, or a local source in the manifest)")
    art = artifact.files
    ref, out = reference.checkpoint.tensors, art.checkpoint.tensors
    scales = {f"{m}.{s}" for m in art.fp8_modules for s in WRITTEN_SCALE_SUFFIXES}
    pruned = artifact.pruned_vocab
    # a pruned vocabulary: lm_head/d2t/t2d were compared with the pruned source by the export verification
    # smoothing folded exact power-of-two scales into some BF16 tensors: compared with the smoothed source at export
    folded = artifact.smoothed_tensors
    skip = scales | (VOCAB_TENSORS if pruned is not None else set()) | folded
    problems, same = [], 0
    for name in sorted(set(ref) - set(out) - skip):
        problems.append(f"{name} is in the reference but not in the output")
    for name, info in sorted(out.items()):
        if name in skip:
            continue
        source = ref.get(name)
        module = name.removesuffix(".weight")
        packed = (module in art.mx_modules or module in art.quant_linears) and name.endswith(".weight")
        float_shape = (art.quant_linears[module].shape if module in art.quant_linears
                       else mx_unpacked_shape(out, module)) if packed else None
        if source is None:
            problems.append(f"{name} is not in the reference")
        elif packed and source.shape != float_shape:
            problems.append(f"{name} has packed shape {list(info.shape)}, the reference {list(source.shape)}")
        elif packed:
            continue
        elif info.shape != source.shape:
            problems.append(f"{name} has shape {list(info.shape)}, the reference {list(source.shape)}")
        elif info.dtype in FP8_DTYPES:
            continue
        elif info.dtype != source.dtype or not same_bytes(source, info):
            problems.append(f"{name} differs from the reference ({source.dtype} -> {info.dtype})")
        else:
            same += 1
    if problems:
        return failed("unchanged_parts", _listed(problems))
    pruning = "" if pruned is None else (f"; vocabulary pruned to {pruned} (lm_head, d2t, t2d verified against the "
                                         "pruned source at export)")
    if folded:
        pruning += (f"; {len(folded)} BF16 tensors hold the --smooth-alpha or AWQ scales (verified against the scaled "
                    "source at export)")
    return passed("unchanged_parts", f"{same} tensors kept in their source precision are byte-identical to the "
                                     "reference" + pruning)


def _mx_packing_problems(art: Fp8Artifact, element: str) -> list[str]:
    """A packed MX weight whose bytes a row do not match the config's element (MXFP4 in/2, MXFP6 in*3/4)."""
    tensors, problems = art.checkpoint.tensors, []
    for module in art.mx_modules:
        rows, cols = mx_unpacked_shape(tensors, module)
        if tensors[module + ".weight"].shape[1] != packed_width(cols, element):
            problems.append(f"{module}.weight has {tensors[module + '.weight'].shape[1]} bytes a row, {element} packs "
                            f"{cols} inputs in {packed_width(cols, element)}")
    return problems[:1]


def _config_problems(artifact: QuantizedArtifact, reference: DraftCheckpoint | None) -> list[str]:
    art = artifact.files
    qc, problems = art.quant_config, []
    if not qc:
        return ["config.json has no quantization_config"]
    global_config = quant_spec(qc.get("global_quant_config"))
    weight, inputs = quant_spec(global_config.get("weight")), quant_spec(global_config.get("input_tensors"))
    if art.quant_linears:      # INT8, INT4, NVFP4, MXFP8: the config's weight dtype is quant_weights' check
        weight = {"dtype": config_weight_dtype(art)}
    expected = MX_ELEMENT_DTYPES if art.mx_modules else (config_weight_dtype(art),) if art.quant_linears else \
        ("fp8_e4m3",)
    if weight.get("dtype") not in expected:
        problems.append(f"global_quant_config.weight.dtype is {weight.get('dtype')!r}, expected "
                        f"{' or '.join(map(repr, expected))}")
    elif art.mx_modules:
        problems += _mx_packing_problems(art, weight["dtype"])
    dynamic = bool(inputs.get("is_dynamic")) or not inputs      # no input config: weight-only, nothing static
    static_modules = [m for m in art.fp8_modules if f"{m}.input_scale" in art.checkpoint.tensors]
    if dynamic and static_modules:
        problems.append(f"inputs are declared dynamic but {static_modules[0]}.input_scale exists")
    if not dynamic and len(static_modules) != len(art.fp8_modules):
        problems.append("inputs are declared static but some FP8 linears have no input_scale")
    if reference is not None:        # the reference's keys, with the ids --serve-taps wrote
        ref_raw = apply_written(dict(reference.config.raw), artifact.written_taps)
        pruned = {"draft_vocab_size"} if artifact.pruned_vocab is not None else set()
        for key in sorted(set(ref_raw) | set(art.raw_config) - {"quantization_config"} - pruned):
            if key not in pruned | {"quantization_config"} and ref_raw.get(key) != art.raw_config.get(key):
                problems.append(f"config key {key!r} differs from the reference")
    return problems


def check_config(artifact: QuantizedArtifact, reference: DraftCheckpoint | None) -> Check:
    problems = _config_problems(artifact, reference)
    if problems:
        return failed("config_consistency", _listed(problems))
    return passed("config_consistency", "quantization_config agrees with the tensors on disk"
                  + (" and every other key with the reference" if reference is not None else ""))


def check_loader(art: Fp8Artifact, label: str) -> Check:
    """vLLM's Quark rules replayed on the config; `label` names the artifact's quantized linears (scheme_label)."""
    if not art.quant_config:
        return failed("loader_compat", f"no quantization_config: vLLM would load the {label} weights as BF16")
    on_disk = {lin.role: lin.module in art.fp8_modules for lin in art.layout.linears}
    result = check_loader_compat(art.quant_config, on_disk, **loader_family(art.config))
    if not result.ok:
        return failed("loader_compat", _listed(result.problems))
    return passed("loader_compat", f"vLLM's Quark loader would quantize exactly the {label} linears at target depths "
                                   f"{', '.join(map(str, result.depths))}")


def check_manifest(artifact: QuantizedArtifact) -> Check:
    manifest = artifact.manifest
    if artifact.manifest_error is not None:
        return failed("manifest", str(artifact.manifest_error))
    if manifest is None:
        return skipped("manifest", f"no {MANIFEST_NAME} (not written by eagle3-quant quantize)")
    problems = artifact.manifest_problems()
    if problems:
        return failed("manifest", _listed(problems))
    return passed("manifest", f"{len(manifest.outputs)} files match the sha256 recorded at export")


def structure_checks(artifact: QuantizedArtifact, reference: DraftCheckpoint | None, label: str) -> list[Check]:
    art = artifact.files
    return [check_fp8_weights(art), check_finite(art), check_unchanged(artifact, reference),
            check_config(artifact, reference), check_loader(art, label), check_manifest(artifact)]
