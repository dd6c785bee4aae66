from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.bench.options import BenchOptions as B
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
from eagle3_quant.options import COUNT, SEED, STEPS, TIME, help_of
from eagle3_quant.options import default_of as default
from eagle3_quant.records.bench_run import BENCH_NAME


def _levels(text: str | None) -> tuple[int, ...]:
    return tuple(numbers(COUNT, text or None, "--concurrency") or ())


@verb("bench")
def bench_command(
    out: Annotated[Path, typer.Argument(help="Quantized draft folder (made by `eagle3-quant quantize`).")],
    target: Annotated[str, typer.Option(help=help_of(B, "target"))],
    reference: Annotated[Path | None, typer.Option(help=help_of(B, "reference"))] = default(B, "reference"),
    prompts: Annotated[str | None, typer.Option(help=help_of(B, "prompts"))] = default(B, "prompts"),
    num_prompts: Annotated[int, number_option(COUNT, help=help_of(B, "num_prompts"))] = default(B, "num_prompts"),
    max_tokens: Annotated[int, number_option(COUNT, help=help_of(B, "max_tokens"))] = default(B, "max_tokens"),
    prompt_len: Annotated[int, number_option(COUNT, help=help_of(B, "prompt_len"))] = default(B, "prompt_len"),
    k: Annotated[int, number_option(STEPS, "--k", help=help_of(B, "k"))] = default(B, "k"),
    engine_python: Annotated[str | None, typer.Option(help=help_of(B, "engine_python"))] = default(B, "engine_python"),
    target_quantization: Annotated[str | None, typer.Option(help=help_of(B, "target_quantization"))] = None,
    dtype: Annotated[str, typer.Option(help=help_of(B, "dtype"))] = default(B, "dtype"),
    max_num_seqs: Annotated[int, number_option(COUNT, help=help_of(B, "max_num_seqs"))] = default(B, "max_num_seqs"),
    timeout: Annotated[float, number_option(TIME, help=help_of(B, "timeout_s"))] = default(B, "timeout_s"),
    predict: Annotated[bool, typer.Option("--predict/--no-predict", help=help_of(B, "predict"))]
    = default(B, "predict"),
    device: Annotated[str | None, typer.Option(help=help_of(B, "device"))] = default(B, "device"),
    concurrency: Annotated[str | None, typer.Option(help=help_of(B, "concurrency"))] = None,
    input_len: Annotated[int, number_option(COUNT, help=help_of(B, "input_len"))] = default(B, "input_len"),
    output_len: Annotated[int, number_option(COUNT, help=help_of(B, "output_len"))] = default(B, "output_len"),
    seed: Annotated[int, number_option(SEED, help=help_of(B, "seed"))] = default(B, "seed"),
    tensor_parallel_size: TensorParallel = default(B, "tensor_parallel_size"),
    pipeline_parallel_size: PipelineParallel = default(B, "pipeline_parallel_size"),
    data_parallel_size: DataParallel = default(B, "data_parallel_size"),
    enable_expert_parallel: ExpertParallel = default(B, "enable_expert_parallel"),
    max_model_len: MaxModelLen = default(B, "max_model_len"),
    engine_args: EngineArgs = None,
    as_json: Annotated[bool, typer.Option("--json", help=f"Print {BENCH_NAME} on stdout instead of tables.")] = False,
) -> None:
    """Run the target in vLLM's real engine with no draft, the BF16 draft and OUT: vLLM's own acceptance, the
    ratio, losslessness, the offline prediction beside them; OUT/bench.json."""
    from eagle3_quant.bench.api import bench_draft

    options = B(target=target, reference=reference, prompts=prompts, num_prompts=num_prompts, max_tokens=max_tokens,
                prompt_len=prompt_len, k=k, engine_python=engine_python, dtype=dtype, max_num_seqs=max_num_seqs,
                timeout_s=timeout, predict=predict, device=device, concurrency=_levels(concurrency),
                input_len=input_len, output_len=output_len, seed=seed, target_quantization=target_quantization,
                **layout_values(tensor_parallel_size, pipeline_parallel_size, data_parallel_size,
                                enable_expert_parallel, max_model_len, engine_args))
    progress = None
    if not as_json:
        from eagle3_quant.cli.progress import TerminalProgress

        progress = TerminalProgress()
    result = bench_draft(out, options, **({"progress": progress} if progress else {}))
    if as_json:
        typer.echo(json.dumps(result.report, indent=2, allow_nan=False))
        return
    from eagle3_quant.cli.render_bench import print_bench

    print_bench(result)
