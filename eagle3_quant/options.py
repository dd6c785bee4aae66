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

from eagle3_quant.errors import OptionsError

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


def check_fraction(value: float | None, name: str, *, upper_open: bool = True) -> None:
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) \
            or value < 0 or value > 1 or (upper_open and value == 1):
        raise OptionsError(f"{value!r} is not a fraction in [0, 1{')' if upper_open else ']'}", field=name)


def check_positive(value: int | None, name: str) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise OptionsError(f"must be an integer >= 1, got {value!r}", field=name)


def pick_device(device: str | None) -> str:
    """The device a stage computes on: the one asked for, else cuda when available, else cpu."""
    if device is not None:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
