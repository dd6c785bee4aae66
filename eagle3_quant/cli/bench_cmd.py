from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eagle3_quant.bench.llamacpp_options import THREADS
from eagle3_quant.bench.llamacpp_options import LlamaCppBenchOptions as L
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
from eagle3_quant.errors import OptionsError
from eagle3_quant.options import COUNT, SEED, STEPS, TIME, help_of
from eagle3_quant.options import default_of as default
from eagle3_quant.records.bench_run import BENCH_NAME

ENGINES = ("auto", "vllm", "llamacpp")
SHARED = ("target", "reference", "prompts", "num_prompts", "max_tokens", "prompt_len", "k", "timeout_s", "seed",
          "predict")


def _levels(text: str | None, option: str = "--concurrency") -> tuple[int, ...]:
    return tuple(numbers(COUNT, text or None, option) or ())


def _engine(engine: str, out: Path) -> str:
    if engine not in ENGINES:
        raise OptionsError(f"{engine!r} is not one of {', '.join(ENGINES)}", field="engine")
    if engine != "auto":
        return engine
    from eagle3_quant.records.gguf_artifact import is_gguf_artifact

    return "llamacpp" if is_gguf_artifact(out.expanduser()) else "vllm"


def _refuse_foreign(given: dict, other: type, engine: str) -> None:
    """An option of the other engine, given: the run would ignore it."""
    for name, value in given.items():
        field = other.__dataclass_fields__[name]
        if value != field.default and value not in (None, ()):
            flag = "--" + name.replace("_", "-")
            raise OptionsError(f"{flag} is not an option of {engine} runs: it would be ignored", field=name,
                               hint="leave it out, or pass --engine for the engine it belongs to")


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
    engine: Annotated[str, typer.Option(help="Serving engine: vllm, llamacpp (llama-server; OUT made by `gguf`), "
                                             "or auto: llamacpp for a GGUF draft, else vllm.")] = "auto",
    threads: Annotated[int | None, number_option(THREADS, help=help_of(L, "threads"))] = None,
    slots: Annotated[str | None, typer.Option(help=help_of(L, "slots"))] = None,
    repeats: Annotated[int, number_option(COUNT, help=help_of(L, "repeats"))] = default(L, "repeats"),
    long_context: Annotated[int | None, number_option(COUNT, help=help_of(L, "long_context"))] = None,
    llamacpp: Annotated[str | None, typer.Option(help=help_of(L, "llamacpp"))] = None,
    as_json: Annotated[bool, typer.Option("--json", help=f"Print {BENCH_NAME} on stdout instead of tables.")] = False,
) -> None:
    """Serve the target with no draft, the BF16 draft and OUT - in vLLM's engine, or llama.cpp's server for a GGUF
    draft: the engine's own acceptance, the ratio, losslessness (and the offline prediction, or llama.cpp's
    measured speedups); OUT/bench.json."""
    chosen = _engine(engine, out)
    llama = {"threads": threads, "slots": _levels(slots, "--slots") or (1,), "repeats": repeats,
             "long_context": long_context, "llamacpp": llamacpp}
    vllm_only = {"engine_python": engine_python, "target_quantization": target_quantization, "dtype": dtype,
                 "max_num_seqs": max_num_seqs, "device": device,
                 "concurrency": _levels(concurrency), "input_len": input_len, "output_len": output_len,
                 "tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
                 "data_parallel_size": data_parallel_size, "enable_expert_parallel": enable_expert_parallel,
                 "max_model_len": max_model_len, "engine_args": engine_args}
    shared = {"target": target, "reference": reference, "prompts": prompts, "num_prompts": num_prompts,
              "max_tokens": max_tokens, "prompt_len": prompt_len, "k": k, "timeout_s": timeout, "seed": seed,
              "predict": predict}
    if chosen == "llamacpp":
        _refuse_foreign(vllm_only, B, "llama.cpp")
        _bench_llamacpp(out, L(**shared, **llama), as_json)
        return
    _refuse_foreign({**llama, "slots": tuple(llama["slots"]) if slots else ()}, L, "vLLM")
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


def _bench_llamacpp(out: Path, options: L, as_json: bool) -> None:
    from eagle3_quant.bench.llamacpp_api import bench_gguf

    progress = None
    if not as_json:
        from eagle3_quant.cli.progress import TerminalProgress

        progress = TerminalProgress()
    result = bench_gguf(out, options, **({"progress": progress} if progress else {}))
    if as_json:
        typer.echo(json.dumps(result.report, indent=2, allow_nan=False))
        return
    from eagle3_quant.cli.render_llamacpp import print_llamacpp_bench

    print_llamacpp_bench(result)
