"""Whether vLLM takes a parallel layout for this target and draft, asked of vLLM's own code before any weight loads:
``PYTHON layout_child.py REQUEST.json RESULT.json``, in the engine's environment (standard library, torch, vLLM).

REQUEST: {"runs": [{"name", "child": "serve_child" | "export_child", "request": that child's own request}],
"draft_split": tensor parallel size the drafts are built at (1: not built)}. Each run's ``vllm.LLM`` arguments are
the ones that child would pass (its ``llm_kwargs``).
RESULT: {"vllm", "runs": {name: {"parallel": {...}, "draft": class name | null}}} or, when vLLM refuses,
{"vllm", "refused": {"run", "stage": "config" | "draft", "message": vLLM's words, "where": "vllm/FILE.py:LINE"}}.

For each run, two of vLLM's own steps:
- ``vllm.LLM(...)`` up to the point where it builds its ``EngineArgs`` (its own checks first: data parallelism
  outside an external launcher, ...), then ``EngineArgs.create_engine_config()``: every check vLLM makes of the
  layout against the target's and the draft's configs (heads divisible by the tensor-parallel size, pipeline
  parallelism only for models that implement ``SupportsPP``, expert parallelism only for MoE models, ...);
- with ``draft_split`` > 1, the draft model itself built by vLLM's loader (``create_model``: every layer, no weight)
  on the meta device, with vLLM's tensor-parallel group reporting that size, so that the draft's own splits run
  (its vocabulary across ``ParallelLMHead``: "16384 is not divisible by 3").
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback

# child_protocol.py is in engines/, one folder up; appended after site-packages so that engines/vllm/ never
# shadows vLLM itself
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from child_protocol import ERROR_CHARS, serve  # noqa: E402

CHILDREN = ("serve_child", "export_child")


class _Reached(Exception):
    """Raised once ``vllm.LLM`` has built its EngineArgs: carries them."""


def engine_config(llm_kwargs: dict):
    """vLLM's config for these ``vllm.LLM`` arguments: ``LLM.__init__``'s own checks up to the engine arguments it
    builds, then ``create_engine_config``. ``LLM`` is stopped where it builds them and, should a version build them
    elsewhere, where it hands them to ``LLMEngine.from_engine_args``: no engine is ever made here."""
    import vllm.entrypoints.llm as llm_module
    from vllm.engine.arg_utils import EngineArgs

    class Captured(EngineArgs):
        def __post_init__(self):
            super().__post_init__()
            raise _Reached(self)

    def handed_over(*args, **kwargs):
        raise _Reached(kwargs.get("engine_args", args[0] if args else None))

    engine_class = getattr(llm_module, "LLMEngine", None)
    patches = [(llm_module, "EngineArgs", Captured)]
    if engine_class is not None:
        patches.append((engine_class, "from_engine_args", handed_over))
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches if name in owner.__dict__]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        llm_module.LLM(**llm_kwargs)
    except _Reached as reached:
        args = reached.args[0]
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
    return args.create_engine_config()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def build_draft(vllm_config, split: int) -> str:
    """The draft built by vLLM's loader on the meta device, its tensor-parallel group reporting `split` ranks."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment, parallel_state
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.utils.torch_utils import set_default_torch_dtype

    draft = vllm_config.speculative_config.draft_model_config
    with set_current_vllm_config(vllm_config):
        if not torch.distributed.is_initialized():
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
            ensure_model_parallel_initialized(1, 1)
    group = parallel_state.get_tp_group()
    ranks = group.world_size
    group.world_size = split
    try:
        with set_current_vllm_config(vllm_config), set_default_torch_dtype(draft.dtype), torch.device("meta"):
            model = get_model_loader(vllm_config.load_config).create_model(vllm_config=vllm_config,
                                                                           model_config=draft)
    finally:
        group.world_size = ranks
    return type(model).__name__


def _message(exc: BaseException) -> str:
    """vLLM's own words: a pydantic validation error's message without pydantic's wrapping."""
    text = str(exc)
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            text = errors()[0]["msg"].removeprefix("Value error, ")
        except (IndexError, KeyError, TypeError):
            pass
    return " ".join(text.split())[:ERROR_CHARS]


def _where(exc: BaseException) -> str | None:
    """The last frame of the traceback inside vLLM: ``vllm/FILE.py:LINE``."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        marker = f"{os.sep}vllm{os.sep}"
        if marker in frame.filename:
            found = f"vllm/{frame.filename.rsplit(marker, 1)[1]}:{frame.lineno}"
    return found


def _parallel(vllm_config) -> dict:
    parallel = vllm_config.parallel_config
    return {"tensor_parallel_size": parallel.tensor_parallel_size,
            "pipeline_parallel_size": parallel.pipeline_parallel_size,
            "data_parallel_size": parallel.data_parallel_size,
            "enable_expert_parallel": bool(parallel.enable_expert_parallel), "world_size": parallel.world_size,
            "distributed_executor_backend": str(parallel.distributed_executor_backend)}


def _refusal(entry: dict, stage: str, exc: BaseException) -> dict:
    return {"run": entry["name"], "stage": stage, "type": type(exc).__name__, "message": _message(exc),
            "where": _where(exc)}


def run(request: dict) -> dict:
    """A draft that fails to build at the split size is refused only if it builds in one process: a failure at both
    sizes is this check's own limit (noted, nothing refused), not the layout's."""
    import importlib

    import vllm

    result: dict = {"vllm": vllm.__version__, "runs": {}}
    split = request.get("draft_split", 1)
    for entry in request["runs"]:
        if entry["child"] not in CHILDREN:
            raise ValueError(f"unknown child {entry['child']!r}")
        kwargs = importlib.import_module(entry["child"]).llm_kwargs(entry["request"])
        started, note = time.perf_counter(), None
        try:
            config = engine_config(kwargs)
        except Exception as exc:  # noqa: BLE001 - vLLM's refusal, whatever its type, goes back in its own words
            traceback.print_exc()
            return {**result, "refused": _refusal(entry, "config", exc)}
        draft = None
        if split > 1 and config.speculative_config is not None \
                and config.speculative_config.method != "extract_hidden_states":
            try:
                draft = build_draft(config, split)
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                try:          # a fresh config: the failed build left its layers registered in the first one
                    build_draft(engine_config(kwargs), 1)
                except Exception as single:  # noqa: BLE001
                    note = f"the draft could not be built to check its split ({_message(single)})"
                else:
                    return {**result, "refused": _refusal(entry, "draft", exc)}
        result["runs"][entry["name"]] = {"parallel": _parallel(config), "draft": draft, "note": note,
                                         "seconds": time.perf_counter() - started}
    return result


if __name__ == "__main__":
    serve(run, "vLLM's layout check")
