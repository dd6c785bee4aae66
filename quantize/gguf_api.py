"""`gguf_draft` (`eagle3-quant gguf`): an Eagle3 draft as a GGUF file llama.cpp serves (``llama-server -md``),
written by llama.cpp's own converter and `llama-quantize`, fed the layers the draft was trained on.

DRAFT is a BF16 draft (folder or Hub id), or a Quark artifact of this tool whose FP4 blocks are carried bit for bit
(``--type mxfp4`` from an MXFP4-weight scheme, ``nvfp4`` from ``nvfp4``). Everything that cannot work is refused
before any conversion: a draft llama.cpp's eagle3 graph cannot run (`gguf_checks.py`), a target it does not fit,
an artifact whose format has no GGML block. OUT holds ``draft-TYPE.gguf`` and the manifest (its ``gguf`` record:
type, tensors, what stayed BF16, the target layers written, the llama.cpp build); it is written in a hidden folder
and renamed into place, and read back before that: llama.cpp's gguf-py must find the ``eagle3`` architecture, the
ids written and the types asked for, and carried blocks must dequantize (ggml's formulas) to the artifact's values.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.calib.target import TargetSpec, read_target
from eagle3_quant.engines.llamacpp.convert import convert
from eagle3_quant.engines.llamacpp.gguf_files import GgufFile, describe_gguf, replace_tensors
from eagle3_quant.engines.llamacpp.quantize import Fallback, quantize_gguf
from eagle3_quant.engines.llamacpp.tools import LlamaCppTools, find_tools
from eagle3_quant.engines.llamacpp.types import KEPT, GgufType, gguf_type
from eagle3_quant.errors import QuantizationError, SchemeError
from eagle3_quant.options import build_options
from eagle3_quant.quantize.gguf_checks import check_runs_in_llamacpp
from eagle3_quant.quantize.gguf_options import GgufOptions
from eagle3_quant.quantize.gguf_stage import StagedDraft, stage_artifact, stage_draft
from eagle3_quant.reading.artifact import Fp8Artifact, read_artifact
from eagle3_quant.reading.draft import DraftCheckpoint, read_draft
from eagle3_quant.reading.source import resolve_source
from eagle3_quant.records.gguf_record import GgufRecord, GgufTensorRecord
from eagle3_quant.records.manifest import (
    ExcludeRecord,
    LayerRecord,
    Manifest,
    SchemeRecord,
    SourceRecord,
    write_manifest,
)
from eagle3_quant.records.public_names import public_command, public_name, recorded_source_path, write_local_record
from eagle3_quant.taps.llamacpp import LlamaCppTaps, llamacpp_taps
from eagle3_quant.util.hashing import FileDigest
from eagle3_quant.util.outdir import claimed_output, scratch_beside, staged_output
from eagle3_quant.util.progress import SILENT, Progress

CARRIED_SCHEMES = {"mx": ("w_mxfp4_a_mxfp4", "w_mxfp4_a_fp8"), "nvfp4": ("nvfp4",)}
CARRIED_TYPES = {"mx": "mxfp4", "nvfp4": "nvfp4"}
TARGET_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja",
                "added_tokens.json")


@dataclass(frozen=True)
class GgufResult:
    output: Path                  # OUT
    file: Path                    # OUT/draft-TYPE.gguf
    manifest: Manifest
    taps: LlamaCppTaps
    fallbacks: tuple[Fallback, ...]
    seconds: float

    @property
    def record(self) -> GgufRecord:
        assert self.manifest.gguf is not None
        return self.manifest.gguf


@dataclass(frozen=True)
class _Source:
    """What DRAFT is: a BF16 draft, or a Quark artifact whose blocks are carried."""

    draft: DraftCheckpoint | None
    artifact: Fp8Artifact | None
    path: Path
    reference: Path | None        # the BF16 draft a measurement compares with

    @property
    def config(self):
        return self.draft.config if self.draft else self.artifact.config

    @property
    def layout(self):
        return self.draft.layout if self.draft else self.artifact.layout


def _read_source(src: str | Path, kind: GgufType) -> _Source:
    path = resolve_source(src, None).path
    raw_quantized = (path / "config.json").is_file() and '"quantization_config"' in (path / "config.json").read_text()
    if not raw_quantized:
        if kind.carries and not kind.made_by_quantize:
            raise SchemeError(f"--type {kind.name} carries a Quark {kind.name} artifact's blocks; DRAFT is a BF16 "
                              "draft", path=path, field="type",
                              hint="make the artifact first (eagle3-quant quantize DRAFT ART --scheme nvfp4), or "
                                   "pick a type llama.cpp rounds (q8_0, q4_0, q4_k_m, mxfp4)")
        return _Source(read_draft(src), None, path, path)
    art = read_artifact(path)
    scheme = _artifact_scheme(art)
    carried = next((k for k, names in CARRIED_SCHEMES.items() if scheme in names), None)
    if kind.carries is None or carried != kind.carries:
        how = "GGML has no block for its weights" if carried is None else \
            f"GGML carries its blocks only as --type {CARRIED_TYPES[carried]}"
        raise SchemeError(f"DRAFT is a {scheme or 'quantized'} artifact: {how}", path=path, field="type",
                          hint="pass its BF16 source as DRAFT to let llama.cpp round it")
    return _Source(None, art, path, recorded_source_path(path))


def _artifact_scheme(art: Fp8Artifact) -> str | None:
    from eagle3_quant.records.manifest import MANIFEST_NAME

    if (art.path / MANIFEST_NAME).is_file():
        try:
            return Manifest.read(art.path).scheme.name
        except Exception:   # noqa: BLE001 - a damaged manifest: judged by the tensors below
            pass
    if art.mx_modules and art.mx_element == "fp4":
        return "w_mxfp4_a_mxfp4"
    if any(linear.kind == "nvfp4" for linear in art.quant_linears.values()):
        return "nvfp4"
    return None


def _target_folder(target: TargetSpec) -> Path:
    """A local folder with the target's config and tokenizer (a Hub target: those files only, no weights)."""
    path = Path(target.name)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(target.name, allow_patterns=list(TARGET_FILES)))


