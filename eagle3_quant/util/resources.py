"""Free memory and disk: the probes, and the early refusal (with the numbers) when a job cannot fit.

The probes are module functions so tests (and callers) can replace them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from eagle3_quant.errors import ResourceError

DISK_MARGIN = 1.05   # filesystem overhead on top of the bytes we write


def gb(n: int) -> str:
    """A byte count for messages: GB, or MB below 0.1 GB."""
    return f"{n / 1e9:.2f} GB" if n >= 10**8 else f"{n / 1e6:.3g} MB"


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def available_memory_bytes() -> int | None:
    """Memory this process may still use: MemAvailable, capped by a cgroup limit; None when unknown."""
    candidates = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                candidates.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:
            candidates.append(max(limit - usage, 0))
    return min(candidates) if candidates else None


def free_disk_bytes(folder: Path) -> tuple[int, Path]:
    """Free bytes on the filesystem that holds `folder` (or its nearest existing parent)."""
    probe = folder
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free, probe


def check_disk(folder: Path, needed: int, what: str, hint: str = "free some space or choose another OUT") -> None:
    free, probe = free_disk_bytes(folder)
    if free < needed * DISK_MARGIN:
        raise ResourceError(f"{what} needs {gb(int(needed * DISK_MARGIN))} of free disk, {gb(free)} available",
                            path=probe, hint=hint)


def check_memory(needed: int, what: str, where: Path | str | None = None) -> None:
    available = available_memory_bytes()
    if available is not None and available < needed:
        raise ResourceError(f"{what} needs about {gb(needed)} of memory, {gb(available)} available",
                            path=where, hint="close other jobs or use a machine with more memory")
