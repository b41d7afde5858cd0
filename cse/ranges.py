"""The values a numeric argument may take, declared beside it and checked in one place.

A dataclass field declares its range in its metadata (``metadata={"help": ..., RANGE: positive}``);
:func:`check_values` refuses a value outside it, or one that is not a number, with one line naming the
flag, the range and the value, and a hint (the range's own, else the field's help and default). An
arguments dataclass checks its own fields when it is built (``check_fields(self)`` in its
``__post_init__``); the run scripts check the training arguments' before the Trainer's dataclass is
built (:func:`cse.arguments.parse_args`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import CSEUsageError

# The metadata key of a field's range (cse.arguments' parser keeps it from argparse).
RANGE = "range"


def flag(default, help_text: str, **metadata):
    """A flag's dataclass field: its default, its help, and the rest of its metadata (``choices``,
    :data:`RANGE`)."""
    return dataclasses.field(default=default, metadata={"help": help_text, **metadata})


@dataclass(frozen=True)
class Range:
    """``low <= value <= high`` (``<`` where the bound is open; None: unbounded), or one of ``also``
    (a sentinel such as -1 for "off"); ``integer``: a whole number; ``hint``: what to do instead."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    also: tuple = ()
    integer: bool = False
    hint: str | None = None

    def __contains__(self, value) -> bool:
        if value in self.also:
            return True
        if self.integer and not (math.isfinite(value) and value == int(value)):
            return False
        # written so that NaN is outside every range
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return bool(above and below)

    def __str__(self) -> str:
        """What the value must be: ``be > 0``, ``lie in [0, 1)``, ``be a whole number >= 1 or -1``."""
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            interval = f"{'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
            text = f"be a whole number in {interval}" if self.integer else f"lie in {interval}"
        else:
            bound = (
                f"{'>' if self.low_open else '>='} {low}"
                if self.low is not None
                else f"{'<' if self.high_open else '<='} {high}"
                if self.high is not None
                else ""
            )
            kind = "a whole number" if self.integer else "a number" if not bound else ""
            text = " ".join(word for word in ("be", kind, bound) if word)
        return text + "".join(f" or {_number(value)}" for value in self.also)

    def refuse(self, name: str, value, hint: str | None = None) -> CSEUsageError:
        return CSEUsageError(f"--{name} must {self}, got {_number(value)}", hint=self.hint or hint)


def _number(value) -> str:
    """``value`` as a user writes it: 0.05, 1e-08, 4294967295."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and 1e6 <= abs(value) < 1e18 else f"{value:g}"
    return str(value)


positive = Range(0, low_open=True)
non_negative = Range(0)
probability = Range(0, 1)
seed = Range(0, 2**32 - 1, integer=True)  # numpy's seeds


def at_least(low: int, **kwargs) -> Range:
    """A whole number ``>= low``."""
    return Range(low, integer=True, **kwargs)


def _numbers(value) -> list | None:
    """The numbers ``value`` holds (a list's items), or None when any of them is not a number."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if any(isinstance(item, bool) or not isinstance(item, (int, float)) for item in items):
        return None
    return items


def check_value(name: str, value, allowed: Range, hint: str | None = None) -> None:
    """Refuse ``value`` of the flag ``--name`` unless it is None (not set) or every number it holds is
    in ``allowed``; ``hint`` is said when the range has none of its own."""
    if value is None:
        return
    numbers = _numbers(value)
    if numbers is None:
        raise CSEUsageError(
            f"--{name} must be {'numbers' if isinstance(value, (list, tuple)) else 'a number'}, got {value!r}",
            hint=allowed.hint or hint,
        )
    for number in numbers:
        if isinstance(number, float) and not math.isfinite(number) and number not in allowed.also:
            raise CSEUsageError(f"--{name} must be a finite number, got {value}", hint=allowed.hint or hint)
        if number not in allowed:
            raise allowed.refuse(name, number if len(numbers) == 1 else value, hint)


def check_finite(values: Mapping) -> None:
    """Refuse a NaN or infinite number (alone or in a list) among ``values`` (name -> value), ranged or
    not: it would train to a non-finite loss, or silently switch something off. Checked before the
    ranges, whose comparisons a NaN would pass unnoticed."""
    for name, value in values.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise CSEUsageError(
                f"--{name} must be a finite number, got {value}",
                hint=f"give --{name} a finite value (see --help), or leave it out for its default",
            )


def field_hint(f: dataclasses.Field) -> str | None:
    """What a refusal of the field ``f`` suggests: its help and its default."""
    help_text = f.metadata.get("help", "").rstrip(".")
    default = f.default if f.default is not dataclasses.MISSING else None
    if f.default_factory is not dataclasses.MISSING:
        default = f.default_factory()
    said = f"the default is {default}" if default is not None else None
    return "; ".join(text for text in (help_text, said) if text) or None


def declared_ranges(dataclass_types) -> dict[str, tuple[Range, str | None]]:
    """Each field of ``dataclass_types`` that declares a range (its own or, for a field a subclass
    redeclares, its base's): name -> (range, hint)."""
    ranges = {}
    for dtype in dataclass_types:
        for f in dataclasses.fields(dtype):
            declared = next(
                (
                    base.__dataclass_fields__[f.name].metadata[RANGE]
                    for base in dtype.__mro__
                    if f.name in getattr(base, "__dataclass_fields__", {})
                    and RANGE in base.__dataclass_fields__[f.name].metadata
                ),
                None,
            )
            if declared is not None:
                ranges[f.name] = (declared, field_hint(f))
    return ranges


def check_values(values: Mapping, ranges: Mapping[str, tuple[Range, str | None]]) -> None:
    """Refuse the first value of ``values`` (name -> value) outside its range in ``ranges``."""
    for name, (allowed, hint) in ranges.items():
        if name in values:
            check_value(name, values[name], allowed, hint)


def check_fields(obj) -> None:
    """Refuse a field of the dataclass instance ``obj`` outside its declared range (for
    ``__post_init__``: the dataclass built in code is checked as the command line is)."""
    ranges = declared_ranges([type(obj)])
    check_values({name: getattr(obj, name) for name in ranges}, ranges)


def check_choices(obj) -> None:
    """Refuse a field of the dataclass instance ``obj`` whose value is not one of the ``choices`` its
    metadata declares (argparse refuses them on the command line; this, in a config file or in code)."""
    for f in dataclasses.fields(obj):
        choices = f.metadata.get("choices")
        if choices is not None and getattr(obj, f.name) not in choices:
            raise ValueError(f"--{f.name} must be one of {', '.join(choices)}, got {getattr(obj, f.name)!r}")
