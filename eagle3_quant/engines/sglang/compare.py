"""What SGLang's loader made of a checkpoint, compared with the checkpoint (runs in the sglang_load child).

- `layer_decisions`: per runtime linear, the name SGLang matched against `exclude`, the quant method it built
  and what the checkpoint holds for it (FP8, MXFP4 or BF16);
- `compare_parameters`: every checkpoint tensor landed byte-identical in a parameter (SGLang's
  ``load_weights`` drops names it does not know, and casts into a parameter of another dtype, silently);
- `compare_linears`: each quantized linear's forward next to this project's runtime on the same checkpoint
  tensors (`Fp8Linear`, or `MxLinear` for MXFP4).
"""

from __future__ import annotations

from pathlib import Path

import torch

# SGLang's fused runtime linears and the checkpoint linears behind them, in its load order
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
SHARD_OF = {role: (fused, i) for fused, roles in FUSED.items() for i, role in enumerate(roles)}
LEGACY_NAMES = {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
                "aux_norm_high": "fc_norm.2"}
SKIPPED_ON_PURPOSE = ("t2d",)                  # SGLang's load_weights skips it; d2t becomes hot_token_id
FROM_TARGET = ("model.embed_tokens.weight", "lm_head.weight")   # shared from the target when the draft lacks them
LINEAR_ROLES = ("fc", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def read_checkpoint(artifact: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for file in sorted(artifact.glob("*.safetensors")):
        tensors.update(load_file(file))
    return tensors


def _sglang_name(name: str) -> str:
    for legacy, new in LEGACY_NAMES.items():
        name = name.replace(legacy, new)
    return name


def _role(name: str) -> str | None:
    parts = name.split(".")
    return parts[-2] if len(parts) >= 2 and parts[-2] in LINEAR_ROLES else None


def _target_param(name: str, params: dict) -> tuple[str, int | None]:
    """The parameter SGLang's load_weights writes checkpoint tensor `name` into, and the shard index."""
    name = _sglang_name(name)
    role = _role(name)
    shard = None
    if role in SHARD_OF:
        fused, shard = SHARD_OF[role]
        name = name.replace(f".{role}.", f".{fused}.")
    return (name if name in params else f"model.{name}"), shard


def _bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _expected(parts: dict[int | None, torch.Tensor]) -> torch.Tensor:
    if None in parts:
        return parts[None]
    ordered = [parts[i] for i in sorted(parts)]
    if all(t.numel() == 1 for t in ordered):            # per-tensor scales: one per shard
        return torch.stack([t.reshape(()) for t in ordered])
    return torch.cat(ordered, 0)


def compare_parameters(model, artifact: Path) -> dict:
    """Right after ``load_weights``: every checkpoint tensor consumed, byte-identical, nothing left unloaded."""
    checkpoint = read_checkpoint(artifact)
    params = dict(model.named_parameters())
    wanted: dict[str, dict[int | None, torch.Tensor]] = {}
    sources: dict[str, list[str]] = {}
    problems, skipped, consumed = [], [], 0
    for name, tensor in checkpoint.items():
        if name in SKIPPED_ON_PURPOSE:
            skipped.append(name)
            continue
        if name == "d2t":
            hot = getattr(model, "hot_token_id", None)
            expected = tensor + torch.arange(tensor.shape[0])
            if hot is None or not torch.equal(hot.cpu(), expected):
                problems.append("d2t: hot_token_id is not d2t + arange")
            else:
                consumed += 1
            continue
        param, shard = _target_param(name, params)
        if param not in params:
            problems.append(f"{name}: SGLang has no parameter for it ({param}): dropped silently")
            continue
        wanted.setdefault(param, {})[shard] = tensor
        sources.setdefault(param, []).append(name)
    for param, parts in wanted.items():
        expected, loaded = _expected(parts), params[param].detach().cpu()
        if expected.numel() == loaded.numel() == 1:       # per-tensor scales: SGLang keeps a scalar as [1]
            expected = expected.reshape(loaded.shape)
        what = ", ".join(sources[param])
        if loaded.dtype != expected.dtype:
            problems.append(f"{param}: holds {str(loaded.dtype).removeprefix('torch.')}, the checkpoint's {what} "
                            f"is {str(expected.dtype).removeprefix('torch.')}: cast on load")
        elif loaded.shape != expected.shape:
            problems.append(f"{param}: shape {list(loaded.shape)}, the checkpoint's {what} gives "
                            f"{list(expected.shape)}")
        elif not _bytes_equal(loaded, expected):
            problems.append(f"{param}: differs from the checkpoint's {what}")
    unloaded = sorted(set(params) - set(wanted))
    problems += [f"{p}: not in the checkpoint, keeps its initial value" for p in unloaded
                 if p not in FROM_TARGET and not p.endswith(("k_scale", "v_scale"))]
    return {"checkpoint_tensors": len(checkpoint), "consumed": consumed + sum(len(s) for s in sources.values()),
            "skipped_on_purpose": skipped, "from_target": [p for p in unloaded if p in FROM_TARGET],
            "problems": problems}


def _roles(module_name: str) -> tuple[str, ...]:
    last = module_name.rsplit(".", 1)[-1]
    return FUSED.get(last, (last,))


FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def _checkpoint_format(checkpoint: dict[str, torch.Tensor], roles: tuple[str, ...]) -> str | None:
    """"fp8", "mxfp4" (Quark's packed uint8), "bf16" (any float) or "mixed" for the weights of `roles`."""
    dtypes = {t.dtype for n, t in checkpoint.items() if n.endswith(".weight") and _role(n) in roles}
    if not dtypes:
        return None
    if dtypes <= set(FP8_DTYPES):
        return "fp8"
    if dtypes == {torch.uint8}:
        return "mxfp4"
    return "bf16" if all(d.is_floating_point for d in dtypes) else "mixed"


def _built_format(method: str) -> str:
    return "MXFP4" if "MXFP4" in method else "FP8"


def _method(module) -> tuple[str, bool]:
    method = getattr(module, "quant_method", None)
    if method is None:
        return f"{type(module).__name__} (no quant method)", False
    scheme = getattr(module, "scheme", None)
    if scheme is None:
        return type(method).__name__, False
    return f"{type(method).__name__} + {type(scheme).__name__}", True


def layer_decisions(model, runtime_names: dict[int, str], artifact: Path) -> list[dict]:
    """Per runtime linear: what SGLang built, and whether that is what the checkpoint holds."""
    checkpoint = read_checkpoint(artifact)
    rows = []
    for path, module in model.named_modules():
        last = path.rsplit(".", 1)[-1]
        if last not in (*FUSED, "o_proj", "down_proj", "fc", "lm_head"):
            continue
        roles = _roles(path)
        method, quantized = _method(module)
        held = _checkpoint_format(checkpoint, roles)
        problem = None
        if held is not None and quantized != (held in ("fp8", "mxfp4")):
            built = _built_format(method)
            problem = (f"SGLang builds it {built} ({method}) over the checkpoint's BF16 weights: they are cast into "
                       f"{built} and weight_scale keeps its initial value" if quantized else
                       f"SGLang builds it unquantized ({method}) but the checkpoint holds {held.upper()} weights: "
                       "they are cast to the model dtype and the scale is dropped")
        elif quantized and held is not None and _built_format(method).lower() != held:
            problem = f"SGLang builds it {_built_format(method)} ({method}) but the checkpoint holds {held.upper()}"
        rows.append({"module": path, "runtime_name": runtime_names.get(id(module), path), "roles": list(roles),
                     "method": method, "quantized": quantized, "checkpoint": held,
                     "checkpoint_fp8": None if held is None else held == "fp8", "problem": problem})
    return rows


def _mx_input_kind(artifact: Path, has_input_scale: bool) -> str:
    """What the runtime's MxLinear does with the activations, as the checkpoint's config declares them."""
    import json

    if has_input_scale:
        return "fp8_static"
    qc = json.loads((artifact / "config.json").read_text()).get("quantization_config") or {}
    inputs = (qc.get("global_quant_config") or {}).get("input_tensors") or {}
    return "mxfp4" if inputs.get("dtype") == "fp4" else "none"


def _ours(checkpoint: dict[str, torch.Tensor], module_path: str, roles: tuple[str, ...], artifact: Path):
    """The runtime's linears (Fp8Linear or MxLinear) for the shards of one SGLang linear, or None."""
    from eagle3_quant.runtime.fp8_linear import Fp8Linear, harmonize_fused
    from eagle3_quant.runtime.mx_linear import MxLinear, harmonize_fused_mx

    layers = []
    for role in roles:
        names = [n for n in checkpoint if n.endswith(f".{role}.weight") or n == f"{role}.weight"]
        if len(names) != 1:
            return None
        stem = names[0].removesuffix(".weight")
        if f"{stem}.weight_scale" not in checkpoint:
            return None
        weight, scale = checkpoint[f"{stem}.weight"], checkpoint[f"{stem}.weight_scale"]
        input_scale = checkpoint.get(f"{stem}.input_scale")
        if weight.dtype == torch.uint8:
            layers.append(MxLinear(weight, scale, _mx_input_kind(artifact, input_scale is not None), input_scale))
        else:
            layers.append(Fp8Linear(weight, scale.reshape(-1), input_scale))
    if len(layers) > 1:
        (harmonize_fused_mx if isinstance(layers[0], MxLinear) else harmonize_fused)(layers)
    return layers


def compare_linears(model, artifact: Path, tokens: int = 7, seed: int = 0) -> list[dict]:
    """After ``process_weights_after_loading``: each quantized linear (FP8 or MXFP4) on seeded inputs, SGLang vs
    our runtime."""
    checkpoint = read_checkpoint(artifact)
    rows = []
    generator = torch.Generator().manual_seed(seed)
    for path, module in model.named_modules():
        if getattr(module, "scheme", None) is None or not hasattr(module, "input_size"):
            continue
        try:
            ours = _ours(checkpoint, path, _roles(path), artifact)
        except ValueError as exc:         # the runtime refuses these tensors (an Eagle3QuantError)
            rows.append({"module": path, "problem": f"the runtime refuses the checkpoint's tensors: {exc}"})
            continue
        x = torch.randn(tokens, module.input_size, generator=generator).to(model_dtype(model))
        with torch.no_grad():
            out = module(x)
        out = out[0] if isinstance(out, tuple) else out
        row = {"module": path, "shape": [tokens, module.input_size, int(out.shape[-1])],
               "dtype": str(out.dtype).removeprefix("torch.")}
        if ours is None:
            row["problem"] = "no quantized weights for it in the checkpoint"
        else:
            with torch.no_grad():
                reference = torch.cat([layer(x) for layer in ours], -1).to(out.dtype)
            diff = (out.float() - reference.float()).abs()
            diff = torch.where(out.isnan() & reference.isnan(), 0.0, diff)     # NaN in both agrees
            row.update(max_abs_diff=float(diff.max()), max_abs=float(reference.float().abs().max()),
                       equal_fraction=float((diff == 0).float().mean()))
        rows.append(row)
    return rows


def model_dtype(model) -> torch.dtype:
    return next(p.dtype for p in model.parameters() if p.dtype.is_floating_point and p.dtype.itemsize >= 2)
