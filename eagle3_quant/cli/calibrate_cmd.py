from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.calib.engine_taps import Engine
from eagle3_quant.calib.taps import TapConvention
from eagle3_quant.calib.target import DTYPE_NAMES
from eagle3_quant.cli.app import app

Dtype = Enum("Dtype", {name: name for name in ("auto", *DTYPE_NAMES)}, type=str)


def _layer_ids(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of integers") from exc


@app.command("calibrate")
def calibrate_command(
    out: Annotated[Path, typer.Argument(help="Calibration set folder to write (appears only when complete).")],
    draft: Annotated[str, typer.Option(help="The Eagle3 draft (folder or Hub repo id): taps, sizes to check.")],
    target: Annotated[str | None, typer.Option(help="Target model folder or Hub repo id.")] = None,
    data: Annotated[str | None, typer.Option(
        help="Prompts: a Hub dataset id or a local json/jsonl/parquet/arrow file or folder.")] = None,
    from_dump: Annotated[Path | None, typer.Option(
        help="Import states captured elsewhere instead: a calibration-format folder or SpecForge data_*.ckpt "
             "files (these need --target for its lm_head).")] = None,
    num_samples: Annotated[int, typer.Option(help="Prompts to capture.")] = 128,
    seq_len: Annotated[int, typer.Option(help="Tokens per sample at most (prompt + generated).")] = 2048,
    seed: Annotated[int, typer.Option(help="Seed of the prompt order.")] = 0,
    column: Annotated[str | None, typer.Option(
        help="Dataset column (default: messages, conversations or text, whichever exists).")] = None,
    split: Annotated[str, typer.Option(help="Dataset split.")] = "train",
    subset: Annotated[str | None, typer.Option(help="Dataset configuration name.")] = None,
    min_tokens: Annotated[int, typer.Option(help="Skip prompts shorter than this.")] = 16,
    generate_tokens: Annotated[int | None, typer.Option(
        help="Append the target's own greedy continuation of at most this many tokens to each prompt "
             "(default 64, at most a quarter of --seq-len; 0 keeps the prompts as they are).")] = None,
    engine: Annotated[Engine | None, typer.Option(
        help="The serving engine whose layer taps are captured (they differ for SpecForge drafts); default vllm "
             "(with --from-dump: the engine the dump records, else any engine whose taps it holds).")] = None,
    tap_convention: Annotated[TapConvention, typer.Option(
        help="How the draft config counts its aux layer ids: input (EAGLE/vLLM/speculators) or output "
             "(SpecForge/ModelOpt); auto decides from the config.")] = TapConvention.auto,
    aux_layer_ids: Annotated[str | None, typer.Option(
        help="Override the draft's three aux layer ids, e.g. 2,16,29 (input convention unless "
             "--tap-convention output).")] = None,
    dtype: Annotated[Dtype, typer.Option(help="Run the target and store the states in this dtype.")] = Dtype.auto,
    trust_remote_code: Annotated[bool, typer.Option(
        "--trust-remote-code", help="Allow the target's own modelling code from its repository.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace OUT, or an interrupted run made with other options.")] = False,
    revision: Annotated[str | None, typer.Option(help="Hub revision of the draft.")] = None,
) -> None:
    """Capture what the draft receives from its target (three aux hidden states, next tokens) into a
    calibration set: resumable, checked against the draft. Or import states dumped elsewhere (--from-dump)."""
    from eagle3_quant.cli.render import console, human_bytes

    if (data is None) == (from_dump is None):
        raise typer.BadParameter("give either --data (capture with transformers) or --from-dump (import)")
    if data is not None and target is None:
        raise typer.BadParameter("--data needs --target")
    ids = _layer_ids(aux_layer_ids)
    if from_dump is not None:
        from eagle3_quant.calib.importer import import_calibration

        result = import_calibration(from_dump, draft, out, target=target, tap_convention=tap_convention.value,
                                    aux_layer_ids=ids, force=force, verbose=True, revision=revision,
                                    engine=engine.value if engine else None)
    else:
        from eagle3_quant.calib.api import calibrate_target

        try:
            result = calibrate_target(target, draft, data, out, force=force, verbose=True, revision=revision,
                                      num_samples=num_samples, seq_len=seq_len, seed=seed, column=column,
                                      split=split, subset=subset, min_tokens=min_tokens,
                                      generate_tokens=generate_tokens, tap_convention=tap_convention.value,
                                      engine=(engine or Engine.vllm).value,
                                      aux_layer_ids=ids, dtype=dtype.value, trust_remote_code=trust_remote_code)
        except KeyboardInterrupt:
            typer.echo("interrupted: the whole shards captured so far are kept; re-run the same command to resume",
                       err=True)
            raise typer.Exit(130) from None
    rate = f", {result.tokens_per_second:,.0f} tokens/s" if result.captured_tokens else ""
    console.print(f"wrote {result.path}: {result.samples} samples, {result.tokens:,} tokens, "
                  f"{human_bytes(result.bytes)} ({result.dtype}), taps hidden_states{list(result.taps)}; "
                  f"{result.seconds:.1f} s{rate}"
                  + (f"; resumed after {result.resumed_samples} samples" if result.resumed_samples else ""))
    if result.tap_note:
        console.print(f"note: {result.tap_note}")
