from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb
from eagle3_quant.cli.numbers import number_option
from eagle3_quant.engines.llamacpp.types import GGUF_TYPES
from eagle3_quant.options import COUNT, help_of
from eagle3_quant.options import default_of as default
from eagle3_quant.quantize.gguf_options import GgufOptions as G

GgufTypeName = Enum("GgufTypeName", {name: name for name in GGUF_TYPES}, type=str)


@verb("gguf")
def gguf_command(
    draft: Annotated[str, typer.Argument(help="BF16 draft folder or Hub id, or a Quark MXFP4/NVFP4 artifact (its "
                                              "blocks carried).")],
    out: Annotated[Path, typer.Argument(help="Output folder (written atomically): draft-TYPE.gguf and a manifest.")],
    target: Annotated[str, typer.Option(help=help_of(G, "target"))],
    type: Annotated[GgufTypeName, typer.Option("--type", help=help_of(G, "type"))] = default(G, "type"),
    quantize_fc: Annotated[bool, typer.Option("--quantize-fc", help=help_of(G, "quantize_fc"))]
    = default(G, "quantize_fc"),
    quantize_lm_head: Annotated[bool, typer.Option("--quantize-lm-head", help=help_of(G, "quantize_lm_head"))]
    = default(G, "quantize_lm_head"),
    draft_vocab: Annotated[int | None, number_option(COUNT, "--draft-vocab", help=help_of(G, "draft_vocab"))] = None,
    calib: Annotated[Path | None, typer.Option(help=help_of(G, "calib"))] = None,
    pre_tokenizer: Annotated[str | None, typer.Option(help=help_of(G, "pre_tokenizer"))] = None,
    llamacpp: Annotated[str | None, typer.Option(help=help_of(G, "llamacpp"))] = None,
    force: Annotated[bool, typer.Option("--force", help=help_of(G, "force"))] = default(G, "force"),
) -> None:
    """Write a draft as a GGUF file llama.cpp serves (llama-server -md ... --spec-type draft-eagle3): llama.cpp's
    converter and llama-quantize, fed the layers the draft was trained on; a manifest."""
    from eagle3_quant.cli.progress import TerminalProgress
    from eagle3_quant.cli.render_llamacpp import print_gguf
    from eagle3_quant.quantize.gguf_api import gguf_draft

    options = G(target=target, type=type.value, quantize_fc=quantize_fc, quantize_lm_head=quantize_lm_head,
                draft_vocab=draft_vocab, calib=calib, pre_tokenizer=pre_tokenizer, llamacpp=llamacpp, force=force)
    print_gguf(gguf_draft(draft, out, options, progress=TerminalProgress()))
