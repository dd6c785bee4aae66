from __future__ import annotations

from enum import Enum, StrEnum
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import app
from eagle3_quant.schemes import DEFAULT_SCHEME, SCHEMES

SchemeName = Enum("SchemeName", {name: name for name in SCHEMES}, type=str)


class Device(StrEnum):
    cpu = "cpu"
    cuda = "cuda"


@app.command("quantize")
def quantize_command(
    src: Annotated[str, typer.Argument(help="BF16/FP16 draft folder or Hub repo id.")],
    out: Annotated[Path, typer.Argument(help="Output folder (written atomically).")],
    scheme: Annotated[SchemeName, typer.Option(help="Quantization scheme.")] = DEFAULT_SCHEME,
    exclude: Annotated[list[str] | None, typer.Option(
        help="Keep this linear BF16 too (role like o_proj, fused name qkv_proj, or module name). Repeatable.")] = None,
    quantize_fc: Annotated[bool, typer.Option("--quantize-fc", help="Quantize fc too (SGLang cannot load it).")]
    = False,
    device: Annotated[Device | None, typer.Option(help="Device for Quark (default: cuda if available).")] = None,
    calib: Annotated[Path | None, typer.Option(help="Calibration set (static schemes, --auto-exclude).")] = None,
    auto_exclude: Annotated[float | None, typer.Option(
        help="Keep BF16 every layer group whose FP8 quantization alone changes the draft's top-1 token on more "
             "than this fraction of calibration positions (needs --calib; see `sensitivity`).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace OUT if it exists.")] = False,
    revision: Annotated[str | None, typer.Option(help="Hub revision of SRC.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", help="Show Quark's own log.")] = False,
    draft_vocab: Annotated[int | None, typer.Option(
        "--draft-vocab", help="Prune the draft vocabulary to the N target tokens the target emits most often in "
        "the calibration set (needs --calib): lm_head sliced, d2t/t2d written.")] = None,
    quantize_lm_head: Annotated[bool, typer.Option(
        "--quantize-lm-head", help="Refused: no engine loads a quantized Eagle3 lm_head (the error says why).")]
    = False,
    allow_pickle: Annotated[bool, typer.Option(
        "--allow-pickle", help="Accept a draft with only pickle (.bin/.pt) weights: loaded with "
        "torch.load(weights_only=True), converted to safetensors; the source is only read.")] = False,
) -> None:
    """Quantize a draft to FP8 with AMD Quark; write config.json that vLLM loads unedited, and a manifest."""
    from eagle3_quant.cli.render import console, human_bytes, print_loader_check
    from eagle3_quant.quantize.api import quantize_draft

    if quantize_fc:
        console.print("[yellow]warning:[/] --quantize-fc: SGLang's Eagle3 loader keeps fc as a plain Linear and "
                      "cannot load a quantized fc; vLLM can.")
    result = quantize_draft(src, out, scheme.value, exclude, device.value if device else None,
                            quantize_fc=quantize_fc, force=force, revision=revision, calib=calib,
                            auto_exclude=auto_exclude, verbose=verbose, allow_pickle=allow_pickle,
                            draft_vocab=draft_vocab, quantize_lm_head=quantize_lm_head)
    print_loader_check(result.loader_check)
    outputs = result.manifest.outputs
    console.print(f"wrote {result.output} in {result.seconds:.1f} s: {len(outputs)} files, "
                  f"{human_bytes(sum(o['size'] for o in outputs))}; "
                  f"{len(result.plan.quantized)} linears FP8 ({result.plan.scheme.name}), "
                  f"{len(result.plan.excluded)} kept BF16; manifest {result.manifest_path.name}")
    pruning = result.manifest.data.get("vocab_pruning")
    if pruning:
        console.print(f"draft vocabulary {pruning['draft_vocab_before']} -> {pruning['draft_vocab']}: covers "
                      f"{pruning['coverage']:.2%} of the calibration set's {pruning['target_tokens']} target tokens "
                      f"(before: {pruning['coverage_before']:.2%})")
