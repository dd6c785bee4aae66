"""One error root for eagle3-quant.

Every error carries the file, tensor or field it is about, and also inherits the builtin it
resembles, so callers can catch ``ValueError`` or ``FileExistsError`` as usual. ``str(error)`` is one line,
whatever the names in it hold (`one_line`); the CLI prints it and exits with ``error.exit_code``.
"""

from __future__ import annotations

import re
from pathlib import Path

# C0 and C1 controls (newline, carriage return, ESC, ...), the Unicode line and paragraph separators and the
# bidirectional overrides: what would let a value end a line of output, start one of its own or redraw one.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def one_line(text: str) -> str:
    """TEXT with every control character written as its Python escape (a newline as `\\n`): printed data, one line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class Eagle3QuantError(Exception):
    """Root of every error raised on purpose by eagle3-quant."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        tensor: str | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.path = str(path) if path is not None else None
        self.tensor = tensor
        self.field = field
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.path:
            where.append(self.path)
        if self.tensor:
            where.append(f"tensor '{self.tensor}'")
        if self.field:
            where.append(f"field '{self.field}'")
        text = (": ".join(where) + ": " if where else "") + self.message
        if self.hint:
            text += f" ({self.hint})"
        return one_line(text)


class DraftFormatError(Eagle3QuantError, ValueError):
    """The source is not a readable, consistent Eagle3 draft checkpoint."""


class CheckpointFileError(DraftFormatError):
    """A safetensors file or shard index is corrupt or unsafe."""


class NotAnEagle3DraftError(DraftFormatError):
    """The checkpoint is readable but is not an Eagle3 draft (a target model, a MoE, ...)."""


class UnsupportedSourceError(DraftFormatError):
    """The source holds something we refuse by default (pickle weights, an already-quantized draft)."""


class SourceNotFoundError(Eagle3QuantError, FileNotFoundError):
    """SRC is neither a local folder nor a reachable Hub repository."""


class SchemeError(Eagle3QuantError, ValueError):
    """Unknown scheme or an invalid exclusion request."""


class OutputExistsError(Eagle3QuantError, FileExistsError):
    """OUT exists and --force was not given, or OUT overlaps SRC."""


class ResourceError(Eagle3QuantError, OSError):
    """Not enough memory or disk for the job."""


class QuantizationError(Eagle3QuantError, RuntimeError):
    """Quark failed or produced an artifact that does not match the plan."""


class LoaderCompatError(Eagle3QuantError, RuntimeError):
    """vLLM would load the artifact differently from what was intended."""


class CalibrationDataError(Eagle3QuantError, ValueError):
    """The calibration dataset or dump cannot be read, or holds no usable prompts or states."""


class TargetMismatchError(Eagle3QuantError, ValueError):
    """The target model (or its hidden states) does not fit the draft: hidden size, vocab or layer taps."""


class Fp8LayoutError(Eagle3QuantError, ValueError):
    """Operands of an FP8 matmul break the layout rules CUDA/ROCm ``torch._scaled_mm`` enforces."""


class ManifestError(Eagle3QuantError, ValueError):
    """An output folder's manifest (`eagle3_quant.json`) is missing, unreadable or malformed."""


class BenchRecordError(Eagle3QuantError, ValueError):
    """A `bench` record (`bench.json`, or a validation report's `engine_run`) is unreadable or malformed."""


class ValidationRecordError(Eagle3QuantError, ValueError):
    """A validation report's metrics (`validation.json`'s ``metrics``) are malformed."""


class OptionsError(Eagle3QuantError, ValueError):
    """A stage option is out of range or contradicts another one."""


class PublishError(Eagle3QuantError, RuntimeError):
    """OUT cannot be published as it is (no passing validation, files changed since quantization, ...)."""


class NotValidatedError(PublishError):
    """OUT has no validation report, an unreadable one, or a failed one."""


class NotMeasuredError(PublishError):
    """OUT's acceptance was measured neither offline (`validate --calib`) nor in an engine (`bench`)."""


class HubError(Eagle3QuantError, ConnectionError):
    """The Hub refused or failed a request. The message never contains the token."""

    def __init__(self, message: str, *, status: int | None = None, **kwargs) -> None:
        self.status = status
        super().__init__(message, **kwargs)


class HubAuthError(HubError, PermissionError):
    """No token, or the Hub rejected it (401/403)."""


class PipelineSpecError(Eagle3QuantError, ValueError):
    """A pipeline file is malformed: unknown keys, wrong types, missing fields."""


class EstimateInputError(Eagle3QuantError, ValueError):
    """A speedup estimate lacks an input or got a bad one (report without acceptance, non-positive time)."""


class EngineError(Eagle3QuantError, RuntimeError):
    """A serving engine run in its own interpreter failed, timed out, or cannot run here (eagle3_quant/engines)."""


class EngineNotFoundError(EngineError, FileNotFoundError):
    """No engine environment: neither --engine-python, nor EAGLE3_QUANT_ENGINE_PYTHON, nor the project's one."""


class AcceptanceGateError(Eagle3QuantError, RuntimeError):
    """`quantize --scheme auto`: no candidate keeps the acceptance gate (a failed gate: exit 1, nothing written)."""

    exit_code = 1


class EngineLayoutError(Eagle3QuantError, ValueError):
    """The serving engine refuses the parallel layout for this target and draft, found by its own code before any
    weight loads (`eagle3_quant/engines/layout_check.py`)."""
