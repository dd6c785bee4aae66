"""The parallel-layout option group of every verb that starts vLLM (`bench`, `calibrate --backend vllm`): one set of
names, defaults and help, from `EngineLayout` (eagle3_quant/engine_layout.py), listed under one heading."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from eagle3_quant.cli.numbers import number_option
from eagle3_quant.engine_layout import EngineLayout as L
from eagle3_quant.errors import one_line
from eagle3_quant.options import COUNT, help_of
from eagle3_quant.reading.limits import MAX_DEPTH, nesting_depth, refuse_constant

PANEL = "Parallel layout (vLLM)"

TensorParallel = Annotated[int, number_option(COUNT, help=help_of(L, "tensor_parallel_size"), rich_help_panel=PANEL)]
PipelineParallel = Annotated[int, number_option(COUNT, help=help_of(L, "pipeline_parallel_size"),
                                                rich_help_panel=PANEL)]
DataParallel = Annotated[int, number_option(COUNT, help=help_of(L, "data_parallel_size"), rich_help_panel=PANEL)]
ExpertParallel = Annotated[bool, typer.Option("--enable-expert-parallel", help=help_of(L, "enable_expert_parallel"),
                                              rich_help_panel=PANEL)]
MaxModelLen = Annotated[int | None, number_option(COUNT, help=help_of(L, "max_model_len"), rich_help_panel=PANEL)]
EngineArgs = Annotated[str | None, typer.Option(help=help_of(L, "engine_args"), rich_help_panel=PANEL)]


def _no_repeats(pairs: list[tuple[str, object]]) -> dict:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"the key {repeated[0]!r} is given twice")
    return dict(pairs)


def engine_args_json(text: str | None) -> dict | None:
    """--engine-args: a JSON object read as every JSON file of the toolkit is (nesting capped, no NaN), its keys
    given once; else one error line naming the option."""
    if text is None:
        return None
    shown = one_line(repr(text if len(text) <= 80 else text[:77] + "..."))
    if nesting_depth(text) > MAX_DEPTH:
        raise typer.BadParameter(f"{shown} nests deeper than {MAX_DEPTH} levels: refused", param_hint="--engine-args")
    try:
        value = json.loads(text, object_pairs_hook=_no_repeats, parse_constant=refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise typer.BadParameter(f"{shown} is not JSON ({one_line(str(exc))})", param_hint="--engine-args") from None
    if not isinstance(value, dict):
        raise typer.BadParameter(f"{shown} is not a JSON object", param_hint="--engine-args")
    return value


def layout_values(tensor_parallel_size: int, pipeline_parallel_size: int, data_parallel_size: int,
                  enable_expert_parallel: bool, max_model_len: int | None, engine_args: str | None) -> dict:
    """The group's values as the options classes' keyword arguments."""
    return {"tensor_parallel_size": tensor_parallel_size, "pipeline_parallel_size": pipeline_parallel_size,
            "data_parallel_size": data_parallel_size, "enable_expert_parallel": enable_expert_parallel,
            "max_model_len": max_model_len, "engine_args": engine_args_json(engine_args)}
