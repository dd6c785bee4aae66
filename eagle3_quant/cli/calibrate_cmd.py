from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.calib.backends import Backend
from eagle3_quant.calib.dump_formats import DumpFormat
from eagle3_quant.calib.options import CalibrationOptions as C
from eagle3_quant.calib.options import ImportOptions
from eagle3_quant.calib.target import DTYPE_NAMES
from eagle3_quant.cli.app import verb
from eagle3_quant.cli.layout_options import (
    DataParallel,
    EngineArgs,
    ExpertParallel,
    MaxModelLen,
    PipelineParallel,
    TensorParallel,
    layout_values,
)
from eagle3_quant.cli.numbers import number_option, numbers
from eagle3_quant.options import AT_LEAST_0, COUNT, LAYER_ID, SEED, TIME, help_of
from eagle3_quant.options import default_of as default
from eagle3_quant.taps.conventions import TapConvention
from eagle3_quant.taps.engine_rules import Engine

Dtype = Enum("Dtype", {name: name for name in ("auto", *DTYPE_NAMES)}, type=str)


@verb("calibrate")
def calibrate_command(
    out: Annotated[Path, typer.Argument(help="Calibration set folder to write (appears only when complete).")],
    draft: Annotated[str, typer.Option(help="The Eagle3 draft (folder or Hub repo id): taps, sizes to check.")],
    target: Annotated[str | None, typer.Option(help="Target model folder or Hub repo id.")] = None,
    data: Annotated[str | None, typer.Option(
        help="Prompts: a Hub dataset id or a local json/jsonl/parquet/arrow file or folder.")] = None,
    from_dump: Annotated[Path | None, typer.Option(
        help="Import states captured elsewhere instead: a calibration-format folder, SpecForge data_*.ckpt files, "
             "vLLM extract_hidden_states files or speculators hs_{i}.safetensors (these need --target for its "
             "final norm and lm_head).")] = None,
    dump_format: Annotated[DumpFormat, typer.Option("--format", help=help_of(ImportOptions, "format"))]
    = default(ImportOptions, "format"),
    dump_layer_ids: Annotated[str | None, typer.Option(help=help_of(ImportOptions, "dump_layer_ids"))] = None,
    num_samples: Annotated[int, number_option(COUNT, help=help_of(C, "num_samples"))] = default(C, "num_samples"),
    seq_len: Annotated[int, number_option(COUNT, help=help_of(C, "seq_len"))] = default(C, "seq_len"),
    seed: Annotated[int, number_option(SEED, help=help_of(C, "seed"))] = default(C, "seed"),
    column: Annotated[str | None, typer.Option(help=help_of(C, "column"))] = default(C, "column"),
    split: Annotated[str, typer.Option(help=help_of(C, "split"))] = default(C, "split"),
    subset: Annotated[str | None, typer.Option(help=help_of(C, "subset"))] = default(C, "subset"),
    min_tokens: Annotated[int, number_option(AT_LEAST_0, help=help_of(C, "min_tokens"))] = default(C, "min_tokens"),
    generate_tokens: Annotated[int | None, number_option(AT_LEAST_0, help=help_of(C, "generate_tokens"))]
    = default(C, "generate_tokens"),
    engine: Annotated[Engine | None, typer.Option(
        help=help_of(C, "engine") + " Default vllm; with --from-dump: " + help_of(ImportOptions, "engine"))] = None,
    tap_convention: Annotated[TapConvention, typer.Option(help=help_of(C, "tap_convention"))]
    = default(C, "tap_convention"),
    aux_layer_ids: Annotated[str | None, typer.Option(help=help_of(C, "aux_layer_ids"))] = None,
    dtype: Annotated[Dtype, typer.Option(help=help_of(C, "dtype"))] = default(C, "dtype"),
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code", help=help_of(C, "trust_remote_code"))]
    = default(C, "trust_remote_code"),
    device: Annotated[str | None, typer.Option(help=help_of(C, "device"))] = default(C, "device"),
    batch_size: Annotated[int | None, number_option(COUNT, help=help_of(C, "batch_size"))] = default(C, "batch_size"),
    threads: Annotated[int | None, number_option(COUNT, help=help_of(C, "threads"))] = default(C, "threads"),
    force: Annotated[bool, typer.Option("--force", help=help_of(C, "force"))] = default(C, "force"),
    revision: Annotated[str | None, typer.Option(help=help_of(C, "revision"))] = default(C, "revision"),
    backend: Annotated[Backend, typer.Option(help=help_of(C, "backend"))] = default(C, "backend"),
    engine_python: Annotated[str | None, typer.Option(help=help_of(C, "engine_python"))] = None,
    tensor_parallel_size: TensorParallel = default(C, "tensor_parallel_size"),
    pipeline_parallel_size: PipelineParallel = default(C, "pipeline_parallel_size"),
    data_parallel_size: DataParallel = default(C, "data_parallel_size"),
    enable_expert_parallel: ExpertParallel = default(C, "enable_expert_parallel"),
    max_model_len: MaxModelLen = default(C, "max_model_len"),
    max_num_seqs: Annotated[int | None, number_option(COUNT, help=help_of(C, "max_num_seqs"))] = None,
    engine_args: EngineArgs = None,
    engine_timeout: Annotated[float, number_option(TIME, help=help_of(C, "engine_timeout"))]
    = default(C, "engine_timeout"),
    target_quantization: Annotated[str | None, typer.Option(help=help_of(C, "target_quantization"))] = None,
) -> None:
    """Capture what the draft receives from its target (three aux hidden states, next tokens) into a
    calibration set: resumable, checked against the draft. Or import states dumped elsewhere (--from-dump)."""
    from eagle3_quant.cli.progress import TerminalProgress
    from eagle3_quant.cli.render import console
    from eagle3_quant.util.formatting import human_bytes

    if (data is None) == (from_dump is None):
        raise typer.BadParameter("give either --data (capture with transformers) or --from-dump (import)")
    if data is not None and target is None:
        raise typer.BadParameter("--data needs --target")
    if from_dump is not None and backend is not Backend.transformers:
        raise typer.BadParameter("--backend runs the target on --data; --from-dump imports states already captured")
    ids = numbers(LAYER_ID, aux_layer_ids, "--aux-layer-ids")
    dump_ids = numbers(LAYER_ID, dump_layer_ids, "--dump-layer-ids")
    progress = TerminalProgress()
    if from_dump is not None:
        from eagle3_quant.calib.importer import import_calibration

        capture_only = {"num_samples": num_samples, "seq_len": seq_len, "seed": seed, "column": column,
                        "split": split, "subset": subset, "min_tokens": min_tokens,
                        "generate_tokens": generate_tokens, "dtype": dtype.value,
                        "trust_remote_code": trust_remote_code, "device": device, "batch_size": batch_size,
                        "threads": threads, "engine_python": engine_python,
                        "tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
                        "data_parallel_size": data_parallel_size, "enable_expert_parallel": enable_expert_parallel,
                        "max_model_len": max_model_len, "max_num_seqs": max_num_seqs, "engine_args": engine_args,
                        "engine_timeout": engine_timeout, "target_quantization": target_quantization}
        given = next((name for name, value in capture_only.items() if value != default(C, name)), None)
        if given is not None:
            raise typer.BadParameter(f"--{given.replace('_', '-')} applies when the target runs (--data); "
                                     "--from-dump imports states already captured: it would be ignored")

        options = ImportOptions(target=target, engine=engine.value if engine else None,
                                tap_convention=tap_convention.value, aux_layer_ids=ids, force=force, revision=revision,
                                format=dump_format.value, dump_layer_ids=dump_ids)
        result = import_calibration(from_dump, draft, out, options, progress=progress)
    else:
        from eagle3_quant.calib.api import calibrate_target

        options = C(num_samples=num_samples, seq_len=seq_len, seed=seed, column=column, split=split, subset=subset,
                    min_tokens=min_tokens, generate_tokens=generate_tokens, engine=(engine or Engine.vllm).value,
                    tap_convention=tap_convention.value,
                    aux_layer_ids=ids, dtype=dtype.value, trust_remote_code=trust_remote_code, force=force,
                    revision=revision, backend=backend.value, engine_python=engine_python,
                    **layout_values(tensor_parallel_size, pipeline_parallel_size, data_parallel_size,
                                    enable_expert_parallel, max_model_len, engine_args),
                    max_num_seqs=max_num_seqs, engine_timeout=engine_timeout,
                    device=device, batch_size=batch_size, threads=threads, target_quantization=target_quantization)
        try:
            result = calibrate_target(target, draft, data, out, options, progress=progress)
        except KeyboardInterrupt:
            typer.echo("interrupted: the whole shards captured so far are kept; re-run the same command to resume",
                       err=True)
            raise typer.Exit(130) from None
    rate = f", {result.tokens_per_second:,.0f} tokens/s" if result.captured_tokens else ""
    console.print(f"wrote {result.path}: {result.samples} samples, {result.tokens:,} tokens, "
                  f"{human_bytes(result.bytes)} ({result.dtype}), taps hidden_states{list(result.taps)}; "
                  f"{result.seconds:.1f} s{rate}"
                  + (f"; resumed after {result.resumed_samples} samples" if result.resumed_samples else ""))
    for line in result.tap_notes:
        console.print(f"note: {line}")
