"""The `sglang_load` check: SGLang's own loader builds, loads and runs the FP8 or MXFP4 draft, in a child process.

What it proves (SGLang 0.5.23, on CPU): SGLang's ``QuarkConfig`` gives each runtime linear the quant method the
checkpoint needs (FP8 layers ``QuarkW8A8Fp8``, MXFP4 layers ``QuarkW4A4MXFP4``, layers kept BF16 unquantized,
``fc`` a plain ``nn.Linear``); every checkpoint tensor lands byte-identical in a parameter (``t2d`` is skipped by
SGLang on purpose, ``d2t`` becomes ``hot_token_id``; an embedding the draft lacks comes from the target); each
quantized linear, after ``process_weights_after_loading``, gives what this project's runtime gives on the same
tensors (max |delta| within `LINEAR_TOLERANCE` of max |output|); the runtime's draft forward with SGLang's linears
in place gives the runtime's logits (within `LOGIT_TOLERANCE`). What it does not prove: the GPU kernels (on CPU
its FP8 quantization and its MXFP4 AITER kernels are torch math, see ``engines/sglang/cpu_patches.py``), nor
SGLang's own attention (that needs its attention backend and a forward batch).

``python -m eagle3_quant.validate.sglang_load ARTIFACT`` prints the check; ``--probe`` only checks that SGLang
imports with the CPU patches (``make setup-sglang``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from eagle3_quant.engines.runner import ChildCommand, run_child
from eagle3_quant.validate.report import Check, failed, passed, skipped

CHECK = "sglang_load"
LINEAR_TOLERANCE = 0.01          # max |SGLang - runtime| of a quantized linear, relative to its max |output|
# max |dlogit| of the draft with SGLang's linears, relative to max |logit|. The runtime follows vLLM's math; with
# static FP8 inputs SGLang quantizes down_proj's input from a bf16 SiLU-mul where vLLM fuses it in fp32: 1.4%
# measured on the tiny pair, exactly the runtime's own difference with a bf16 SiLU-mul (PTPC FP8 and MXFP4: 0).
LOGIT_TOLERANCE = 0.05
TIMEOUT_S = 600
CHILD = "eagle3_quant.engines.sglang.load_child"
INSTALL_HINT = "SGLang is not installed (make setup-sglang installs 0.5.23 into .venv)"


def sglang_missing() -> str | None:
    """Why the check cannot run here, or None (SGLang itself is imported only in the child)."""
    return INSTALL_HINT if importlib.util.find_spec("sglang") is None else None


SGLANG_DRAFT_CLASS = "LlamaForCausalLMEagle3"
MX_KERNEL = ("CPU: QuarkW4A4MXFP4's AITER kernels (dynamic_mxfp4_quant, gemm_afp4wfp4; ROCm-only) replaced by the "
             "project's torch MX math (eagle3_quant/runtime/mx.py); not the gfx950 MX GEMM")


def unsupported_format(artifact: Path) -> str | None:
    """Why SGLang 0.5.23 cannot build this draft whatever its quantization (the check then does not run)."""
    try:
        config = json.loads((artifact / "config.json").read_text())
    except (OSError, ValueError):
        return None                  # the child reports what SGLang makes of it
    if "model_type" not in config:
        return ("SGLang 0.5.23 cannot read this config (no model_type: a speculators config); it serves Llama "
                f"Eagle3 drafts whose config names {SGLANG_DRAFT_CLASS}")
    arch = (config.get("architectures") or ["?"])[0]
    if arch != SGLANG_DRAFT_CLASS:
        return (f"SGLang 0.5.23 builds the class the config names ({arch}), not an Eagle3 draft; it serves Llama "
                f"Eagle3 drafts whose config names {SGLANG_DRAFT_CLASS}")
    return _not_for_sglang(artifact)


def _not_for_sglang(artifact: Path) -> str | None:
    """Why the manifest says the artifact is not for SGLang: left out by `quantize --engine` (e.g. an FP8 fc), or,
    in a manifest from before, a scheme SGLang cannot load (e.g. MXFP4 weights with FP8 activations)."""
    from eagle3_quant.errors import Eagle3QuantError
    from eagle3_quant.records.manifest import Manifest
    from eagle3_quant.schemes import SCHEMES

    try:
        manifest = Manifest.read(artifact)
    except Eagle3QuantError:
        return None
    if manifest.engines is not None and "sglang" not in manifest.engines.serves:
        return f"the artifact is not for SGLang: {manifest.engines.left_out.get('sglang', 'left out')}"
    scheme = SCHEMES.get(manifest.scheme.name)
    return scheme.why_not("sglang") if scheme is not None else None


def _child_env() -> dict:
    env = {"PYTHONWARNINGS": "ignore", "SGLANG_LOGGING_LEVEL": "error", "TOKENIZERS_PARALLELISM": "false"}
    return env if "OMP_NUM_THREADS" in os.environ else {**env, "OMP_NUM_THREADS": "2"}


def run_sglang(args: list[str], timeout: float = TIMEOUT_S) -> dict:
    """Run the child on one artifact folder (`args` = [ARTIFACT] or [ARTIFACT, TARGET_LAYERS]) or ``["--probe"]``;
    its JSON, or {"error": one line}."""
    command = ChildCommand(sys.executable, CHILD, name="SGLang's loader", env=_child_env())
    request = {"probe": True} if args == ["--probe"] else \
        {"artifact": str(Path(args[0]).resolve()), "num_target_layers": int(args[1]) if len(args) > 1 else None}
    run = run_child(command, request, timeout_s=timeout)
    return run.result if run.ok else {"error": run.error}


def fed_problems(result: dict, artifact: Path | None) -> list[str]:
    """SGLang feeds other layers than the manifest says the artifact is served with, or fewer than its fc reads."""
    from eagle3_quant.records.manifest import served_layers

    fed = result.get("fed_layers") or {}
    if fed.get("layers") is None:
        return []
    found, intended = [], served_layers(artifact) if artifact is not None else None
    if fed.get("states_read") and len(fed["layers"]) < fed["states_read"]:
        found.append(f"SGLang feeds {len(fed['layers'])} states, hidden_states{fed['layers']} ({fed['source']}), "
                     f"the draft's fc reads {fed['states_read']}")
    if intended is not None and fed["layers"] != intended:
        found.append(f"SGLang feeds hidden_states{fed['layers']} ({fed['source']}), the manifest says "
                     f"hidden_states{intended}")
    return found


def fed_text(fed: dict | None) -> str:
    if not fed or fed.get("layers") is None:
        return ""
    return f"; target layers SGLang feeds it: hidden_states{fed['layers']} ({fed['source']})"


def problems(result: dict, artifact: Path | None = None) -> list[str]:
    found = [f"{row['runtime_name']}: {row['problem']}" for row in result["layers"] if row["problem"]]
    found += fed_problems(result, artifact)
    found += result["parameters"]["problems"]
    for row in result["linears"]:
        if row.get("problem"):
            found.append(f"{row['module']}: {row['problem']}")
        elif not row["max_abs_diff"] <= LINEAR_TOLERANCE * max(row["max_abs"], 1e-30):   # NaN fails too
            found.append(f"{row['module']}: SGLang's quantized linear differs from the runtime by "
                         f"{row['max_abs_diff']:.3g} (max |output| {row['max_abs']:.3g})")
    forward = result.get("forward") or {}
    if forward.get("problem"):
        found.append(f"draft forward with SGLang's linears: {forward['problem']}")
    elif forward and not (forward["logits_finite"] and forward["relative_dlogit"] <= LOGIT_TOLERANCE):
        found.append(f"the draft's logits with SGLang's linears differ from the runtime's by "
                     f"{forward['relative_dlogit']:.3g} of max |logit| (top-1 {forward['top1_agreement']:.3f})")
    return found


def _summary(result: dict) -> dict:
    worst = max((r["max_abs_diff"] / max(r["max_abs"], 1e-30) for r in result["linears"] if "max_abs" in r),
                default=None)
    return {"sglang": result["sglang"], "seconds": result["seconds"], "patches": result["patches"],
            "layers": [{k: row[k] for k in ("runtime_name", "method", "quantized", "checkpoint", "checkpoint_fp8")}
                       for row in result["layers"]],
            "tensors_consumed": result["parameters"]["consumed"],
            "checkpoint_tensors": result["parameters"]["checkpoint_tensors"],
            "skipped_on_purpose": result["parameters"]["skipped_on_purpose"],
            "from_target": result["parameters"]["from_target"],
            "linears_run": len(result["linears"]), "max_linear_rel_diff": worst,
            "forward": {k: v for k, v in (result.get("forward") or {}).items() if k != "sglang_linears"},
            "mx_kernel": MX_KERNEL if any("MXFP4" in row["method"] for row in result["layers"]) else None,
            "fed_layers": result.get("fed_layers")}


def sglang_load_check(artifact: str | Path, timeout: float = TIMEOUT_S, num_target_layers: int | None = None) -> Check:
    """`num_target_layers`: the target's depth, for the layers SGLang's defaults name (a draft without ids)."""
    reason = unsupported_format(Path(artifact)) or sglang_missing()
    if reason:
        return skipped(CHECK, reason)
    layers = [str(num_target_layers)] if num_target_layers else []
    result = run_sglang([str(Path(artifact).resolve()), *layers], timeout)
    if "error" in result:
        return failed(CHECK, f"SGLang's own loader fails on it: {result['error']}")
    found, data = problems(result, Path(artifact)), _summary(result)
    if found:
        return failed(CHECK, f"SGLang {result['sglang']}'s own loader: " + "; ".join(found), **data)
    built = ", ".join(f"{row['runtime_name']} {'MXFP4' if 'MXFP4' in row['method'] else 'FP8'}"
                      for row in result["layers"] if row["quantized"])
    forward = data["forward"]
    return passed(CHECK, f"SGLang {result['sglang']}'s own loader builds {built or 'no layer quantized'} and the "
                         f"rest unquantized as the checkpoint holds them, consumes every tensor byte-identical "
                         f"({data['tensors_consumed']} of {data['checkpoint_tensors']}; skipped on purpose: "
                         f"{', '.join(data['skipped_on_purpose']) or 'none'}), its {data['linears_run']} quantized "
                         f"linears match the runtime, and the draft with SGLang's linears gives the runtime's logits "
                         f"(top-1 {forward['top1_agreement']:.3f}, max |dlogit| "
                         f"{100 * forward['relative_dlogit']:.2f}% of max |logit|; CPU patches, linears run in the "
                         f"runtime's forward){fed_text(data['fed_layers'])}", **data)


def main(argv: list[str]) -> int:
    if argv == ["--probe"]:
        reason = sglang_missing()
        result = {"error": reason} if reason else run_sglang(["--probe"], timeout=300)
        print(result.get("error") or f"SGLang {result['sglang']} imports with the CPU patches")
        return 1 if "error" in result else 0
    check = sglang_load_check(argv[0])
    print(json.dumps(check.to_dict(), indent=1, allow_nan=False))
    return 1 if check.status == "failed" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
