"""Refuse a capture the disk cannot hold, before anything is written (`util/resources.check_disk`, with the numbers).

The set's size at most is positions x taps x hidden x bytes (every generation run to its full length; the two id
vectors add 16 bytes a position). Shards an interrupted run already wrote count as written. vLLM's backend holds the
engine's own export beside the set until it is imported: twice the room.
"""

from __future__ import annotations

from pathlib import Path

from eagle3_quant.util.resources import check_disk


def staged_bytes(staging: Path) -> int:
    """Bytes of the shards an interrupted run left in `staging` (0 when there is none)."""
    return sum(f.stat().st_size for f in staging.glob("*.safetensors")) if staging.is_dir() else 0


def check_capture_room(out: Path, staging: Path, set_bytes: int, positions: int, taps: int, hidden: int,
                       dtype_bytes: int, copies: int = 1) -> None:
    """`ResourceError` when the file system of the set has less free room than the capture still needs."""
    needed = max(0, copies * set_bytes - staged_bytes(staging))
    how = f"{positions:,} positions x {taps} taps x hidden {hidden} x {dtype_bytes} bytes" + (
        ", twice: vLLM's export is held beside the set until it is imported" if copies > 1 else "")
    check_disk(out, needed, f"the calibration set ({how})",
               hint="free some space, write OUT elsewhere, or capture fewer prompts (--num-samples) or tokens "
                    "(--generate-tokens, --seq-len)")
