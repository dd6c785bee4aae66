"""The ``vllm_load`` check: vLLM's own code builds, loads and runs the artifact (in a subprocess).

What it proves, on CPU: vLLM 0.33's config parsing, ``QuarkConfig`` (exclude matching, scheme choice), model
class and weight loader take the artifact as planned - each runtime linear's quant method matches what the
checkpoint holds, every tensor is consumed (``t2d`` is skipped by vLLM on purpose) and lands byte-identical
in its parameter - and vLLM's ``combine_hidden_states`` -> ``forward`` -> ``compute_logits`` agrees with the
project's runtime (for an MLA draft in both of vLLM's MLA forms: absorbed decode and kv_b_proj prefill). What
it does not prove: GPU kernels (the FP8 GEMM runs through torch on CPU) and the attention kernel (paged or MLA,
replaced by a causal attention with fp32 scores; the report says so, see engines/vllm/cpu_patches.py).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.engines.runner import ChildCommand, run_child
from eagle3_quant.validate.report import Check, failed, passed, skipped

CHECK_NAME = "vllm_load"
QUANTIZED_METHODS = ("QuarkLinearMethod",)
MAX_RELATIVE_DLOGIT = 0.01     # max |dlogit| / max |logit| between vLLM's forward and the runtime
MIN_TOP1 = 0.95
WORKER = "eagle3_quant.engines.vllm.load_child"      # runs in this interpreter: the package and vLLM 0.33 --no-deps
MX_NOTE = "; MX GEMMs: vLLM's emulation kernels (dequantize + F.linear), not the gfx950 MX GEMM"


@dataclass(frozen=True)
class VllmLoadOptions:
    calib: Path | None = None
    positions: int = 32           # per sample (sequence)
    samples: int = 2
    seed: int = 0
    target_layers: int = 32       # the runtime layer index vLLM gives the draft (model.layers.{T})
    timeout_s: float = 600.0
    taps: tuple[int, ...] | None = None      # the calibration set's layers to feed (a set may store more)
    num_target_layers: int | None = None     # the real target's depth: the layers vLLM's defaults name


def vllm_missing_reason() -> str | None:
    """Why vLLM's own code cannot run here, or None (checks the install without importing vLLM)."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed in this environment (make setup-vllm)"
    return None


def run_vllm_load(artifact: str | Path, options: VllmLoadOptions | None = None) -> dict:
    """The worker's JSON result: {"ok": bool, ...} (engines/vllm/load_child.py); {"ok": False, "error"} if it died."""
    return run_vllm_load_many([artifact], options)[0]


def run_vllm_load_many(artifacts: list[str | Path], options: VllmLoadOptions | None = None) -> list[dict]:
    """One worker process for several artifacts (vLLM is imported once); one result per artifact, in order."""
    options = options or VllmLoadOptions()
    paths = [str(Path(a).resolve()) for a in artifacts]
    request = {"artifacts": paths, "calib": str(Path(options.calib).resolve()) if options.calib else None,
               "positions": options.positions, "samples": options.samples, "seed": options.seed,
               "target_layers": options.target_layers, "num_target_layers": options.num_target_layers,
               "taps": list(options.taps) if options.taps is not None else None}
    env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR", "TOKENIZERS_PARALLELISM": "false"}
    command = ChildCommand(sys.executable, WORKER, name="the vLLM worker", env=env)
    run = run_child(command, request, timeout_s=options.timeout_s * len(paths))
    results = run.result or {}      # the worker writes each artifact's result as it finishes
    return [results.get(p, {"ok": False, "error": run.error or "the vLLM worker wrote no result for it"})
            for p in paths]


def linear_problems(result: dict) -> list[str]:
    """Runtime linears whose quant method differs from what the checkpoint holds."""
    problems = []
    fp8 = result["checkpoint_fp8"]
    for module, info in result["linears"].items():
        if module not in fp8:
            continue
        quantized = info["quant_method"] in QUANTIZED_METHODS
        if quantized != fp8[module]:
            problems.append(f"{info['prefix'] or module}: vLLM built {info['quant_method']}"
                            f"{' + ' + info['scheme'] if info['scheme'] else ''} but the checkpoint holds "
                            f"{'FP8' if fp8[module] else 'unquantized'} weights")
    return problems


