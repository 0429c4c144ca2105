"""Rules over a trial. Every module in this package is imported here, so that adding a rule
means adding one file with a @register_rule class."""

from __future__ import annotations

import importlib
import pkgutil

from remedy.debugger.rules.base import Finding, Rule
from remedy.debugger.rules.registry import (
    RULES,
    get_rule,
    load_rule_file,
    reads_the_loss,
    register_rule,
)

_INFRASTRUCTURE = {"base", "registry", "reads", "progress", "robust"}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _INFRASTRUCTURE:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "RULES",
    "Finding",
    "Rule",
    "get_rule",
    "load_rule_file",
    "reads_the_loss",
    "register_rule",
]
