"""A loss's hyperparameters, checked and kept: each constructor argument with a rule is checked
against it, in the order the rules are given, before any is kept, so that a loss is never built
with a value its equations do not define; a refusal is one ``ValueError`` naming the argument, what
it must be and the value given.

Example::

    >>> from types import SimpleNamespace
    >>> loss = SimpleNamespace()
    >>> keep_settings(loss, {"temperature": POSITIVE}, temperature=0.05, gather=True)
    >>> loss.temperature, loss.gather
    (0.05, True)
    >>> keep_settings(loss, {"temperature": POSITIVE}, temperature=0.0)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be positive, got 0.0
    >>> keep_settings(loss, {"form": one_of(("paper", "released"))}, form="other")
    Traceback (most recent call last):
    ...
    ValueError: form must be one of paper, released, got 'other'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """What a hyperparameter must be: a value for which ``refuses(value)`` is true is refused as
    "``<name> <requirement>``, got ``<value>``" (the value as ``shown`` writes it), then ``why`` where
    the rule gives a reason; ``name`` replaces the argument's name in the message. (Written as the
    refusal, not as the range: a bound such as ``value <= 0`` lets NaN through, as the losses always
    have; a range that refuses it says so, ``not 0 <= value < 1``.)"""

    refuses: Callable[[object], bool]
    requirement: str
    why: str = ""
    shown: Callable[[object], str] = str
    name: str | None = None


POSITIVE = Rule(lambda value: value <= 0, "must be positive")
NON_NEGATIVE = Rule(lambda value: value < 0, "must not be negative")


def one_of(choices, name: str | None = None) -> Rule:
    """One of the names ``choices`` (the value written as Python writes a string: quoted)."""
    return Rule(lambda value: value not in choices, f"must be one of {', '.join(choices)}", shown=repr, name=name)


def keep_settings(loss, rules: Mapping[str, Rule], **settings) -> None:
    """Check each of ``settings`` that ``rules`` names against its rule (in the rules' order), raising
    ``ValueError`` at the first refused; then keep every one of them as an attribute of ``loss``."""
    for name, rule in rules.items():
        value = settings[name]
        if rule.refuses(value):
            raise ValueError(f"{rule.name or name} {rule.requirement}, got {rule.shown(value)}{rule.why}")
    for name, value in settings.items():
        setattr(loss, name, value)
