"""Reading a JSON record field by field: every getter names the file and the dotted field when a value is not what
the record's layout says (`records/bench_run.py`, `records/validation_report.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from eagle3_quant.errors import BenchRecordError, Eagle3QuantError

T = TypeVar("T")


@dataclass(frozen=True)
class RecordFields:
    """One JSON object being read: every getter names the file and the dotted field when the value is wrong."""

    data: dict
    path: Path | None
    at: str = ""
    error: type[Eagle3QuantError] = BenchRecordError

    def name(self, key: str) -> str:
        return f"{self.at}.{key}" if self.at else key

    def fail(self, key: str, what: str) -> BenchRecordError:
        return self.error(f"is not {what}", path=self.path, field=self.name(key))

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str) -> Any:
        if key not in self.data:
            raise self.error("is missing", path=self.path, field=self.name(key))
        return self.data[key]

    def object(self, key: str) -> RecordFields:
        value = self.raw(key)
        if not isinstance(value, dict):
            raise self.fail(key, "an object")
        return RecordFields(value, self.path, self.name(key), self.error)

    def optional_object(self, key: str) -> RecordFields | None:
        return None if self.data.get(key) is None else self.object(key)

    def text(self, key: str) -> str:
        value = self.raw(key)
        if not isinstance(value, str):
            raise self.fail(key, "a string")
        return value

    def optional_text(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.text(key)

    def optional_texts(self, key: str) -> tuple[str, ...]:
        """A list of strings; () when absent (a record written before the field existed)."""
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, "a list of strings")
        return tuple(value)

    def integer(self, key: str) -> int:
        value = self.raw(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(key, "an integer")
        return value

    def optional_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)

    def flag(self, key: str) -> bool:
        value = self.raw(key)
        if not isinstance(value, bool):
            raise self.fail(key, "true or false")
        return value

    def optional_flag(self, key: str) -> bool | None:
        return None if self.data.get(key) is None else self.flag(key)

    def number(self, key: str) -> float | None:
        """A measurement: a number, or null where there was nothing to measure (it was NaN)."""
        value = self.raw(key)
        if value is not None and not is_number(value):
            raise self.fail(key, "a number or null")
        return value

    def numbers(self, key: str) -> tuple[float | None, ...]:
        value = self.raw(key)
        if not isinstance(value, list) or not all(v is None or is_number(v) for v in value):
            raise self.fail(key, "a list of numbers")
        return tuple(value)

    def optional_numbers(self, key: str) -> tuple[float | None, ...] | None:
        return None if self.data.get(key) is None else self.numbers(key)

    def integer_rows(self, key: str) -> tuple[tuple[int, ...], ...]:
        """A list of lists of integers; () when absent (a record written before the field existed)."""
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(
                isinstance(row, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in row)
                for row in value):
            raise self.fail(key, "a list of lists of integers")
        return tuple(tuple(row) for row in value)

    def interval(self, key: str) -> tuple[float | None, float | None] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != 2 or not all(v is None or is_number(v) for v in value):
            raise self.fail(key, "an interval [low, high]")
        return value[0], value[1]

    def numbers_by_name(self, key: str) -> dict[str, float | None] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict) or not all(v is None or is_number(v) for v in value.values()):
            raise self.fail(key, "an object of numbers")
        return dict(value)

    def texts_by_name(self, key: str) -> dict[str, str]:
        value = self.raw(key)
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self.fail(key, "an object of strings")
        return dict(value)

    def objects_by_name(self, key: str, read: Callable[[RecordFields], T]) -> dict[str, T]:
        table = self.object(key)
        return {name: read(table.object(name)) for name in table.data}




def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
