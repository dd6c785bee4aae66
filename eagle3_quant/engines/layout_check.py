"""A parallel layout vLLM would refuse is refused before anything loads, in vLLM's own words.

`check_layout` runs ``vllm/layout_child.py`` in the engine's environment on the very requests the engine children
will get: vLLM's ``LLM`` and ``create_engine_config`` checks (heads divisible by the tensor-parallel size, pipeline
parallelism only for models that implement ``SupportsPP``, which ``extract_hidden_states`` does not, expert
parallelism only for MoE targets, data parallelism outside an external launcher, ...), then each draft built by
vLLM's loader at the tensor-parallel size on the meta device (its vocabulary split across ``ParallelLMHead``). The
rules are the installed vLLM's, not a list kept here: ``engine_args`` meet ``EngineArgs``' own fields, a
``max_model_len`` the target's own limit. A single-process layout with neither has nothing to check and starts
nothing. About ten seconds: vLLM's import and its config, no weights.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3_quant.engine_layout import EngineLayout
from eagle3_quant.engines.environment import VLLM_CHILDREN, EngineInfo, EnginePython, engine_env
from eagle3_quant.engines.runner import ChildCommand, run_child
from eagle3_quant.errors import EngineLayoutError

LAYOUT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class LayoutRun:
    name: str              # what the run is, in words: "the artifact", "the target"
    child: str             # the engine child that will run it: "serve_child" or "export_child"
    request: dict          # the request that child will get


def check_layout(python: EnginePython, info: EngineInfo, layout: EngineLayout, runs: list[LayoutRun],
                 way_out: str | None = None) -> list[str]:
    """What the check could not judge, in words (nothing for a one-process layout, which starts nothing);
    `EngineLayoutError` in vLLM's words, naming its file and line, when vLLM refuses a run; `way_out` (the verb's
    alternatives) joins the hint."""
    if not (layout.split or layout.engine_args or layout.max_model_len is not None):
        return []
    command = ChildCommand(python.path, VLLM_CHILDREN / "layout_child.py",
                           name=f"vLLM's layout check ({info.distribution} {info.version})", env=engine_env(info),
                           unset=("PYTHONPATH",))
    request = {"runs": [{"name": run.name, "child": run.child, "request": run.request} for run in runs],
               "draft_split": layout.tensor_parallel_size}
    result = run_child(command, request, LAYOUT_TIMEOUT_S).checked()
    refused = result.get("refused")
    if refused is None:
        return [f"{name}: {row['note']}" for name, row in result["runs"].items() if row.get("note")]
    where = f", {refused['where']}" if refused.get("where") else ""
    what = "the draft split across the ranks" if refused["stage"] == "draft" else "its configuration"
    hints = [way_out] if way_out else []
    if refused["stage"] == "draft":
        hints.append("choose a tensor-parallel size that divides the draft's sizes")
    raise EngineLayoutError(f"vLLM {result['vllm']} refuses {layout.describe()} for {refused['run']} ({what}"
                            f"{where}): {refused['message'].rstrip('. ')}; nothing was loaded",
                            field="tensor_parallel_size" if refused["stage"] == "draft" else None,
                            hint="; ".join(hints) or None)
