"""`bench --engine llamacpp`'s inputs, each checked before any server starts: OUT's GGUF (its manifest, its files
unchanged), the target as a GGUF (given, or converted from its folder), the BF16 reference as a GGUF (given, or
converted with OUT's target layers), and the prompts. Refused in one line: a GGUF that is no Eagle-3 draft, a target
of another model (another vocabulary, hidden size or depth), a target whose graph keeps no layer inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.calib.target import TargetSpec, read_target
from eagle3_quant.engines.llamacpp.convert import convert
from eagle3_quant.engines.llamacpp.gguf_files import GgufFile, describe_gguf, is_gguf
from eagle3_quant.engines.llamacpp.names import UNTAPPED_ARCHITECTURES
from eagle3_quant.engines.llamacpp.tools import LlamaCppTools
from eagle3_quant.errors import DraftFormatError, OptionsError, TargetMismatchError
from eagle3_quant.records.gguf_artifact import GgufArtifact, is_gguf_artifact, open_gguf_artifact
from eagle3_quant.records.public_names import public_name, recorded_source_path, recorded_target_path
from eagle3_quant.util.outdir import scratch_for


def check_draft_gguf(draft: GgufFile) -> None:
    if draft.architecture != "eagle3":
        raise DraftFormatError(f"architecture {draft.architecture!r}: not an Eagle-3 draft (llama.cpp's eagle3)",
                               path=draft.path, field="general.architecture")
    layers = draft.arch_field("target_layers")
    if not isinstance(layers, list) or len(layers) != 3:
        raise DraftFormatError(f"eagle3.target_layers is {layers!r}: llama.cpp feeds exactly 3 target layers",
                               path=draft.path, field="eagle3.target_layers")


def check_pair(target: GgufFile, draft: GgufFile) -> None:
    """The draft fits the target as llama.cpp runs them."""
    arch = target.architecture
    if arch == "eagle3":
        raise TargetMismatchError("the target is an Eagle-3 draft, not a model", path=target.path)
    if arch in UNTAPPED_ARCHITECTURES:
        raise TargetMismatchError(f"llama.cpp's {arch} graph keeps no layer inputs, so it cannot feed an Eagle-3 "
                                  "draft (llama-graph.cpp: 'layer input tensor is null')", path=target.path,
                                  field="general.architecture")
    hidden, wanted = target.arch_field("embedding_length"), draft.arch_field("target_hidden_size")
    if hidden != wanted:
        raise TargetMismatchError(f"the target's hidden size is {hidden}, the draft reads states of {wanted}",
                                  path=target.path, field=f"{arch}.embedding_length",
                                  hint="is this the draft's target?")
    depth = target.arch_field("block_count")
    layers = draft.arch_field("target_layers") or []
    if isinstance(depth, int) and max(layers) >= depth:
        raise TargetMismatchError(f"the draft taps layers {layers}; the target has {depth}", path=target.path,
                                  field=f"{arch}.block_count")
    if target.vocabulary != draft.vocabulary:
        raise TargetMismatchError("the target's vocabulary (tokenizer.ggml.tokens) is not the one the draft was "
                                  "converted with: a target of another model", path=target.path,
                                  field="tokenizer.ggml.tokens", hint="is this the draft's target?")


def tokenizer_target(given: str | None, artifact: GgufArtifact) -> str | None:
    """Where the target's tokenizer is (for dataset prompts and conversions): --target when it is a model, else the
    folder OUT was converted with."""
    if given and not Path(given).expanduser().is_file():
        return given
    recorded = recorded_target_path(artifact.path)
    return str(recorded) if recorded is not None and recorded.is_dir() else None


def target_spec(tokenizer: str | None, target: GgufFile) -> TargetSpec:
    if tokenizer is not None:
        return read_target(tokenizer)
    tokens = (target.vocabulary or {}).get("length") or 0
    return TargetSpec(str(target.path), int(target.arch_field("block_count") or 0),
                      int(target.arch_field("embedding_length") or 0), int(tokens), "bfloat16",
                      str(target.architecture))


@contextmanager
def target_gguf(tools: LlamaCppTools, given: str | None, artifact: GgufArtifact) -> Iterator[GgufFile]:
    """The target as a GGUF: the file given, or its folder converted to BF16 for this run."""
    if not given:
        raise OptionsError("bench runs the target in llama-server: name it", field="target",
                           hint="pass --target with a GGUF file or the target's folder")
    path = Path(given).expanduser()
    if path.is_file():
        if not is_gguf(path):
            raise DraftFormatError("not a GGUF file (its first bytes are not 'GGUF')", path=path, field="target")
        yield describe_gguf(tools, path)
        return
    spec = read_target(given)
    with scratch_for(artifact.path, "bench-target") as scratch:
        folder = Path(spec.name) if Path(spec.name).is_dir() else _hub_folder(spec.name)
        file = scratch / "target-BF16.gguf"
        convert(tools, folder, file, pre_tokenizer=artifact.record.pre_tokenizer, where=folder)
        yield describe_gguf(tools, file)


def _hub_folder(repo: str) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo, allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.jinja"]))


@dataclass(frozen=True)
class Reference:
    """The BF16 draft as llama.cpp runs it, its public name, and its checkpoint folder when known (the offline
    prediction reads it)."""

    gguf: GgufFile
    name: str
    folder: Path | None


@contextmanager
def reference_gguf(tools: LlamaCppTools, given: Path | None, artifact: GgufArtifact,
                   tokenizer: str | None) -> Iterator[Reference]:
    """The BF16 draft as a GGUF fed OUT's target layers."""
    if given is not None and given.is_file():
        yield Reference(_same_layers(describe_gguf(tools, given), artifact), public_name(given) or str(given), None)
        return
    if given is not None and is_gguf_artifact(given):
        found = open_gguf_artifact(given)
        if found.record.type != "bf16":
            raise OptionsError(f"the reference is a {found.record.label} GGUF; the reference is the BF16 draft",
                               field="reference", hint="make it with `eagle3-quant gguf DRAFT REF --type bf16`")
        yield Reference(_same_layers(describe_gguf(tools, found.file), artifact), public_name(given) or str(given),
                        recorded_source_path(given))
        return
    source = given if given is not None else recorded_source_path(artifact.path)
    if source is None or not source.is_dir():
        raise DraftFormatError("no BF16 reference draft: the draft OUT was made from is gone", path=artifact.path,
                               field="reference", hint="pass --reference with the BF16 draft or its BF16 GGUF")
    if tokenizer is None:
        raise OptionsError("converting the BF16 reference needs the target's tokenizer and config", field="target",
                           hint="pass --target with the target's folder, or --reference with a BF16 GGUF")
    from eagle3_quant.quantize.gguf_api import gguf_draft

    with scratch_for(artifact.path, "bench-reference") as scratch:
        made = gguf_draft(source, scratch / "reference", target=tokenizer, type="bf16",
                          pre_tokenizer=artifact.record.pre_tokenizer, llamacpp=str(tools.root), force=True)
        yield Reference(_same_layers(describe_gguf(tools, made.file), artifact), public_name(source) or str(source),
                        source)


def _same_layers(reference: GgufFile, artifact: GgufArtifact) -> GgufFile:
    check_draft_gguf(reference)
    wanted = list(artifact.record.taps.get("target_layers") or [])
    found = reference.arch_field("target_layers")
    if found != wanted:
        raise DraftFormatError(f"the reference taps target layers {found}, OUT {wanted}: their acceptance would "
                               "differ by more than quantization", path=reference.path, field="eagle3.target_layers")
    return reference
