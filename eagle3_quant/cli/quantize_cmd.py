from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.cli.app import verb
from eagle3_quant.cli.numbers import number_option
from eagle3_quant.devices import PROFILE_CHOICES
from eagle3_quant.options import COUNT, FRACTION, RATIO, help_of
from eagle3_quant.options import default_of as default
from eagle3_quant.quantize.options import AUTO_SCHEME, ENGINES
from eagle3_quant.quantize.options import QuantizeOptions as Q
from eagle3_quant.records.serve_taps import SERVE_TAPS
from eagle3_quant.schemes import SCHEMES, scheme_label

SchemeName = Enum("SchemeName", {name: name for name in (*SCHEMES, AUTO_SCHEME)}, type=str)
PlainScheme = Enum("PlainScheme", {name: name for name in SCHEMES}, type=str)    # one scheme, no `auto` ladder
EngineName = Enum("EngineName", {name: name for name in ENGINES}, type=str)
ServeTaps = Enum("ServeTaps", {name: name for name in SERVE_TAPS}, type=str)
ProfileName = Enum("ProfileName", {name: name for name in PROFILE_CHOICES}, type=str)


@verb("quantize")
def quantize_command(
    src: Annotated[str, typer.Argument(help="BF16/FP16 draft folder or Hub repo id.")],
    out: Annotated[Path, typer.Argument(help="Output folder (written atomically).")],
    scheme: Annotated[SchemeName, typer.Option(help=help_of(Q, "scheme"))] = default(Q, "scheme"),
    exclude: Annotated[list[str] | None, typer.Option(help=help_of(Q, "exclude"))] = None,
    quantize_fc: Annotated[bool, typer.Option("--quantize-fc", help=help_of(Q, "quantize_fc"))]
    = default(Q, "quantize_fc"),
    device: Annotated[str | None, typer.Option(help=help_of(Q, "device"))] = default(Q, "device"),
    calib: Annotated[Path | None, typer.Option(help=help_of(Q, "calib"))] = default(Q, "calib"),
    auto_exclude: Annotated[float | None, number_option(FRACTION, help=help_of(Q, "auto_exclude"))]
    = default(Q, "auto_exclude"),
    smooth_alpha: Annotated[float | None, number_option(FRACTION, help=help_of(Q, "smooth_alpha"))]
    = default(Q, "smooth_alpha"),
    gptq: Annotated[bool, typer.Option("--gptq", help=help_of(Q, "gptq"))] = default(Q, "gptq"),
    rtn: Annotated[bool, typer.Option("--rtn", help=help_of(Q, "rtn"))] = default(Q, "rtn"),
    force: Annotated[bool, typer.Option("--force", help=help_of(Q, "force"))] = default(Q, "force"),
    revision: Annotated[str | None, typer.Option(help=help_of(Q, "revision"))] = default(Q, "revision"),
    verbose: Annotated[bool, typer.Option("--verbose", help=help_of(Q, "verbose"))] = default(Q, "verbose"),
    draft_vocab: Annotated[int | None, number_option(COUNT, "--draft-vocab", help=help_of(Q, "draft_vocab"))]
    = default(Q, "draft_vocab"),
    quantize_lm_head: Annotated[bool, typer.Option("--quantize-lm-head", help=help_of(Q, "quantize_lm_head"))]
    = default(Q, "quantize_lm_head"),
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help=help_of(Q, "allow_pickle"))]
    = default(Q, "allow_pickle"),
    min_acceptance_ratio: Annotated[float, number_option(RATIO, help=help_of(Q, "min_acceptance_ratio"))]
    = default(Q, "min_acceptance_ratio"),
    engine: Annotated[EngineName, typer.Option(help=help_of(Q, "engine"))] = default(Q, "engine"),
    serve_taps: Annotated[ServeTaps, typer.Option(help=help_of(Q, "serve_taps"))] = default(Q, "serve_taps"),
    device_profile: Annotated[ProfileName | None, typer.Option(help=help_of(Q, "device_profile"))] = None,
    measure_all: Annotated[bool, typer.Option("--measure-all", help=help_of(Q, "measure_all"))]
    = default(Q, "measure_all"),
) -> None:
    """Quantize a draft with AMD Quark (FP8 PTPC, or --scheme); write a config.json vLLM loads unedited, a manifest."""
    from eagle3_quant.cli.progress import TerminalProgress
    from eagle3_quant.cli.render import console, print_loader_check
    from eagle3_quant.quantize.api import quantize_draft
    from eagle3_quant.util.formatting import human_bytes

    options = Q(scheme=scheme.value, exclude=tuple(exclude or ()), quantize_fc=quantize_fc, device=device,
                calib=calib, auto_exclude=auto_exclude, smooth_alpha=smooth_alpha, gptq=gptq, rtn=rtn, force=force,
                revision=revision, verbose=verbose,
                allow_pickle=allow_pickle, draft_vocab=draft_vocab, quantize_lm_head=quantize_lm_head,
                min_acceptance_ratio=min_acceptance_ratio, engine=engine.value, serve_taps=serve_taps.value,
                device_profile=device_profile.value if device_profile else None, measure_all=measure_all)
    result = quantize_draft(src, out, options, progress=TerminalProgress())
    if result.manifest.auto_choice is not None:
        from eagle3_quant.cli.render_auto import print_auto_choice

        print_auto_choice(result.manifest.auto_choice)
    print_loader_check(result.loader_check, scheme_label(result.plan.scheme.name))
    if result.manifest.serve_taps is not None:
        from eagle3_quant.cli.render_taps import print_serve_taps

        print_serve_taps(result.manifest.serve_taps)
    outputs = result.manifest.outputs
    console.print(f"wrote {result.output} in {result.seconds:.1f} s: {len(outputs)} files, "
                  f"{human_bytes(sum(o.size for o in outputs))}; "
                  f"{len(result.plan.quantized)} linears {scheme_label(result.plan.scheme.name)} "
                  f"({result.plan.scheme.name}), "
                  f"{len(result.plan.excluded)} kept BF16; manifest {result.manifest_path.name}")
    console.print(f"for {result.plan.engines.describe()}", markup=False)
    for warning in result.warnings:
        console.print(f"warning: {warning}", markup=False)
    rounded = result.manifest.gptq
    if rounded:
        console.print(f"GPTQ: {sum(len(g) for g in rounded['order'])} linears rounded on {rounded['samples']} "
                      f"samples ({rounded['positions']} positions x {rounded['steps']} draft steps) in "
                      f"{rounded['seconds']:.1f} s")
    pruning = result.manifest.vocab_pruning
    if pruning:
        console.print(f"draft vocabulary {pruning['draft_vocab_before']} -> {pruning['draft_vocab']}: covers "
                      f"{pruning['coverage']:.2%} of the calibration set's {pruning['target_tokens']} target tokens "
                      f"(before: {pruning['coverage_before']:.2%})")
        ranked = pruning.get("ranked_tokens")
        if ranked is not None and ranked < pruning["draft_vocab"]:
            console.print(f"note: the calibration set ranks only {ranked:,} of the draft's tokens: the other "
                          f"{pruning['draft_vocab'] - ranked:,} kept were taken by target id, not by frequency "
                          f"(a larger set ranks more; --draft-vocab {ranked} keeps only ranked ones)")
