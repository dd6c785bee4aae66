"""vLLM's hidden-states connector without pinned memory, for `calibrate --backend vllm` on a platform that has none.

``ExampleHiddenStatesConnector._submit_async_write`` copies each finished request's states into ``pin_memory=True``
host buffers on a CUDA copy stream, then writes them from a thread: on vLLM's CPU build that raises "pin_memory=True
requires a CUDA or other accelerator backend". The replacement does the same slot gather from the cache, writes the
file synchronously (``save_file``), releases the request's lock and reports the request as sent. The connector runs
in every worker process (tensor parallel rank 0 writes), so this change reaches them through the plugin
(``cpu_plugin.py``). Child-side: standard library, torch, safetensors and vLLM only.
"""

from __future__ import annotations

import os

WRITES = {"calls": 0}


class _Sent:
    """Stands for the connector's CUDA copy event once the synchronous write is done."""

    def query(self) -> bool:
        return True


def _synchronous_write(self, pending) -> None:
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
    WRITES["calls"] += 1


def synchronous_write() -> str | None:
    """Replace the connector's async write where the platform has no pinned memory; the reason, or None."""
    from vllm.distributed.kv_transfer.kv_connector.v1 import example_hidden_states_connector as connector
    from vllm.platforms import current_platform

    if current_platform.is_pin_memory_available():
        return None
    connector.ExampleHiddenStatesConnector._submit_async_write = _synchronous_write
    return (f"no pinned memory on vLLM's {current_platform.device_type} platform: the connector's async write "
            "(pin_memory=True) cannot run, so each file is written synchronously")
