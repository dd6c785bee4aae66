"""Self-verifying export: reload what was written and compare it with the source and the plan."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from eagle3_quant.errors import QuantizationError
from eagle3_quant.plan import QuantPlan
from eagle3_quant.quantize.verify_layouts import check_quant_weight
from eagle3_quant.reading.checkpoint import read_checkpoint
from eagle3_quant.reading.draft import DraftCheckpoint
from eagle3_quant.reading.safetensors_header import TensorInfo, read_header
from eagle3_quant.records.manifest import MANIFEST_NAME
from eagle3_quant.util.hashing import ByteRange, FileDigest, RangeVisitor, digest_folder, read_full

NEW_LAYOUTS = ("int8", "int4", "nvfp4", "mxfp8")     # weight kinds (TensorQuantSpec.kind) verify_layouts checks
READ_THREADS = 2
PIECE = 4 * 1024 * 1024      # per thread: one piece of OUT and the same piece of the source in memory
_buffers = threading.local()


@dataclass(frozen=True)
class VerifiedExport:
    tensors: int                 # tensors checked
    files: list[FileDigest]      # sha256 of every file in OUT, from the same read that compared the bytes


def same_bytes(a: TensorInfo, b: TensorInfo) -> bool:
    """Whether two tensors' data are byte-identical, read in pieces (never a whole tensor in memory)."""
    if a.nbytes != b.nbytes:
        return False
    with a.file.open("rb") as fa, b.file.open("rb") as fb:
        fa.seek(read_header(a.file).data_start + a.data_offsets[0])
        fb.seek(read_header(b.file).data_start + b.data_offsets[0])
        left = a.nbytes
        while left:
            n = min(PIECE, left)
            if fa.read(n) != fb.read(n):
                return False
            left -= n
    return True


def _same_bytes_visitor(src: TensorInfo, src_begin: int, where: Path, name: str) -> RangeVisitor:
    """Compare each piece of the output tensor with the same bytes of the source tensor (memcmp)."""

    def visit(piece: memoryview, offset: int) -> None:
        if len(piece) == PIECE:
            expected = getattr(_buffers, "piece", None) or bytearray(PIECE)
            _buffers.piece = expected
        else:
            expected = bytearray(len(piece))
        with src.file.open("rb", buffering=0) as fh:
            fh.seek(src_begin + offset)
            filled = read_full(fh, memoryview(expected))
        if filled != len(piece) or expected != piece:
            raise QuantizationError("should be copied unchanged but differs from the source", path=where,
                                    tensor=name)

    return visit



def _check_scale(info: TensorInfo | None, name: str, shape: tuple[int, ...], where: Path) -> None:
    if info is None:
        raise QuantizationError("missing from the output", path=where, tensor=name)
    if info.dtype != "F32" or info.shape not in (shape, ()):
        raise QuantizationError(f"expected F32 {list(shape)}, got {info.dtype} {list(info.shape)}", path=where,
                                tensor=name)
    scale = info.load()
    if not bool(torch.isfinite(scale).all()) or not bool((scale > 0).all()):
        raise QuantizationError("scale is not finite and positive everywhere", path=where, tensor=name)


def _check_e8m0(info: TensorInfo | None, name: str, shape: tuple[int, ...], where: Path) -> None:
    if info is None:
        raise QuantizationError("missing from the output", path=where, tensor=name)
    if info.dtype != "U8" or info.shape != shape:
        raise QuantizationError(f"expected E8M0 scales U8 {list(shape)}, got {info.dtype} {list(info.shape)}",
                                path=where, tensor=name)
    if bool((info.load() == 255).any()):   # 0xFF is E8M0's NaN
        raise QuantizationError("E8M0 scale holds NaN (0xFF)", path=where, tensor=name)


