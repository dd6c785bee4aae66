"""GPU time as an engine spends it: a CUDA graph replayed (eager launches only as a labelled diagnostic).

- :func:`graph_ms`: warm `fn` up on a side stream (compiles kernels, picks GEMM heuristics, fills caches), capture
  one call as a ``torch.cuda.CUDAGraph``, then time replays: CUDA events around each, the L2 cache flushed before
  each (a draft step reads its weights from HBM: they are far larger than L2), median.
- :func:`eager_ms`: the same timing of plain calls, launch overhead included.
- :func:`device_profile`: the cost model's bandwidth profile (``eagle3_quant.cost``) of a device name, if any.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from eagle3_quant.devices import DEVICE_PROFILES, DeviceProfile

FLUSH_BYTES = 256 << 20        # at least this, and twice the device's L2, zeroed before each timed call
ITERS = 50
WARMUP = 5
_flush_buffers: dict[str, torch.Tensor] = {}


def graph_ms(fn: Callable[[], object], iters: int = ITERS, warmup: int = WARMUP) -> float:
    """Median ms of one replay of `fn` captured as a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    try:
        return _median_ms(graph.replay, iters)
    finally:
        del graph


def eager_ms(fn: Callable[[], object], iters: int = ITERS, warmup: int = WARMUP) -> float:
    """Median ms of one plain (eager) call of `fn`."""
    for _ in range(warmup):
        fn()
    return _median_ms(fn, iters)


def _median_ms(run: Callable[[], object], iters: int) -> float:
    flush = _flush_buffer(torch.cuda.current_device())
    times = []
    for _ in range(iters):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _flush_buffer(index: int) -> torch.Tensor:
    key = f"cuda:{index}"
    if key not in _flush_buffers:
        l2 = getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or 0
        _flush_buffers[key] = torch.empty(max(FLUSH_BYTES, 2 * l2), dtype=torch.uint8, device=key)
    return _flush_buffers[key]


def device_profile(device_name: str) -> DeviceProfile | None:
    """The cost model's profile whose short name ("H200", "MI355X") the device's name holds, else None."""
    name = device_name.upper()
    return next((p for p in DEVICE_PROFILES.values() if p.name.upper() in name), None)
