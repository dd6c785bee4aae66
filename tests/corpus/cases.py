"""The bad-input corpus: every case builds a broken or hostile source and names the error it must raise.

Each case is run through the API and the CLI by tests/test_bad_input_corpus.py, which asserts the typed
exception, one clear line naming the file / tensor / field, exit code 2, no traceback, nothing left beside
OUT and the source unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from corpus.broken import (
    absolute_outside,
    already_quantized,
    config,
    config_only,
    config_values,
    d2t_entry,
    drop_file,
    duplicate_tensor_name,
    family_draft,
    header_edit,
    header_length_beyond_file,
    header_text,
    index_names_wrong_shard,
    index_points_to,
    little_disk,
    missing_shard,
    no_aux_layer_ids,
    offsets_out_of_range,
    out_exists,
    out_is_file,
    overlapping,
    pickled_code,
    poked,
    shard_link_outside,
    sharded,
    side_file_link_outside,
    speculators_two_layers,
    stray_shard,
    tensor_in_two_shards,
    trailing_bytes,
    truncated,
    weights,
    write_file,
)
from corpus.broken_values import config_nested, config_text, d2t_duplicate_target, header_nested
from corpus.builders import INDEX, Q_PROJ, SHARD, SINGLE, bf16, edit_index, llama_target, moe_model, pickle_draft, tiny
from eagle3_quant.errors import (
    CheckpointFileError,
    DraftFormatError,
    NotAnEagle3DraftError,
    OutputExistsError,
    ResourceError,
    SchemeError,
    SourceNotFoundError,
    UnsupportedSourceError,
)
from eagle3_quant.reading.formats import DraftFormat
from eagle3_quant.util import resources


def calibrated(build: Callable[[Path], Path]) -> Callable[[Path], Path]:
    """The source `build` makes, with a calibration set for it at ROOT/cal."""
    def with_calibration(root: Path) -> Path:
        from calib_fixtures import write_calibration, write_target

        src = build(root)
        write_calibration(root / "cal", write_target(root / "target"), samples=4, seq_len=20)
        return src
    return with_calibration


def _out(root: Path, src: Path) -> Path:
    return root / "out"


@dataclass(frozen=True)
class BadCase:
    id: str
    build: Callable[[Path], Path]                 # root -> source folder (or path) to quantize
    error: type[Exception]
    says: tuple[str, ...]                         # the one-line message must contain each
    out: Callable[[Path, Path], Path] = _out      # (root, src) -> OUT
    force: bool = False
    allow_pickle: bool = False
    exclude: tuple[str, ...] = ()
    probes: dict[str, Callable] = field(default_factory=dict)   # eagle3_quant.util.resources function -> stand-in
    engine: str | None = None                     # --engine named by the user (None: the default, auto)
    data_driven: tuple[str, ...] = ()             # quantize flags of a data-driven rounding, --calib ROOT/cal given

    def api_kwargs(self, src: Path) -> dict:
        rounding = {}
        if self.data_driven:
            flags = dict(zip(self.data_driven[::2], self.data_driven[1::2], strict=True))
            rounding = {"scheme": flags["--scheme"], "calib": src.parent / "cal",
                        **({"smooth_alpha": float(flags["--smooth-alpha"])} if "--smooth-alpha" in flags else {})}
        return {"force": self.force, "allow_pickle": self.allow_pickle, "exclude": list(self.exclude) or None,
                **({"engine": self.engine} if self.engine else {}), **rounding}

    def cli_args(self, src: Path, out: Path) -> list[str]:
        args = ["quantize", str(src), str(out), "--device", "cpu"]
        args += [*self.data_driven, "--calib", str(src.parent / "cal")] if self.data_driven else []
        args += ["--force"] * self.force + ["--allow-pickle"] * self.allow_pickle
        args += ["--engine", self.engine] if self.engine else []
        for name in self.exclude:
            args += ["--exclude", name]
        return args


# --- the corpus ------------------------------------------------------------------------------------

CASES: tuple[BadCase, ...] = (
    # safetensors files
    BadCase("truncated-safetensors", truncated, CheckpointFileError, (SINGLE, "go beyond the data section")),
    BadCase("file-shorter-than-header-length", lambda r: write_file(tiny(r), SINGLE, "\x10\0\0"), CheckpointFileError,
            (SINGLE, "shorter than the 8-byte header length")),
    BadCase("header-length-beyond-file", header_length_beyond_file, CheckpointFileError,
            (SINGLE, "header length 1000000 goes beyond the file")),
    BadCase("header-invalid-json", header_text(b'{"fc.weight": {"dtype": "BF16",'), CheckpointFileError,
            (SINGLE, "header is not valid JSON")),
    BadCase("header-not-an-object", header_text(b"[1, 2, 3]"), CheckpointFileError,
            (SINGLE, "header is not a JSON object")),
    BadCase("header-names-a-tensor-twice", duplicate_tensor_name, CheckpointFileError,
            (SINGLE, "named twice in the header")),
    BadCase("tensor-offsets-overlap", overlapping, CheckpointFileError, (SINGLE, "bytes overlap those of")),
    BadCase("tensor-offsets-out-of-range", offsets_out_of_range, CheckpointFileError,
            (SINGLE, "tensor 'norm.weight'", "go beyond the data section")),
    BadCase("shape-disagrees-with-byte-size", header_edit(lambda h: h["norm.weight"].update(shape=[65])),
            CheckpointFileError,
            (SINGLE, "tensor 'norm.weight'", "BF16 [65] needs 130 bytes but data_offsets span 128")),
    BadCase("dtype-disagrees-with-byte-size", header_edit(lambda h: h["norm.weight"].update(dtype="F32")),
            CheckpointFileError, (SINGLE, "tensor 'norm.weight'", "F32 [64] needs 256 bytes")),
    BadCase("unknown-dtype", header_edit(lambda h: h["norm.weight"].update(dtype="F7")), CheckpointFileError,
            (SINGLE, "tensor 'norm.weight'", "unknown dtype 'F7'")),
    BadCase("trailing-bytes-after-data", trailing_bytes, CheckpointFileError,
            (SINGLE, "trailing bytes", "the data section holds")),
    BadCase("header-metadata-value-not-a-string", header_edit(lambda h: h["__metadata__"].update(format=1)),
            CheckpointFileError, (SINGLE, "field '__metadata__.format'", "is not a string")),
    BadCase("header-shape-not-integers", header_edit(lambda h: h["norm.weight"].update(shape=[64, True])),
            CheckpointFileError, (SINGLE, "tensor 'norm.weight'", "is not a list of non-negative integers")),
    BadCase("header-nested-too-deep", header_nested(100_000), CheckpointFileError,
            (SINGLE, "nested too deeply")),
    # shard index and links
    BadCase("index-points-to-parent-folder", index_points_to(lambda r: "../model.safetensors"), CheckpointFileError,
            (INDEX, "'../model.safetensors' points outside the checkpoint folder")),
    BadCase("index-absolute-path", index_points_to(absolute_outside), CheckpointFileError,
            (INDEX, "points outside the checkpoint folder")),
    BadCase("shard-symlink-escapes", shard_link_outside, CheckpointFileError,
            (SHARD.format(2), "is a link leading outside the checkpoint folder")),
    BadCase("side-file-symlink-escapes", side_file_link_outside, CheckpointFileError,
            ("'tokenizer.json' is a link leading outside the checkpoint folder",)),
    BadCase("index-names-missing-shard", missing_shard, CheckpointFileError,
            (INDEX, f"shard '{SHARD.format(3)}' is missing")),
    BadCase("tensor-in-two-shards", tensor_in_two_shards, CheckpointFileError,
            ("tensor 'norm.weight'", "also stored in")),
    BadCase("index-invalid-json", sharded(lambda s: (s / INDEX).write_text('{"weight_map": {')),
            CheckpointFileError, (INDEX, "shard index is not valid JSON")),
    BadCase("index-names-wrong-shard", index_names_wrong_shard, CheckpointFileError,
            (INDEX, "tensor 'norm.weight'", "which does not hold it")),
    BadCase("tensor-missing-from-index", sharded(lambda s: edit_index(s, lambda wm: wm.pop("norm.weight"))),
            CheckpointFileError, (INDEX, "field 'weight_map'", "tensors missing from the index: norm.weight")),
    BadCase("shard-not-named-by-index", stray_shard, CheckpointFileError,
            (INDEX, "'consolidated.safetensors' is not named in the shard index")),
    # config.json
    BadCase("config-missing", lambda r: drop_file(tiny(r), "config.json"), DraftFormatError,
            ("config.json is missing",)),
    BadCase("config-invalid-json", lambda r: write_file(tiny(r), "config.json", '{"hidden_size": 64,'),
            DraftFormatError, ("config.json", "not valid JSON")),
    BadCase("config-not-an-object", lambda r: write_file(tiny(r), "config.json", "[64]"), DraftFormatError,
            ("config.json", "not a JSON object")),
    BadCase("config-hidden-size-is-a-string", config_values(hidden_size="64"), DraftFormatError,
            ("config.json", "field 'hidden_size'", "'64' is not an integer in 1..131072")),
    BadCase("config-architectures-not-a-list", config_values(architectures="LlamaForCausalLMEagle3"),
            DraftFormatError, ("config.json", "field 'architectures'", "is not a list of class names")),
    BadCase("config-norm-before-residual-not-bool", config_values(norm_before_residual="yes"), DraftFormatError,
            ("field 'norm_before_residual'", "is not true or false")),
    BadCase("config-rms-norm-eps-negative", config_values(rms_norm_eps=-1e-5), DraftFormatError,
            ("field 'rms_norm_eps'", "is not a positive number")),
    BadCase("config-absurd-hidden-size", config_values(hidden_size=10**12), DraftFormatError,
            ("field 'hidden_size'", "1000000000000 is not an integer in 1..131072")),
    BadCase("config-absurd-vocab", config_values(vocab_size=2**40), DraftFormatError,
            ("field 'vocab_size'", "is not an integer in 1..4194304")),
    BadCase("config-zero-heads", config_values(num_attention_heads=0), DraftFormatError,
            ("field 'num_attention_heads'", "0 is not an integer in 1..1024")),
    BadCase("config-heads-not-multiple-of-kv-heads", config_values(num_key_value_heads=3), DraftFormatError,
            ("field 'num_key_value_heads'", "4 attention heads are not a multiple of 3 KV heads")),
    BadCase("config-draft-vocab-exceeds-target-vocab", config_values(draft_vocab_size=1024), DraftFormatError,
            ("field 'draft_vocab_size'", "draft vocab 1024 exceeds the target vocab 512")),
    BadCase("config-rms-norm-eps-infinity", config_text('"rms_norm_eps": 1e-05', '"rms_norm_eps": Infinity'),
            DraftFormatError, ("config.json", "field 'rms_norm_eps'", "Infinity is not a JSON number")),
    BadCase("config-nan-nested-value", config_text('"rms_norm_eps": 1e-05', '"rope_scaling": {"factor": NaN}'),
            DraftFormatError, ("config.json", "field 'rope_scaling.factor'", "NaN is not a JSON number")),
    BadCase("config-nested-too-deep", config_nested(100_000), DraftFormatError,
            ("config.json", "nested deeper than 64 levels")),
    BadCase("config-aux-ids-disagree-with-fc", config(lambda c: c["eagle_config"].update(
        eagle_aux_hidden_state_layer_ids=[1, 2])), DraftFormatError,
            ("tensor 'fc.weight'", "disagrees with config.json, which implies [64, 128]")),
    BadCase("config-speculators-without-layer-config",
            config(lambda c: c.pop("transformer_layer_config"), DraftFormat.SPECULATORS), DraftFormatError,
            ("field 'transformer_layer_config'", "needs an object")),
    # not an Eagle3 draft
    BadCase("plain-llama-target", llama_target, NotAnEagle3DraftError, ("a plain decoder model (a target",)),
    BadCase("mixture-of-experts-model", moe_model, NotAnEagle3DraftError, ("a Mixture-of-Experts model",)),
    BadCase("two-decoder-layers", speculators_two_layers, NotAnEagle3DraftError,
            ("has 2 decoder layers; an Eagle3 draft has exactly one",)),
    # what no engine builds (the default --engine auto refuses only these), or what an engine the user names
    # (--engine both) cannot serve (engines/draft_support.py, engines/choice.py)
    BadCase("mla-indexer-config-key", family_draft("tiny-mla", lambda c: c.update(index_n_heads=8)),
            UnsupportedSourceError, ("config.json", "field 'index_n_heads'", "sparse-attention indexer")),
    BadCase("mla-indexer-tensor", family_draft("tiny-mla", midlayer__self_attn__indexer__wk__weight=bf16(16, 128)),
            UnsupportedSourceError, ("tensor 'midlayer.self_attn.indexer.wk.weight'", "sparse-attention indexer")),
    BadCase("architecture-no-engine-registers",
            family_draft("tiny", lambda c: c.update(architectures=["MistralForCausalLMEagle"])),
            UnsupportedSourceError, ("field 'architectures'", "becomes Eagle3MistralForCausalLMEagle",
                                     "no engine serves it", "SGLang 0.5.23 refuses architectures")),
    BadCase("mla-without-q-lora-rank", family_draft("tiny-mla-no-qlora"), UnsupportedSourceError,
            ("field 'q_lora_rank'", "vLLM 0.33 cannot serve", "fused_qkv_a_proj", "no engine serves it",
             "kimi_k25_eagle3.py")),
    BadCase("aux-count-without-layer-ids", family_draft("tiny-2aux", no_aux_layer_ids), UnsupportedSourceError,
            ("field 'num_aux_hidden_states'", "2 aux states without eagle_aux_hidden_state_layer_ids",
             "3 default layers", "no engine serves it")),
    BadCase("mla-deepseek-v3-model-type", family_draft("tiny-mla", lambda c: c.update(model_type="deepseek_v3")),
            UnsupportedSourceError, ("field 'model_type'", "vLLM 0.33 cannot serve", "MTP draft",
                                     "--engine sglang serves it"), engine="both"),
    BadCase("qwen3-class-sglang-lacks", family_draft("tiny-qwen3"), UnsupportedSourceError,
            ("field 'architectures'", "SGLang 0.5.23 cannot serve", "Eagle3Qwen3ForCausalLM",
             "--engine vllm serves it"), engine="both"),
    BadCase("final-layer-tap-sglang-cannot-feed", family_draft("tiny-final-aux"), UnsupportedSourceError,
            ("field 'num_aux_hidden_states'", "4 aux states for 3 aux layer ids", "never the final layer",
             "--engine vllm serves it"), engine="both"),
    BadCase("speculators-config-sglang-cannot-read", family_draft("tiny", fmt=DraftFormat.SPECULATORS),
            UnsupportedSourceError, ("field 'model_type'", "speculators config", "--engine vllm serves it"),
            engine="both"),
    # shapes and dtypes against the config
    BadCase("q-proj-not-2h-wide", weights(midlayer__self_attn__q_proj__weight=bf16(64, 64)), DraftFormatError,
            (f"tensor '{Q_PROJ}'", "shape [64, 64] disagrees with config.json, which implies [64, 128]")),
    BadCase("fc-not-3x-target-hidden", weights(fc__weight=bf16(64, 128)), DraftFormatError,
            ("tensor 'fc.weight'", "shape [64, 128] disagrees with config.json, which implies [64, 192]")),
    BadCase("lm-head-not-draft-vocab", weights(lm_head__weight=bf16(300, 64)), DraftFormatError,
            ("tensor 'lm_head.weight'", "which implies [256, 64]")),
    BadCase("required-tensor-missing", weights(norm__weight=None), DraftFormatError,
            ("tensor 'norm.weight'", "missing; expected shape [64]")),
    BadCase("integer-linear-weight", weights(midlayer__mlp__up_proj__weight=torch.zeros(160, 64, dtype=torch.int32)),
            DraftFormatError, ("tensor 'midlayer.mlp.up_proj.weight'", "dtype I32, expected one of")),
    # tensor data
    BadCase("nan-in-a-weight", poked(Q_PROJ, (3, 5), float("nan")), DraftFormatError,
            (SINGLE, f"tensor '{Q_PROJ}'", "holds 1 NaN/Inf value(s) (first at [3, 5])")),
    BadCase("inf-in-a-weight", poked("fc.weight", (0, 0), float("inf")), DraftFormatError,
            (SINGLE, "tensor 'fc.weight'", "NaN/Inf")),
    # the finite check comes before any data-driven rounding measures anything (Quark's LossError otherwise)
    BadCase("nan-before-awq", calibrated(poked("midlayer.mlp.down_proj.weight", (2, 9), float("nan"))),
            DraftFormatError, (SINGLE, "tensor 'midlayer.mlp.down_proj.weight'", "NaN/Inf"),
            data_driven=("--scheme", "w4a16_int4")),
    BadCase("inf-before-smoothing", calibrated(poked(Q_PROJ, (0, 1), float("-inf"))), DraftFormatError,
            (SINGLE, f"tensor '{Q_PROJ}'", "NaN/Inf"), data_driven=("--scheme", "w8a8_int8", "--smooth-alpha", "0.5")),
    BadCase("d2t-beyond-target-vocab", d2t_entry(255, lambda vocab: vocab + 7), DraftFormatError,
            (SINGLE, "tensor 'd2t'", "draft id 255 maps to target id 519, expected one in [0, 512)")),
    BadCase("d2t-negative-target-id", d2t_entry(0, lambda vocab: -1), DraftFormatError,
            (SINGLE, "tensor 'd2t'", "draft id 0 maps to target id -1")),
    BadCase("d2t-two-draft-ids-one-target", d2t_duplicate_target, DraftFormatError,
            (SINGLE, "tensor 'd2t'", "draft ids 0 and 1 both map to target id")),
    BadCase("d2t-wrong-dtype", weights(d2t=torch.zeros(256, dtype=torch.int32)), DraftFormatError,
            ("tensor 'd2t'", "dtype I32, expected one of ['I64']")),
    # refused sources
    BadCase("already-quantized-fp8-tensors", already_quantized, UnsupportedSourceError,
            (f"tensor '{Q_PROJ}'", "already quantized (F8_E4M3 weights)", "give the BF16/FP16 source draft")),
    BadCase("already-quantized-config", config_values(quantization_config={"quant_method": "fp8"}),
            UnsupportedSourceError, ("field 'quantization_config'", "already quantized")),
    BadCase("only-pickle-weights", pickle_draft, UnsupportedSourceError,
            ("only pickle weights (pytorch_model.bin)", "--allow-pickle")),
    BadCase("pickle-that-runs-code-with-allow-pickle", pickled_code, UnsupportedSourceError,
            ("pytorch_model.bin", "GLOBAL posix.system", "refused by torch.load(weights_only=True)"),
            allow_pickle=True),
    BadCase("pickle-not-a-state-dict-with-allow-pickle", lambda r: pickle_draft(r, lambda t: list(t.values())),
            UnsupportedSourceError, ("pytorch_model.bin", "holds a list, expected a dict"), allow_pickle=True),
    BadCase("no-weights", config_only, DraftFormatError, ("no *.safetensors weights found",)),
    BadCase("source-missing", lambda r: r / "nope", SourceNotFoundError, ("nope", "no such folder")),
    BadCase("source-is-a-file", lambda r: write_file(r, "draft.safetensors", "x") / "draft.safetensors",
            SourceNotFoundError, ("draft.safetensors", "is a file; give the draft's folder")),
    # OUT
    BadCase("out-is-src", tiny, OutputExistsError, ("OUT is the source folder",), out=lambda r, s: s, force=True),
    BadCase("out-inside-src", tiny, OutputExistsError, ("OUT lies inside the source folder",),
            out=lambda r, s: s / "fp8", force=True),
    BadCase("out-contains-src", tiny, OutputExistsError, ("OUT contains the source folder",),
            out=lambda r, s: r, force=True),
    BadCase("out-exists-without-force", tiny, OutputExistsError, ("out: already exists", "--force"), out=out_exists),
    BadCase("out-is-a-file", tiny, OutputExistsError, ("exists and is not a folder",), out=out_is_file, force=True),
    # requests
    BadCase("exclude-unknown-name", tiny, SchemeError, ("field 'exclude'", "'attn' names no linear"),
            exclude=("attn",)),
    BadCase("exclude-splits-fused-qkv", tiny, SchemeError, ("field 'exclude'", "vLLM fuses q_proj, k_proj, v_proj"),
            exclude=("q_proj",)),
    # resources (probes replaced)
    BadCase("disk-too-small", tiny, ResourceError, ("of free disk, 0.001 MB available", "the output (0."),
            probes={"free_disk_bytes": little_disk}),
    BadCase("memory-too-small", tiny, ResourceError, ("needs about 0.60 GB of memory, 0.001 MB available",
                                                "quantizing shard model.safetensors"),
            probes={"available_memory_bytes": lambda: 1000}),
)


assert len({c.id for c in CASES}) == len(CASES)
assert all(hasattr(resources, name) for c in CASES for name in c.probes)