def _tensor_types(kind: GgufType, opts: GgufOptions) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """llama-quantize's --tensor-type pairs and --output-tensor-type for this type and the keep options."""
    pairs = [] if opts.quantize_fc else [(r"^fc\.weight$", "bf16")]
    if kind.layer_type:
        pairs.append((r"^blk\.0\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight$",
                      kind.layer_type))
    return tuple(pairs), None if opts.quantize_lm_head else "bf16"


def _kept(kind: GgufType, opts: GgufOptions, written: GgufFile) -> dict[str, str]:
    if kind.name == "bf16":
        return {}
    flags = {"fc": opts.quantize_fc, "lm_head": opts.quantize_lm_head}
    return {name: f"kept BF16 as the FP8 default keeps {role} (--quantize-{role.replace('_', '-')} quantizes it)"
            for name, role in KEPT.items() if written.tensor(name) is not None and not flags[role]}


def _check_written(written: GgufFile, taps: LlamaCppTaps, kept: dict[str, str], path: Path) -> None:
    if written.architecture != "eagle3":
        raise QuantizationError(f"llama.cpp's converter wrote architecture {written.architecture!r}, not eagle3",
                                path=path)
    layers = tuple(written.arch_field("target_layers") or ())
    if layers != taps.ids:
        raise QuantizationError(f"eagle3.target_layers is {list(layers)}, not the {list(taps.ids)} asked for",
                                path=path, field="eagle3.target_layers")
    wrong = [name for name in kept if written.types.get(name) != "bf16"]
    if wrong:
        raise QuantizationError(f"{wrong[0]} is {written.types[wrong[0]]}, not BF16 as kept", path=path)


def _make(tools: LlamaCppTools, kind: GgufType, staged: StagedDraft, bf16: Path, file: Path,
          opts: GgufOptions) -> tuple[tuple[Fallback, ...], dict | None]:
    """From the converter's BF16 file to the asked type: as it is, rounded by llama-quantize, or carried."""
    if kind.name == "bf16":
        shutil.move(bf16, file)
        return (), None
    if staged.blocks:
        from safetensors.torch import save_file

        blocks = bf16.with_name("blocks.safetensors")
        save_file(staged.blocks, str(blocks))
        compared = replace_tensors(tools, bf16, file, blocks, staged.block_types)
        differ = sorted(name for name, row in compared.items() if not row["equal"])
        if differ:
            raise QuantizationError(f"the carried {kind.label} blocks do not dequantize (ggml's formulas) to the "
                                    f"artifact's values: largest difference "
                                    f"{compared[differ[0]]['max_abs_diff']}", tensor=differ[0])
        return (), {"tensors": len(compared), "equal": len(compared), "max_abs_diff": 0.0,
                    "proof": f"each carried tensor's {kind.label} blocks, dequantized by ggml's own formulas "
                             "(gguf-py), equal bit for bit the artifact's weights as llama.cpp's converter wrote "
                             "them in BF16"}
    pairs, output = _tensor_types(kind, opts)
    return quantize_gguf(tools, bf16, file, kind.file_type, tensor_types=pairs, output_type=output), None


