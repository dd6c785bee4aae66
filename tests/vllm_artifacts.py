"""Tiny FP8 artifacts, one per plan variant, for the checks that run vLLM's own code (real Quark outputs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from calib_fixtures import write_calibration, write_target

from eagle3_quant.reading.formats import DraftFormat
from fixtures.synthetic import write_synthetic_draft

# name -> (draft format, quantize_draft keyword arguments, config.json edits of the source)
VARIANTS = {
    "ptpc": (DraftFormat.SPECFORGE, {}, {}),
    "static": (DraftFormat.SPECFORGE, {"scheme": "fp8", "calib": True}, {}),
    "speculators": (DraftFormat.SPECULATORS, {}, {}),
    "speculators-nbr": (DraftFormat.SPECULATORS, {}, {"norm_before_residual": True}),
    "eagle-fp16": (DraftFormat.EAGLE, {"serve_taps": "as-is"}, {}),       # no ids: the engines' defaults, said so
    "quantize-fc": (DraftFormat.SPECFORGE, {"quantize_fc": True}, {}),
    "exclude-qkv": (DraftFormat.SPECFORGE, {"exclude": ["qkv_proj"]}, {}),
    "exclude-mlp": (DraftFormat.SPECFORGE, {"exclude": ["mlp"]}, {}),
    "exclude-down": (DraftFormat.SPECFORGE, {"exclude": ["down_proj"]}, {}),
    "exclude-o": (DraftFormat.SPECULATORS, {"exclude": ["o_proj"]}, {}),
    "exclude-attention": (DraftFormat.SPECULATORS, {"exclude": ["attention"]}, {}),
    "exclude-gate-up": (DraftFormat.EAGLE, {"exclude": ["gate_up_proj"], "serve_taps": "as-is"}, {}),
}


def calibration_set(root: Path) -> Path:
    folder = root / "calib"
    if not folder.exists():
        write_calibration(folder, write_target(root / "target"))
    return folder


def build_variant(root: Path, name: str) -> Path:
    """Quantize the tiny synthetic draft as variant `name` into root/name (real Quark)."""
    from eagle3_quant.quantize.api import quantize_draft

    fmt, kwargs, edits = VARIANTS[name]
    src = write_synthetic_draft(root / f"{name}-src", "tiny", fmt)
    if edits:
        config = json.loads((src / "config.json").read_text())
        (src / "config.json").write_text(json.dumps({**config, **edits}))
    kwargs = dict(kwargs)
    if kwargs.pop("calib", False):
        kwargs["calib"] = calibration_set(root)
    # vLLM artifacts: SGLang 0.5.23 serves no speculators or original EAGLE draft (engines/draft_support.py)
    quantize_draft(src, root / name, device="cpu", engine="vllm", **kwargs)
    return root / name


def with_quark_plain_exclude(artifact: Path, out: Path) -> Path:
    """A copy whose exclude list is what Quark itself writes: ["fc", "lm_head"] (plain names)."""
    shutil.copytree(artifact, out)
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"]["exclude"] = ["fc", "lm_head"]
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