def fed_problems(fed: dict | None, engine: str) -> list[str]:
    """The runners that feed other layers than the manifest says the artifact is served with, or fewer states
    than the draft's fc reads (a layer named twice, or past the target's last)."""
    if not fed:
        return []
    found = [f"{engine} {name} feeds {len(each['layers'])} states, hidden_states{each['layers']} "
             f"({each['source']}), the draft's fc reads {fed['states_read']}"
             for name, each in fed["runners"].items()
             if fed.get("states_read") and len(each["layers"]) < fed["states_read"]]
    if fed.get("intended") is not None:
        found += [f"{engine} {name} feeds hidden_states{each['layers']}, the manifest says hidden_states"
                  f"{fed['intended']}" for name, each in fed["runners"].items() if each["layers"] != fed["intended"]]
    return found


def fed_text(fed: dict | None) -> str:
    """'; target layers fed: ...' as vLLM's own code reads the artifact's config (both model runners)."""
    if not fed:
        return ""
    runners = "; ".join(f"{name} hidden_states{each['layers']} ({each['source']})"
                        for name, each in fed["runners"].items())
    return f"; target layers vLLM feeds it ({fed['target_layers']}-layer target): {runners}"


def vllm_load_check(result: dict) -> Check:
    if not result.get("ok"):
        return failed(CHECK_NAME, f"vLLM's own loader failed on the artifact: {result.get('error')}")
    problems = linear_problems(result)
    if result["not_consumed"]:
        problems.append(f"tensors vLLM did not load: {', '.join(result['not_consumed'][:5])}")
    if result["uninitialized"]:
        problems.append(f"parameters vLLM left at their initial value: {', '.join(result['uninitialized'][:5])}")
    if result["not_identical"]:
        problems.append(f"tensors not byte-identical after loading: {'; '.join(result['not_identical'][:3])}")
    problems += fed_problems(result.get("fed_layers"), "vLLM")
    logits = result["logits"]
    forms = result.get("logits_by_form") or {"paged": logits}
    for form, each in forms.items():
        where = f" ({form} form)" if len(forms) > 1 else ""
        if not each["vllm_logits_finite"]:
            problems.append(f"vLLM's logits are not finite (NaN/Inf){where}")
        elif each["relative_dlogit"] > MAX_RELATIVE_DLOGIT or each["top1_agreement"] < MIN_TOP1:
            problems.append(f"vLLM's forward{where} and the runtime disagree: top-1 {each['top1_agreement']:.3f} "
                            f"(>= {MIN_TOP1}), max |dlogit| {100 * each['relative_dlogit']:.2f}% of max |logit| "
                            f"(<= {100 * MAX_RELATIVE_DLOGIT:.0f}%)")
    data = {k: result[k] for k in ("vllm_version", "architecture", "dtype", "linears", "tensors", "identical",
                                   "skipped_on_purpose", "attention", "inputs", "embedding", "wall_s")}
    data["fed_layers"] = result.get("fed_layers")
    data["lm_head"] = result.get("lm_head", "the draft's own")
    data["logits"], data["logits_by_form"] = logits, forms
    if result.get("mx_kernel"):
        data["mx_kernel"] = result["mx_kernel"]
    if problems:
        return failed(CHECK_NAME, "; ".join(problems), **data)
    methods = sorted({f"{i['quant_method']}{'/' + i['scheme'] if i['scheme'] else ''}"
                      for i in result["linears"].values()})
    detail = (f"vLLM {result['vllm_version']} built {result['architecture']} with {', '.join(methods)} as planned; "
              f"{result['identical']} tensors loaded byte-identical "
              f"({', '.join(result['skipped_on_purpose']) or 'none'} skipped by vLLM on purpose); "
              f"forward vs runtime on {logits['positions']} positions: "
              + "; ".join(f"{form + ' form ' if len(forms) > 1 else ''}top-1 {each['top1_agreement']:.3f}, "
                          f"max |dlogit| {100 * each['relative_dlogit']:.2f}% of max |logit|"
                          for form, each in forms.items())
              + " (the attention kernel replaced by a causal fp32-score stand-in on CPU"
              + f"{MX_NOTE if result.get('mx_kernel') else ''})" + fed_text(result.get("fed_layers")))
    return passed(CHECK_NAME, detail, **data)


def check_vllm_load(artifact: str | Path, options: VllmLoadOptions | None = None) -> Check:
    """The ``vllm_load`` check for one artifact folder; ``skipped`` with the reason when vLLM is not installed."""
    reason = vllm_missing_reason()
    if reason is not None:
        return skipped(CHECK_NAME, reason)
    return vllm_load_check(run_vllm_load(artifact, options))
