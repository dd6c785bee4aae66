"""The target in vLLM's engine for `calibrate --backend vllm`: ``PYTHON export_child.py REQUEST.json RESULT.json``.

Runs by its file path in the engine's own environment, where eagle3-quant is not installed: it imports only the
standard library, torch, safetensors, vLLM and ``child_protocol.py`` in engines/. The parent is
``calib/vllm_capture.py``, through ``eagle3_quant/engines/runner.py``.

REQUEST: {"target", "dtype", "layer_ids": [hidden_states indices, ascending], "prompts": [[token ids]],
"samples": [the sample index of each prompt], "max_tokens", "dump": folder, "engine": {more ``vllm.LLM`` keyword
arguments: max_model_len, tensor_parallel_size, quantization, ...}, "mx_emulation": bool}.
RESULT: {"vllm", "torch", "load_s", "generate_s", "exported", "extra_steps", "workarounds": {name: why},
"substituted_ops", "registered_kernels" (as ``serve_child.py``: a quantized target on vLLM's CPU build)} or
{"error": one line}.

vLLM's own hidden-state export does the work: the speculative method ``extract_hidden_states`` with the ids as its
``eagle_aux_hidden_state_layer_ids`` and the ``ExampleHiddenStatesConnector``, which writes each finished request's
states to ``DUMP/{sample:06d}.safetensors`` (``hidden_states`` [T, n, H], ``token_ids`` [T]: the prompt and the
generated tokens but the last; ``include_output_tokens``). Every prompt is generated greedily (temperature 0,
``ignore_eos``: the parent cuts at an EOS) to ``max_tokens``, with ``prompt_logprobs=1``, whose rank-1 token is
vLLM's own argmax after each prompt position. The requests go in together (``LLMEngine.add_request``/``step``, as
``LLM.generate`` does), so the engine batches them. Once a sample's file is complete (its ``.lock`` released), the
child writes ``DUMP/{sample:06d}.json`` {"prompt_next": [argmax after each prompt position but the last],
"output": [generated ids]}: that file marks the sample done, for the parent's progress and for resuming.

Two things vLLM's CPU build needs (eagle3-facts section 15), each applied only where detected and named in the
result's ``workarounds``:
- no pinned memory on the platform (``current_platform.is_pin_memory_available()`` false): the connector's async
  write allocates ``pin_memory=True`` host buffers, which fails there, so its write is replaced by a synchronous one
  (the same slot gather from the cache, ``save_file``, the lock released, the request reported as sent);
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
import serve_cpu  # noqa: E402  (this folder is the script's own: sys.path[0])
from child_protocol import serve, write_json  # noqa: E402

EXTRA_STEPS = 64              # engine steps after the last request finished, at most (one is enough here)
WRITE_WAIT_S = 600.0          # an engine core in its own process: how long to wait for the last files


class _Sent:
    """Stands for the connector's CUDA copy event once the synchronous write is done."""

    def query(self) -> bool:
        return True


def _synchronous_write(self, pending) -> None:
    """``ExampleHiddenStatesConnector._submit_async_write`` without pinned memory, a copy stream or a thread."""
    import torch
    from safetensors.torch import save_file
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import extract_from_kv_cache

    if not self._is_tp_rank_zero:
        return
    blocks = torch.tensor(pending.block_ids, dtype=torch.long)
    slots = (torch.arange(self._block_size, dtype=torch.long)[None] + blocks[:, None] * self._block_size).flatten()
    states = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).to("cpu").clone()
    os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
    lock_fd = self._lock_fds.pop(pending.req_id, None)
    try:
        save_file({"hidden_states": states, "token_ids": pending.token_ids.clone()}, pending.filename)
    finally:
        if lock_fd is not None:
            os.close(lock_fd)           # releases the LOCK_EX taken when the request arrived
    self._req_copy_events[pending.req_id] = _Sent()


def _install_workarounds(workarounds: dict) -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1 import example_hidden_states_connector as connector
    from vllm.platforms import current_platform

    if not current_platform.is_pin_memory_available():
        connector.ExampleHiddenStatesConnector._submit_async_write = _synchronous_write
        workarounds["synchronous_write"] = (
            f"no pinned memory on vLLM's {current_platform.device_type} platform: the connector's async write "
            "(pin_memory=True) cannot run, so each file is written synchronously")


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


def _engine(request: dict):
    from vllm import LLM

    ids = list(request["layer_ids"])
    return LLM(model=request["target"], dtype=request["dtype"], **request["engine"],
               speculative_config={"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                   "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": ids}}},
               kv_transfer_config={"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                                   "kv_connector_extra_config": {"shared_storage_path": request["dump"],
                                                                 "allow_custom_save_path": True}})


def _in_process(engine) -> bool:
    from vllm.v1.engine.core_client import InprocClient

    return isinstance(engine.engine_core, InprocClient)


def run(request: dict) -> dict:
    import torch
    import vllm
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    workarounds: dict[str, str] = {}
    _install_workarounds(workarounds)
    serve_cpu.supply_static_fp8_ops()       # a quantized target on vLLM's CPU build (serve_cpu.py)
    serve_cpu.fast_cpu_scaled_mm()
    if request.get("mx_emulation"):
        serve_cpu.register_mx_emulation()
    dump = request["dump"]
    os.makedirs(dump, exist_ok=True)
    started = time.perf_counter()
    llm = _engine(request)
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
    if extra_steps:
        workarounds["extra_engine_steps"] = (
            f"the engine core runs in this process and writes a finished request's file on its next step: "
            f"{extra_steps} more step(s) after the last request")
    return {"vllm": vllm.__version__, "torch": torch.__version__, "load_s": load_s,
            "generate_s": time.perf_counter() - started, "exported": len(paths), "extra_steps": extra_steps,
            "workarounds": workarounds, "substituted_ops": serve_cpu.substituted_ops(),
            "registered_kernels": dict(serve_cpu.REGISTERED)}


if __name__ == "__main__":
    serve(run, "vLLM")