def _check_mx_weight(written: dict[str, TensorInfo], module: str, src_info: TensorInfo, plan: QuantPlan,
                     where: Path) -> set[str]:
    """An MX weight: packed elements U8 [out, in * bits / 8] and E8M0 scales U8 [out, in / 32]; the names added."""
    spec = plan.scheme.weight
    rows, cols = src_info.shape
    info = written[module + ".weight"]
    packed = (rows, cols * spec.element_bits // 8)
    if info.dtype != "U8" or info.shape != packed:
        raise QuantizationError(f"expected packed {spec.dtype} U8 {list(packed)}, got {info.dtype} "
                                f"{list(info.shape)}", path=where, tensor=module + ".weight")
    _check_e8m0(written.get(module + ".weight_scale"), module + ".weight_scale", (rows, cols // spec.group_size),
                where)
    added = {module + ".weight_scale"}
    if not plan.scheme.input.dynamic:
        _check_scale(written.get(module + ".input_scale"), module + ".input_scale", (1,), where)
        added.add(module + ".input_scale")
    return added


def _check_added_scales(written: dict[str, TensorInfo], names: set[str], where: Path) -> None:
    """Every float or FP8 scale finite and non-negative (a group of zeros has scale 0; a global or per-channel scale is
    positive), no E8M0 NaN (0xFF); zero points may hold any code."""
    for name in sorted(n for n in names if "zero_point" not in n):
        info = written[name]
        if info.dtype == "U8":
            _check_e8m0(info, name, info.shape, where)
            continue
        scale = info.load().to(torch.float32)
        floor_ok = (scale >= 0) if info.dtype == "F8_E4M3" else (scale > 0)
        if not bool(torch.isfinite(scale).all()) or not bool(floor_ok.all()):
            raise QuantizationError("scale is not finite and positive everywhere", path=where, tensor=name)


def verify_export(draft: DraftCheckpoint, out: Path, plan: QuantPlan) -> VerifiedExport:
    """Raise QuantizationError on any difference from the plan; return what was checked and every file's digest.

    Headers first (names, dtypes, shapes, scales); then one streamed read of OUT hashes every file and
    bit-compares each tensor that must be unchanged with the source, never a whole tensor in memory.
    """
    written = read_checkpoint(out).tensors
    unchanged: list[tuple[TensorInfo, TensorInfo]] = []
    quantized = {d.module: d for d in plan.quantized}
    expected_new = set()
    for name, src_info in draft.checkpoint.tensors.items():
        out_info = written.get(name)
        if out_info is None:
            raise QuantizationError("dropped from the output", path=out, tensor=name)
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module in quantized and plan.scheme.weight.kind in NEW_LAYOUTS:
            added = check_quant_weight(written, module, src_info, plan.scheme, out)
            _check_added_scales(written, added, out)
            expected_new |= added
        elif name.endswith(".weight") and module in quantized and plan.scheme.mx:
            expected_new |= _check_mx_weight(written, module, src_info, plan, out)
        elif name.endswith(".weight") and module in quantized:
            if out_info.dtype != "F8_E4M3" or out_info.shape != src_info.shape:
                raise QuantizationError(f"expected F8_E4M3 {list(src_info.shape)}, got {out_info.dtype} "
                                        f"{list(out_info.shape)}", path=out, tensor=name)
            per_channel = plan.scheme.weight.granularity == "per_channel"
            _check_scale(written.get(module + ".weight_scale"), module + ".weight_scale",
                         (src_info.shape[0],) if per_channel else (1,), out)
            expected_new.add(module + ".weight_scale")
            if not plan.scheme.input.dynamic:
                _check_scale(written.get(module + ".input_scale"), module + ".input_scale", (1,), out)
                expected_new.add(module + ".input_scale")
        elif (out_info.dtype, out_info.shape, out_info.nbytes) != (src_info.dtype, src_info.shape, src_info.nbytes):
            raise QuantizationError("should be copied unchanged but differs from the source", path=out,
                                    tensor=name)
        else:
            unchanged.append((src_info, out_info))
    unexpected = sorted(set(written) - set(draft.checkpoint.tensors) - expected_new)
    if unexpected:
        raise QuantizationError(f"unexpected tensors in the output: {', '.join(unexpected[:5])}", path=out)
    return VerifiedExport(len(written), digest_folder(out, skip=frozenset({MANIFEST_NAME}),
                                                      ranges=_comparison_ranges(unchanged, out), workers=READ_THREADS,
                                                      chunk=PIECE))


def _comparison_ranges(pairs: list[tuple[TensorInfo, TensorInfo]], where: Path) -> dict[Path, list[ByteRange]]:
    starts: dict[Path, int] = {}

    def data_start(file: Path) -> int:
        if file not in starts:
            starts[file] = read_header(file).data_start
        return starts[file]

    ranges: dict[Path, list[ByteRange]] = {}
    for src, written in pairs:
        if written.nbytes:
            begin = data_start(written.file) + written.data_offsets[0]
            visit = _same_bytes_visitor(src, data_start(src.file) + src.data_offsets[0], where, src.name)
            ranges.setdefault(written.file.resolve(), []).append(ByteRange(begin, begin + written.nbytes, visit))
    return ranges
