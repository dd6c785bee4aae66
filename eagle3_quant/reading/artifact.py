"""One FP8 or MX draft folder as written by `quantize`, read back: its tensors, config, which linears are quantized,
what its manifest says was done to it (vocabulary pruning, smoothing, serve taps), and its BF16 reference.

Everything that reads an artifact (validate, bench, the engines' loader children) reads it through here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.errors import DraftFormatError, ManifestError
from eagle3_quant.reading.checkpoint import Checkpoint, read_checkpoint
from eagle3_quant.reading.config import DraftConfig, load_config_file, parse_config
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.formats import detect_format
from eagle3_quant.reading.layout import DraftLayout, build_layout
from eagle3_quant.reading.safetensors_header import FP8_DTYPES
from eagle3_quant.reading.scale_names import WRITTEN_SCALE_SUFFIXES
from eagle3_quant.records.manifest import Manifest
from eagle3_quant.runtime.mx import ELEMENT_BITS
from eagle3_quant.runtime.mx_loading import mx_modules, mx_unpacked_shape, mx_weight_element

MX_ELEMENT_DTYPES = tuple(ELEMENT_BITS)


@dataclass(frozen=True)
class Fp8Artifact:
    """An FP8 draft folder as read from disk: its tensors, config and which linears hold FP8 weights."""

    path: Path
    checkpoint: Checkpoint
    raw_config: dict
    config: DraftConfig
    layout: DraftLayout
    fp8_modules: tuple[str, ...]          # every quantized linear: FP8, or packed MX when `mx_modules` names it
    mx_modules: tuple[str, ...] = ()

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
    raw = load_config_file(out / "config.json")
    checkpoint = read_checkpoint(out)
    mx = tuple(sorted(mx_modules(checkpoint.tensors, out)))
    fp8 = tuple(sorted({n.removesuffix(".weight") for n, i in checkpoint.tensors.items() if i.dtype in FP8_DTYPES}
                       | set(mx)))
    scales = {f"{m}.{s}" for m in fp8 for s in WRITTEN_SCALE_SUFFIXES}
    view = {n: dataclasses.replace(i, dtype="BF16") if i.dtype in FP8_DTYPES else i
            for n, i in checkpoint.tensors.items() if n not in scales}
    for module in mx:      # packed MX: the float width is 32 per E8M0 scale
        view[module + ".weight"] = dataclasses.replace(view[module + ".weight"], dtype="BF16",
                                                       shape=mx_unpacked_shape(checkpoint.tensors, module))
    fmt = detect_format(view, raw, str(out))
    float_raw = {k: v for k, v in raw.items() if k != "quantization_config"}
    config = parse_config(float_raw, fmt, out / "config.json")
    layout = build_layout(fmt, config, view, str(out))
    return Fp8Artifact(out, checkpoint, raw, config, layout, fp8, mx)


VOCAB_TENSORS = frozenset({"lm_head.weight", "d2t", "t2d"})


def pruned_vocab(out: Path) -> int | None:
    """The draft vocabulary `quantize --draft-vocab` pruned OUT to (its manifest says), else None."""
    try:
        return int((Manifest.read(out).vocab_pruning or {})["draft_vocab"])
    except (ManifestError, KeyError, TypeError, ValueError):
        return None


def written_taps(out: Path) -> dict:
    """The aux layer ids `quantize --serve-taps trained` wrote into OUT's config (its manifest says), else {}."""
    try:
        record = Manifest.read(out).serve_taps
    except ManifestError:
        return {}
    return dict(record.written) if record is not None else {}


def smoothed_tensors(out: Path) -> set[str]:
    """The BF16 tensors `quantize --smooth-alpha` folded its scales into (its manifest says)."""
    try:
        return {str(n) for n in (Manifest.read(out).smoothing or {}).get("folded_tensors", [])}
    except (ManifestError, TypeError, AttributeError):
        return set()


def read_reference(reference: Path | None, out: Path) -> DraftCheckpoint | None:
    """The BF16 draft to compare with: the one given, else the manifest's local source if it still exists."""
    from eagle3_quant.reading.draft import read_draft
    from eagle3_quant.records.public_names import recorded_source_path

    if reference is not None:
        return read_draft(reference)
    source = recorded_source_path(out)
    if source is None:    # outputs written before the local record: an absolute path in the manifest
        try:
            source = Manifest.read(out).source.path
        except ManifestError:
            return None
        source = source if Path(source).is_absolute() else None
    if source and Path(source).is_dir():
        try:
            return read_draft(source)
        except DraftFormatError:
            return None
    return None
