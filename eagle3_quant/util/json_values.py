"""Values as strict JSON holds them: a measurement that does not exist (NaN, Inf) is null."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN/Inf become null (a measurement that does not exist), tuples become lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value
