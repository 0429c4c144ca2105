"""Rule registry: name -> class. Rule files register themselves with @register_rule."""

from __future__ import annotations

from typing import TypeVar

from debugger.rules.base import Rule

R = TypeVar("R", bound=type[Rule])

RULES: dict[str, type[Rule]] = {}


def register_rule(cls: R) -> R:
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no `name`; set it to the rule's registry key")
    existing = RULES.get(cls.name)
    if existing is not None and existing is not cls:
        raise ValueError(f"rule name {cls.name!r} is already taken by {existing.__qualname__}")
    RULES[cls.name] = cls
    return cls


def get_rule(name: str) -> type[Rule]:
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"unknown rule {name!r}; known rules: {sorted(RULES)}") from None