def gguf_draft(draft: str | Path, out: str | Path, options: GgufOptions | None = None, *,
               progress: Progress = SILENT, **overrides) -> GgufResult:
    """Write DRAFT as a GGUF file of `type` into OUT with its manifest; see the module docstring.

    `options` (a `GgufOptions`; keywords override its fields): `target` (required: its tokenizer and config go into
    the file), `type`, `quantize_fc` / `quantize_lm_head` (default: kept BF16), `draft_vocab` with `calib` (prune
    first, as quantize --draft-vocab), `pre_tokenizer`, `llamacpp`, `force`."""
    started = time.perf_counter()
    opts = build_options(GgufOptions, options, overrides)
    kind = gguf_type(opts.type)
    command = public_command("gguf", (draft, out), opts)
    if not opts.target:
        from eagle3_quant.errors import OptionsError

        raise OptionsError("llama.cpp's converter takes the target's tokenizer and config: name it", field="target",
                           hint="pass --target")
    tools = find_tools(opts.llamacpp)
    source = _read_source(draft, kind)
    target = read_target(opts.target)
    floats = set(source.layout.parts)
    check_runs_in_llamacpp(source.config, source.layout, floats, target, source.path)
    taps = llamacpp_taps(source.config, target.num_layers)
    target_dir = _target_folder(target)
    with claimed_output(Path(out), opts.force, source.path) as claimed:
        with staged_output(claimed, source.path, opts.force) as staging:
            file = staging / f"draft-{kind.label}.gguf"
            with scratch_beside(staging, "gguf") as scratch, \
                    _staged(source, kind, scratch, taps, opts, claimed) as (staged, vocab):
                progress.say(f"{tools.describe()}: converting the draft (target layers {list(taps.ids)})")
                bf16 = scratch / "draft-BF16.gguf"
                convert(tools, staged.folder, bf16, target_dir=target_dir, pre_tokenizer=opts.pre_tokenizer,
                        where=source.path)
                progress.say(f"{kind.label}: {kind.summary}")
                fallbacks, carried = _make(tools, kind, staged, bf16, file, opts)
            written = describe_gguf(tools, file)
            kept = _kept(kind, opts, written)
            _check_written(written, taps, kept, file)
            record = GgufRecord(file.name, kind.name, kind.label, _made_by(kind, staged), {
                **tools.build.to_dict(), "package": tools.package}, public_name(target.name) or target.name,
                taps.to_dict(), {t.name: GgufTensorRecord(t.type, list(t.shape), staged.sources.get(t.name))
                                 for t in written.tensors}, kept, [f.describe() for f in fallbacks], carried,
                opts.pre_tokenizer)
            body = _manifest(source, kind, written, kept, staged, record, vocab, command)
            manifest = write_manifest(staging, body)
            if source.reference is not None:
                write_local_record(staging, source.reference, target_dir.resolve())
    return GgufResult(Path(out).expanduser().resolve(), Path(out).expanduser().resolve() / file.name, manifest, taps,
                      fallbacks, time.perf_counter() - started)


@contextmanager
def _staged(source: _Source, kind: GgufType, scratch: Path, taps: LlamaCppTaps, opts: GgufOptions,
            out: Path) -> Iterator[tuple[StagedDraft, dict | None]]:
    """The converter's input folder (and the vocabulary pruning's record), alive for the block."""
    if source.artifact is not None:
        yield stage_artifact(source.artifact, kind.name, scratch / "draft", taps.ids), None
    elif opts.draft_vocab is None:
        yield stage_draft(source.draft, scratch / "draft", taps.ids), None
    else:
        from eagle3_quant.quantize.vocab_prune import vocab_pruned

        with vocab_pruned(source.draft, opts.calib, opts.draft_vocab, out) as (folder, record):
            yield stage_draft(read_draft(folder), scratch / "draft", taps.ids), record.to_dict()


def _made_by(kind: GgufType, staged: StagedDraft) -> str:
    if kind.name == "bf16":
        return "llama.cpp's converter (convert_hf_to_gguf.py --outtype bf16)"
    if staged.blocks:
        return f"llama.cpp's converter, then the Quark artifact's {kind.label} blocks carried bit for bit"
    return f"llama.cpp's converter, then llama-quantize {kind.file_type}"


def _manifest(source: _Source, kind: GgufType, written: GgufFile, kept: dict[str, str], staged: StagedDraft,
              record: GgufRecord, vocab: dict | None, command: list[str]) -> Manifest:
    from eagle3_quant.quantize.finite_scan import scan_source

    inputs: list[FileDigest] = scan_source(source.draft) if source.draft is not None else []
    layers = [LayerRecord(role=_role(name), module=staged.sources.get(name, name), shape=list(t.shape),
                          quantized=t.type not in ("bf16", "f32", "f16"), reason=kept.get(name) or t.type)
              for name in written.types for t in [written.tensor(name)] if len(t.shape) == 2]
    return Manifest(
        source=SourceRecord(path=public_name(source.path) or str(source.path), format="gguf-source",
                            architecture=source.config.architecture),
        scheme=SchemeRecord(f"gguf_{kind.name}", kind.summary, "as llama.cpp's CPU kernels take them (ggml "
                                                                 "vec_dot types)"),
        exclude=ExcludeRecord(modules=[staged.sources.get(n, n) for n in kept], vllm_patterns=[],
                              reasons={staged.sources.get(n, n): why for n, why in kept.items()}),
        layers=layers, inputs=inputs, outputs=[], device="cpu", vocab_pruning=vocab, gguf=record,
        command=command)


def _role(gguf: str) -> str:
    return gguf.removeprefix("blk.0.").removesuffix(".weight")
