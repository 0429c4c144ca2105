"""A policy picks the next strategy for the findings that ended an attempt.

Policies are registered by name. A user's own Python class is selected with the name
"package.module:ClassName": the module is imported (registering it is optional).
"""

from __future__ import annotations

import importlib
from typing import ClassVar

from remedy.state_schema import Finding, State
from remedy.strategies.base import Strategy
from remedy.strategies.warm_start import Checkpoint

POLICIES: dict[str, type[Policy]] = {}


class Policy:
    name: ClassVar[str]
    description: ClassVar[str] = ""
    # True: when the chosen strategy keeps the weights, the relaunch starts from the last
    # checkpoint taken before the problem began instead of from scratch.
    warm_start: ClassVar[bool] = False

    def __init__(self) -> None:
        # Set by the planner before choose(): the checkpoint a strategy that keeps the
        # weights would start from (None: every strategy starts from scratch).
        self.clean_checkpoint: Checkpoint | None = None

    def choose(self, state: State, findings: list[Finding]) -> Strategy | None:
        """The strategy to apply next, or None when nothing is left to try."""
        raise NotImplementedError

    def nothing_left(self, state: State, findings: list[Finding]) -> str:
        """Why choose() returned None, for the end reason."""
        found = ", ".join(sorted({f.rule for f in findings})) or "no finding"
        return f"policy {self.name!r} has no strategy left for {found}"


def register_policy(cls: type[Policy]) -> type[Policy]:
    if cls.name in POLICIES:
        raise ValueError(f"policy {cls.name!r} is registered twice")
    POLICIES[cls.name] = cls
    return cls


def _import_policy(path: str) -> type[Policy]:
    module_name, _, class_name = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import policy {path!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ValueError(f"{path!r} is not a Policy subclass")
    return cls


def get_policy(name: str) -> Policy:
    if ":" in name:
        return _import_policy(name)()
    try:
        return POLICIES[name]()
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(
            f"unknown policy {name!r}; known: {known} (or package.module:ClassName)"
        ) from None
