"""Stage options: one frozen dataclass per stage is the single source of defaults and help text.

The Python API (`verb(src, out, options)`), the CLI verb (`cli_option`) and the pipeline file (its sections
are these dataclasses) all read a field's default and help from here, so none can drift from another.
Field metadata: ``help`` (the CLI's and the docs' text) and ``pipeline`` (False: not a pipeline-file key,
for fields the pipeline sets itself, such as paths inside its workdir).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, TypeVar

from eagle3_quant.errors import Eagle3QuantError, OptionsError

T = TypeVar("T")
DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")
DEVICE_HELP = "cpu, cuda or cuda:N (default: the first GPU when there is one, else the CPU)."


def option(default: Any = dataclasses.MISSING, help: str = "", *, pipeline: bool = True,
           factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field that carries its help text."""
    meta = {"help": help, "pipeline": pipeline}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _field(cls: type, name: str) -> dataclasses.Field:
    try:
        return cls.__dataclass_fields__[name]
    except KeyError:
        raise AttributeError(f"{cls.__name__} has no option {name!r}") from None


def help_of(cls: type, name: str) -> str:
    return _field(cls, name).metadata.get("help", "")


def default_of(cls: type, name: str) -> Any:
    f = _field(cls, name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def build_options(cls: type[T], options: T | None, overrides: dict[str, Any]) -> T:
    """`options` (or the defaults) with keyword overrides; an unknown keyword is refused with the valid names."""
    if options is not None and not isinstance(options, cls):
        raise OptionsError(f"expected {cls.__name__}, got {type(options).__name__}", field="options")
    unknown = sorted(set(overrides) - set(cls.__dataclass_fields__))
    if unknown:
        raise OptionsError(f"unknown option(s) {', '.join(unknown)}; valid options: "
                           f"{', '.join(cls.__dataclass_fields__)}", field=unknown[0])
    if options is None:    # built from the keywords, so defaults derived from other fields follow them
        return cls(**overrides)
    return dataclasses.replace(options, **overrides) if overrides else options


def check_device(device: str | None) -> None:
    if device is not None and not DEVICE.match(str(device)):
        raise OptionsError(f"{device!r} is not cpu, cuda or cuda:N", field="device")


@dataclasses.dataclass(frozen=True)
class Number:
    """What a numeric option may hold: a finite int (or float) in [low, high], low itself excluded when `above`.
    Every numeric CLI option parses with one (cli/numbers.py) and the options dataclasses check with the same, so
    inf, nan and absurd magnitudes stop at the option, named, before any work."""

    kind: type
    low: float
    high: float
    above: bool = False

    def text(self) -> str:
        if self.kind is int:
            return f"an integer in {int(self.low)}..{int(self.high)}"
        return f"a number in {'(' if self.above else '['}{self.low:g}, {self.high:g}]"

    def problem(self, value: object, shown: str | None = None) -> str | None:
        """None when `value` fits, else what is wrong with it (`shown`: the value as the user wrote it)."""
        shown = shown if shown is not None else repr(value)
        if isinstance(value, bool) or not isinstance(value, int | float) or \
                (self.kind is int and not isinstance(value, int)):
            return f"{shown} is not {self.text()}"
        if not math.isfinite(value):
            return f"{shown} is not a finite number"
        if not self.low <= value <= self.high or (self.above and value == self.low):
            return f"{shown} is not {self.text()}"
        return None

    def check(self, value: object, name: str, error: type[Eagle3QuantError] = OptionsError, *,
              required: bool = False) -> None:
        """Refuse `value` naming the option; None passes unless `required` (an option not given)."""
        problem = f"{name} is required" if value is None and required else \
            None if value is None else self.problem(value)
        if problem:
            raise error(problem, field=name)

    def parse(self, text: str) -> int | float:
        """The number `text` spells, checked; ValueError (the CLI's usage error) naming what is wrong."""
        try:
            value = self.kind(text.strip())
        except (TypeError, ValueError):
            raise ValueError(f"{text!r} is not {self.text()}") from None
        problem = self.problem(value, text.strip())
        if problem:
            raise ValueError(problem)
        return value


COUNT = Number(int, 1, 2**31 - 1)              # samples, tokens, lengths, batch and vocabulary sizes
AT_LEAST_0 = Number(int, 0, 2**31 - 1)         # counts that may be zero
SEED = Number(int, 0, 2**32 - 1)               # numpy's seed range
STEPS = Number(int, 1, 64)                     # draft tokens per speculative step
LAYER_ID = Number(int, 0, 100_000)             # a target layer index
FRACTION = Number(float, 0.0, 1.0)
RATIO = Number(float, 0.0, 100.0, above=True)  # quantized / BF16
DECIBELS = Number(float, -1000.0, 1000.0)
TIME = Number(float, 0.0, 1e7, above=True)     # seconds or milliseconds


def check_fraction(value: float | None, name: str, *, upper_open: bool = True) -> None:
    if value is not None and (FRACTION.problem(value) or (upper_open and value == 1)):
        raise OptionsError(f"{value!r} is not a fraction in [0, 1{')' if upper_open else ']'}", field=name)


def check_positive(value: int | None, name: str) -> None:
    COUNT.check(value, name)


def require_device(device: str | None) -> None:
    """A GPU asked for (`cuda`, `cuda:N`) must be there: never a silent run on the CPU instead."""
    if device is None or not str(device).startswith("cuda"):
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= count:
        where = "no CUDA/ROCm GPU torch can use" if count == 0 else f"{count} GPU(s) (cuda:0..cuda:{count - 1})"
        raise OptionsError(f"{device!r}: this machine has {where}", field="device",
                           hint="use --device cpu, or leave it out")


def pick_device(device: str | None) -> str:
    """The device a stage computes on: the one asked for (refused when it is not there), else cuda when available,
    else cpu."""
    if device is not None:
        require_device(device)
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
