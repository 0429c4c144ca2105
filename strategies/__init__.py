"""Remediation strategies (one small class per file) and the policies that order them."""

from __future__ import annotations

import importlib
import pkgutil

from remedy.strategies.base import STRATEGIES, Strategy, get_strategy, register_strategy
from remedy.strategies.policies import (
    POLICIES,
    Decision,
    Policy,
    check_policy_name,
    get_policy,
    register_policy,
)
from remedy.strategies.warm_start import Checkpoint, pick_checkpoint

# Every module in this package is a strategy (one @register_strategy class or a few), except
# these: adding a strategy means adding one file.
_INFRASTRUCTURE = {
    "base",
    "warm_start",
    "outcomes",
    "made_worse",
    "policies",
    "probes",
    "still_descending",
    "rate_ruled_out",
}

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _INFRASTRUCTURE:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "Checkpoint",
    "Decision",
    "POLICIES",
    "STRATEGIES",
    "Policy",
    "Strategy",
    "check_policy_name",
    "get_policy",
    "get_strategy",
    "pick_checkpoint",
    "register_policy",
    "register_strategy",
]
