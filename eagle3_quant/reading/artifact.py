"""One FP8 or MX draft folder as written by `quantize`, read back from its files: its tensors, config and which
linears are quantized. What its manifest says was done to it, and its BF16 reference: `records/artifact.py`.

Everything that reads an artifact (validate, bench, the engines' loader children) reads its files through here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.reading.checkpoint import Checkpoint, read_checkpoint
from eagle3_quant.reading.config import DraftConfig, parse_config, read_config_file
from eagle3_quant.reading.formats import detect_format
from eagle3_quant.reading.int_fp4_layout import QuantLinear, quant_linears
from eagle3_quant.reading.layout import DraftLayout, build_layout
from eagle3_quant.reading.mx_format import ELEMENT_BITS
from eagle3_quant.reading.mx_layout import mx_modules, mx_unpacked_shape, mx_weight_element
from eagle3_quant.reading.safetensors_header import FP8_DTYPES
from eagle3_quant.reading.scale_names import WRITTEN_SCALE_SUFFIXES
from eagle3_quant.util.hashing import FileDigest

MX_ELEMENT_DTYPES = tuple(ELEMENT_BITS)


def quant_spec(value) -> dict:
    """A Quark quantization spec as a config holds it: an object, the first of a list of them (NVFP4's, MXFP8's), else
    nothing ({}): a config claiming any structure is judged, never crashed on."""
    if isinstance(value, list):
        value = next((item for item in value if isinstance(item, dict)), None)
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Fp8Artifact:
    """An FP8 draft folder as read from disk: its tensors, config and which linears hold FP8 weights."""

    path: Path
    checkpoint: Checkpoint
    raw_config: dict
    config: DraftConfig
    layout: DraftLayout
    fp8_modules: tuple[str, ...]          # every quantized linear: FP8, packed MX when `mx_modules` names it, INT8,
    mx_modules: tuple[str, ...] = ()      # INT4, NVFP4 or MXFP8 when `quant_linears` does
    config_digest: FileDigest | None = None   # of the config.json bytes `raw_config` was parsed from
    quant_linears: dict[str, QuantLinear] = dataclasses.field(default_factory=dict)

    @property
    def quant_config(self) -> dict:
        qc = self.raw_config.get("quantization_config")
        return qc if isinstance(qc, dict) else {}

    @property
    def mx_element(self) -> str:
        """The MX element dtype the config declares for the weights ("fp4", "fp6_e2m3", "fp6_e3m2")."""
        return mx_weight_element(self.raw_config, self.path)

    def role_of(self, module: str) -> str:
        return next(lin.role for lin in self.layout.linears if lin.module == module)


def read_artifact(out: Path) -> Fp8Artifact:
    """Headers and config of OUT; the draft's layout is checked as if its FP8 weights were BF16."""
    raw, config_digest = read_config_file(out / "config.json")
    checkpoint = read_checkpoint(out)
    mx = tuple(sorted(mx_modules(checkpoint.tensors, out)))
    others = quant_linears(checkpoint.tensors, out)
    fp8 = tuple(sorted({n.removesuffix(".weight") for n, i in checkpoint.tensors.items() if i.dtype in FP8_DTYPES
                        and n.endswith(".weight")} | set(mx) | set(others)))
    scales = {f"{m}.{s}" for m in fp8 for s in WRITTEN_SCALE_SUFFIXES}
    view = {n: dataclasses.replace(i, dtype="BF16") if i.dtype in FP8_DTYPES else i
            for n, i in checkpoint.tensors.items() if n not in scales}
    for module in mx:      # packed MX: the float width is 32 per E8M0 scale
        view[module + ".weight"] = dataclasses.replace(view[module + ".weight"], dtype="BF16",
                                                       shape=mx_unpacked_shape(checkpoint.tensors, module))
    for module, linear in others.items():
        view[module + ".weight"] = dataclasses.replace(view[module + ".weight"], dtype="BF16", shape=linear.shape)
    fmt = detect_format(view, raw, str(out))
    float_raw = {k: v for k, v in raw.items() if k != "quantization_config"}
    config = parse_config(float_raw, fmt, out / "config.json")
    layout = build_layout(fmt, config, view, str(out))
    return Fp8Artifact(out, checkpoint, raw, config, layout, fp8, mx, config_digest, others)
