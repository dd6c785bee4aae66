"""The target in vLLM's engine for `calibrate --backend vllm`: ``PYTHON export_child.py REQUEST.json RESULT.json``.

Runs by its file path in the engine's own environment, where eagle3-quant is not installed: it imports only the
standard library, torch, safetensors, vLLM and ``child_protocol.py`` in engines/. The parent is
``calib/vllm_capture.py``, through ``eagle3_quant/engines/runner.py``.

REQUEST: {"target", "dtype", "layer_ids": [hidden_states indices, ascending], "prompts": [[token ids]],
"samples": [the sample index of each prompt], "max_tokens", "dump": folder, "engine": {more ``vllm.LLM`` keyword
arguments: max_model_len, the parallel layout, quantization, ...}, "changes": [the CPU build's changes by name]}.
RESULT: {"vllm", "torch", "load_s", "generate_s", "exported", "extra_steps", "workarounds": {name: {"why",
"calls", "processes"}}, "substituted_ops", "registered_kernels", "processes" (as ``serve_child.py``: a quantized
target on vLLM's CPU build)} or {"error": one line}.

vLLM's own hidden-state export does the work: the speculative method ``extract_hidden_states`` with the ids as its
``eagle_aux_hidden_state_layer_ids`` and the ``ExampleHiddenStatesConnector``, which writes each finished request's
states to ``DUMP/{sample:06d}.safetensors`` (``hidden_states`` [T, n, H], ``token_ids`` [T]: the prompt and the
generated tokens but the last; ``include_output_tokens``). Every prompt is generated greedily (temperature 0,
``ignore_eos``: the parent cuts at an EOS) to ``max_tokens``, with ``prompt_logprobs=1``, whose rank-1 token is
vLLM's own argmax after each prompt position. The requests go in together (``LLMEngine.add_request``/``step``, as
``LLM.generate`` does), so the engine batches them. Once a sample's file is complete (its ``.lock`` released), the
child writes ``DUMP/{sample:06d}.json`` {"prompt_next": [argmax after each prompt position but the last],
"output": [generated ids]}: that file marks the sample done, for the parent's progress and for resuming.

Two things vLLM's CPU build needs, each applied only where detected and named in the result's ``workarounds``
with the processes where it acted:
- no pinned memory on the platform: the connector's async write is replaced by a synchronous one
  (``cpu_connector.py``, the change ``synchronous_write``), in every worker through vLLM's plugin entry point
  (``cpu_plugin.py``): the connector runs where the model runs;
- an engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) writes a finished request's file on its
  next step, and no step comes once nothing is running: the child steps the engine until every file is written.
  An engine core in its own process (vLLM's default on a GPU) keeps stepping by itself: the child waits for the
  lock instead.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

# child_protocol.py is in engines/, one folder up; appended after site-packages so that engines/vllm/ never
# shadows vLLM itself
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cpu_changes  # noqa: E402  (this folder is the script's own: sys.path[0])
import cpu_plugin  # noqa: E402
from child_protocol import serve, write_json  # noqa: E402

EXTRA_STEPS = 64              # engine steps after the last request finished, at most (one is enough here)
WRITE_WAIT_S = 600.0          # an engine core in its own process: how long to wait for the last files


def _written(path: str) -> bool:
    """The connector's file is complete: it exists and nobody holds its ``.lock`` (the connector holds LOCK_EX from
    the request's first step until the file is saved)."""
    if not os.path.exists(path):
        return False
    try:
        fd = os.open(path + ".lock", os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _argmax_after_prompt(prompt_logprobs) -> list[int]:
    """The rank-1 token of each prompt position's distribution (position 0 has none): vLLM's argmax after tokens
    0..t for t < len(prompt) - 1."""
    return [min(entry.items(), key=lambda item: item[1].rank)[0] for entry in prompt_logprobs[1:]]


def llm_kwargs(request: dict) -> dict:
    """The ``vllm.LLM`` keyword arguments of this request (``layout_child.py`` checks the same ones)."""
    ids = list(request["layer_ids"])
    return {"model": request["target"], "dtype": request["dtype"], **request["engine"],
            "speculative_config": {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                   "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": ids}}},
            "kv_transfer_config": {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                                   "kv_connector_extra_config": {"shared_storage_path": request["dump"],
                                                                 "allow_custom_save_path": True}}}


def _in_process(engine) -> bool:
    from vllm.v1.engine.core_client import InprocClient

    return isinstance(engine.engine_core, InprocClient)


def run(request: dict) -> dict:
    import torch
    import vllm
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    changes = request.get("changes", [])
    cpu_plugin.install(changes)             # every process vLLM starts from here on (workers write the files)
    cpu_changes.apply(changes)              # this one
    dump = request["dump"]
    os.makedirs(dump, exist_ok=True)
    started = time.perf_counter()
    from vllm import LLM

    llm = LLM(**llm_kwargs(request))
    load_s = time.perf_counter() - started
    engine = llm.llm_engine
    started = time.perf_counter()
    paths = {}
    for sample, prompt in zip(request["samples"], request["prompts"], strict=True):
        path = os.path.join(dump, f"{sample:06d}.safetensors")
        for stale in (path, path + ".lock"):           # an interrupted run's leftovers
            if os.path.exists(stale):
                os.remove(stale)
        params = SamplingParams(temperature=0.0, max_tokens=request["max_tokens"], ignore_eos=True, prompt_logprobs=1,
                                output_kind=RequestOutputKind.FINAL_ONLY,
                                extra_args={"kv_transfer_params": {"include_output_tokens": True,
                                                                   "hidden_states_path": path}})
        request_id = f"sample-{sample}"
        engine.add_request(request_id, TokensPrompt(prompt_token_ids=list(prompt)), params)
        paths[request_id] = path
    finished: dict[str, object] = {}

    def record_written() -> None:
        for request_id, output in list(finished.items()):
            path = paths[request_id]
            if _written(path):
                write_json(path[: -len(".safetensors")] + ".json",
                           {"prompt_next": _argmax_after_prompt(output.prompt_logprobs),
                            "output": list(output.outputs[0].token_ids)})
                if os.path.exists(path + ".lock"):
                    os.remove(path + ".lock")
                del finished[request_id]

    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                finished[output.request_id] = output
        record_written()
    extra_steps, deadline, in_process = 0, time.monotonic() + WRITE_WAIT_S, _in_process(engine)
    while finished:
        if in_process:
            if extra_steps == EXTRA_STEPS:
                break
            engine.step()
            extra_steps += 1
        elif time.monotonic() > deadline:
            break
        else:
            time.sleep(0.05)
        record_written()
    if finished:
        raise RuntimeError(f"vLLM did not write the hidden states of {len(finished)} request(s) "
                           f"({', '.join(sorted(finished)[:3])}) after {extra_steps} more engine steps")
    generate_s = time.perf_counter() - started
    acted = cpu_changes.everywhere(llm)
    if extra_steps:
        acted["workarounds"]["extra_engine_steps"] = {
            "why": "the engine core runs in this process and writes a finished request's file on its next step",
            "calls": extra_steps, "processes": {"engine": extra_steps}}
    return {"vllm": vllm.__version__, "torch": torch.__version__, "load_s": load_s, "generate_s": generate_s,
            "exported": len(paths), "extra_steps": extra_steps, **acted}


if __name__ == "__main__":
    serve(run, "vLLM")
