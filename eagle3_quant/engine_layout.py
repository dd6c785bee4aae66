"""The parallel layout of every verb that starts vLLM (`calibrate --backend vllm`, `bench`, the pipeline's stages):
one set of option names, defaults and checks, and the record of what ran.

`EngineLayout` is both: the options class `BenchOptions` and `CalibrationOptions` extend (so the CLI, the API and
the pipeline file take the same names), and, as `layout()` of either, the record bench.json and the calibration
set keep. Its fields are ``vllm.LLM``'s own keyword arguments; anything else vLLM takes (a multi-node executor:
``{"distributed_executor_backend": "ray"}``, memory settings) goes through ``engine_args``, which may not repeat
a layout field or an argument the verb sets itself. What a layout asks of the target and the draft is judged by
vLLM's own code before any weight loads (``engines/layout_check.py``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from eagle3_quant.errors import OptionsError, one_line
from eagle3_quant.options import COUNT, option

SPLIT_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel")
FIELDS = (*SPLIT_FIELDS, "max_model_len", "engine_args")
ENGINE_ARGS_EXAMPLE = '{"distributed_executor_backend": "ray", "gpu_memory_utilization": 0.85}'


@dataclass(frozen=True)
class EngineLayout:
    tensor_parallel_size: int = option(1, "vLLM's tensor-parallel size: the processes (GPUs) each layer of the "
                                          "target and the draft is split over.")
    pipeline_parallel_size: int = option(1, "vLLM's pipeline-parallel size: stages the target's layers are cut "
                                            "into.")
    data_parallel_size: int = option(1, "vLLM's data-parallel size: copies of the target (with expert "
                                        "parallelism, the ranks its experts spread over).")
    enable_expert_parallel: bool = option(False, "vLLM's expert parallelism: a MoE target's experts spread over "
                                                 "the tensor and data parallel ranks.")
    max_model_len: int | None = option(None, "vLLM's context length (default: the longest prompt with its new "
                                             "tokens).")
    engine_args: dict | None = option(None, "More vllm.LLM keyword arguments (JSON), e.g. " + ENGINE_ARGS_EXAMPLE
                                            + "; not the layout's own or the verb's.")

    def __post_init__(self) -> None:
        for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len"):
            COUNT.check(getattr(self, name), name)       # the CLI's own bound: a pipeline file gets no other
        if not isinstance(self.enable_expert_parallel, bool):
            raise OptionsError(f"must be true or false, got {self.enable_expert_parallel!r}",
                               field="enable_expert_parallel")
        _check_engine_args(self.engine_args)

    def layout(self) -> EngineLayout:
        """The layout alone (an options class that extends this one returns its layout fields)."""
        return EngineLayout(**{name: getattr(self, name) for name in FIELDS})

    @property
    def split(self) -> bool:
        """More than one vLLM process computes the model (or its experts are spread)."""
        return (self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size > 1
                or self.enable_expert_parallel)

    def llm_kwargs(self) -> dict:
        """``vllm.LLM`` keyword arguments: the split (a default left out), then ``engine_args``; not max_model_len,
        which the verb sets from its own prompts."""
        split = {name: getattr(self, name) for name in SPLIT_FIELDS
                 if getattr(self, name) != EngineLayout.__dataclass_fields__[name].default}
        return {**split, **(self.engine_args or {})}

    def describe(self) -> str:
        parts = [f"{words} {getattr(self, name)}" for name, words in (
            ("tensor_parallel_size", "tensor parallel"), ("pipeline_parallel_size", "pipeline parallel"),
            ("data_parallel_size", "data parallel")) if getattr(self, name) > 1]
        parts += ["expert parallel"] if self.enable_expert_parallel else []
        parts += [f"{key}={json.dumps(value, allow_nan=False)}" for key, value in (self.engine_args or {}).items()]
        return ", ".join(parts) or "one process"

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in FIELDS}

    @classmethod
    def from_dict(cls, data: dict) -> EngineLayout:
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise OptionsError(f"unknown layout field(s) {', '.join(unknown)}", field=unknown[0])
        return cls(**data)


ARG_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")      # a vllm.LLM keyword: a lower-case Python name
MAX_ARG_DEPTH = 64                               # the nesting every JSON reader of the toolkit allows


def _depth(value) -> int:
    """How deeply lists and objects nest in `value` (without recursion: any depth is measured)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        todo += [(child, level + 1) for child in children]
    return deepest


def _check_engine_args(args) -> None:
    if args is None:
        return
    if not isinstance(args, dict) or not all(isinstance(key, str) for key in args):
        raise OptionsError("must be a JSON object of vllm.LLM argument names to values", field="engine_args")
    bad = [key for key in args if not ARG_NAME.match(key)]
    for key in sorted(bad, key=lambda key: key.replace("-", "_") not in FIELDS):     # a layout option named first
        spelled = key.replace("-", "_")
        if spelled in FIELDS:
            raise OptionsError(f"{one_line(repr(key))} is the layout option --{key.replace('_', '-')}, not a "
                               "vllm.LLM argument", field="engine_args", hint=f"pass --{spelled.replace('_', '-')}")
        raise OptionsError(f"{one_line(repr(key))} is not a vllm.LLM argument name (lower-case letters, digits and _"
                           + (f"; did you mean {spelled.lower()!r}?" if ARG_NAME.match(spelled.lower()) else "") + ")",
                           field="engine_args")
    if _depth(args) > MAX_ARG_DEPTH:
        raise OptionsError(f"nested deeper than {MAX_ARG_DEPTH} levels: refused", field="engine_args")
    repeated = sorted(set(args) & set(FIELDS))
    if repeated:
        flag = "--" + repeated[0].replace("_", "-")
        raise OptionsError(f"{repeated[0]!r} is a layout option of its own", field=f"engine_args.{repeated[0]}",
                           hint=f"pass {flag} instead")
    try:
        json.dumps(args, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise OptionsError(f"must hold finite JSON values only ({exc})", field="engine_args") from None


def check_reserved(layout: EngineLayout, reserved: tuple[str, ...], verb: str) -> None:
    """`engine_args` may not set what `verb` sets itself (the model, the draft, dtype, ...)."""
    taken = sorted(set(layout.engine_args or {}) & set(reserved))
    if taken:
        raise OptionsError(f"{taken[0]!r} is set by {verb} itself (its own option, or what it measures)",
                           field=f"engine_args.{taken[0]}")

