"""`GgufOptions`: everything `gguf_draft` takes besides DRAFT and OUT, with defaults and help (API, CLI, pipeline)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle3_quant.engines.llamacpp.types import DEFAULT_GGUF_TYPE, GGUF_TYPES, gguf_type
from eagle3_quant.errors import OptionsError
from eagle3_quant.options import COUNT, option

PRE_TOKENIZER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


@dataclass(frozen=True)
class GgufOptions:
    target: str | None = option(None, "The target model (folder or Hub id): llama.cpp's converter takes its "
                                      "tokenizer and config; the draft must fit its vocabulary and hidden size.",
                                pipeline=False)
    type: str = option(DEFAULT_GGUF_TYPE, f"GGUF type: {', '.join(GGUF_TYPES)} (mxfp4 and nvfp4 from a Quark "
                                          "artifact of that scheme are carried bit for bit).")
    quantize_fc: bool = option(False, "Quantize fc too (default: BF16, as the FP8 default keeps it).")
    quantize_lm_head: bool = option(False, "Quantize lm_head too (llama.cpp runs a quantized draft lm_head; "
                                           "default: BF16).")
    draft_vocab: int | None = option(None, "Prune the draft vocabulary to the N target tokens the target emits most "
                                           "often in --calib first (lm_head sliced, d2t written), as quantize does.")
    calib: Path | None = option(None, "Calibration set, for --draft-vocab.", pipeline=False)
    pre_tokenizer: str | None = option(None, "The pre-tokenizer llama.cpp should record when its converter does not "
                                             "know the target's BPE tokenizer (e.g. gpt-2, llama-bpe).")
    llamacpp: str | None = option(None, "llama.cpp's tools (default: $EAGLE3_QUANT_LLAMACPP, else the project's "
                                        ".venv-llamacpp from make setup-llamacpp).", pipeline=False)
    force: bool = option(False, "Replace OUT if it exists.", pipeline=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", gguf_type(self.type).name)
        COUNT.check(self.draft_vocab, "draft_vocab")
        if self.draft_vocab is not None and self.calib is None:
            raise OptionsError("--draft-vocab ranks the target's tokens in a calibration set", field="draft_vocab",
                               hint="pass --calib")
        if self.calib is not None and self.draft_vocab is None:
            raise OptionsError("--calib is read only for --draft-vocab", field="calib",
                               hint="pass --draft-vocab N, or leave --calib out")
        if self.pre_tokenizer is not None and (not self.pre_tokenizer or
                                               not set(self.pre_tokenizer) <= PRE_TOKENIZER_CHARS):
            raise OptionsError(f"{self.pre_tokenizer!r} is not a pre-tokenizer name (lower-case letters, digits, "
                               "- _ .)", field="pre_tokenizer")
        kind = gguf_type(self.type)
        if kind.name == "bf16" and (self.quantize_fc or self.quantize_lm_head):
            raise OptionsError("--type bf16 quantizes nothing", field="quantize_fc" if self.quantize_fc
                               else "quantize_lm_head")
