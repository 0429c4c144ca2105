"""A policy picks the next strategy for the findings that ended an attempt."""

from __future__ import annotations

from typing import ClassVar

from state_schema import Finding, State
from strategies.base import Strategy

POLICIES: dict[str, type[Policy]] = {}


class Policy:
    name: ClassVar[str]
    description: ClassVar[str] = ""

    def choose(self, state: State, findings: list[Finding]) -> Strategy | None:
        """The strategy to apply next, or None when nothing is left to try."""
        raise NotImplementedError


def register_policy(cls: type[Policy]) -> type[Policy]:
    if cls.name in POLICIES:
        raise ValueError(f"policy {cls.name!r} is registered twice")
    POLICIES[cls.name] = cls
    return cls


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown policy {name!r}; known: {known}") from None
