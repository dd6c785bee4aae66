"""The BLAS libraries' logging for the kernel check's logged child: what to set, into files the check owns, and what
a setting the user made themselves (kept) hides.

- hipBLASLt (``logging.h``, ``rocblaslt-types.h``): ``HIPBLASLT_LOG_MASK`` bits 1 error, 2 trace (operand types),
  32 bench (the scale mode); read only when ``HIPBLASLT_LOG_LEVEL`` is unset, and a level maps to error/trace/hints/
  info/api only, never bench. ``HIPBLASLT_LOG_FILE`` (``%i``: the pid).
- rocBLAS: ``ROCBLAS_LAYER`` bit 1 trace, into ``ROCBLAS_LOG_TRACE_PATH``.
- cuBLASLt: ``CUBLASLT_LOG_LEVEL`` 2 traces every matmul with its scale modes, into ``CUBLASLT_LOG_FILE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HIPBLASLT_MASK = 1 | 2 | 32
HIPBLASLT_LEVELS = {"0": "nothing", "1": "errors only, no matmul line"}   # 2..5: trace and more, never bench
ROCBLAS_TRACE = 1
CUBLASLT_LEVEL = 2


@dataclass(frozen=True)
class LogSettings:
    env: dict[str, str]            # what the logged child gets on top of the user's environment
    notes: tuple[str, ...] = ()    # the user's own settings, kept, and what they hide

    def with_notes(self, reason: str) -> str:
        """A verdict's reason, then the user's settings this logging kept (and what they hid) that it does not name."""
        return "; ".join((reason, *(note for note in self.notes if note not in reason)))

    def describe(self) -> str:
        """"HIPBLASLT_LOG_MASK=35, ROCBLAS_LAYER=1" (files left out), then any note."""
        shown = ", ".join(f"{k}={v}" for k, v in self.env.items() if not k.endswith(("_FILE", "_PATH")))
        return "; ".join(filter(None, (shown, *self.notes)))


def _mask(value: str | None, bits: int) -> int:
    try:
        return bits | int(value, 0) if value else bits
    except ValueError:
        return bits


def log_settings(kind: str, workdir: Path, environ: Mapping[str, str]) -> LogSettings:
    """The logging env for `kind` ("rocm" or "cuda") with files in `workdir`; a level the user set is kept."""
    if kind == "rocm":
        env = {"HIPBLASLT_LOG_FILE": str(workdir / "hipblaslt_%i.log"),
               "ROCBLAS_LAYER": str(_mask(environ.get("ROCBLAS_LAYER"), ROCBLAS_TRACE)),
               "ROCBLAS_LOG_TRACE_PATH": str(workdir / "rocblas_trace.log")}
        level = environ.get("HIPBLASLT_LOG_LEVEL")
        if level is not None:
            shows = HIPBLASLT_LEVELS.get(level.strip(), "trace lines but no bench line, so no scale mode")
            return LogSettings(env, (f"HIPBLASLT_LOG_LEVEL={level} is set in your environment and kept: hipBLASLt "
                                     f"then ignores HIPBLASLT_LOG_MASK and logs {shows}",))
        mask = environ.get("HIPBLASLT_LOG_MASK")
        env = {"HIPBLASLT_LOG_MASK": str(_mask(mask, HIPBLASLT_MASK)), **env}
        return LogSettings(env, (f"your HIPBLASLT_LOG_MASK={mask} kept, bits 1, 2 and 32 added",) if mask else ())
    env = {"CUBLASLT_LOG_FILE": str(workdir / "cublaslt_%i.log")}
    level = environ.get("CUBLASLT_LOG_LEVEL")
    if level is None:
        return LogSettings({"CUBLASLT_LOG_LEVEL": str(CUBLASLT_LEVEL), **env})
    low = level.strip().isdigit() and int(level) < CUBLASLT_LEVEL
    return LogSettings(env, (f"CUBLASLT_LOG_LEVEL={level} is set in your environment and kept"
                             + (": below 2 cuBLASLt logs no matmul" if low else ""),))
