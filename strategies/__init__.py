"""Remediation strategies (one small class per file) and the policies that order them."""

from strategies import add_batch_norm, lower_lr, lower_warmup_lr  # noqa: F401  (register)
from strategies.base import STRATEGIES, Strategy, get_strategy, register_strategy
from strategies.plan import plan_next
from strategies.policies import POLICIES, Policy, get_policy, register_policy

__all__ = [
    "POLICIES",
    "STRATEGIES",
    "Policy",
    "Strategy",
    "get_policy",
    "get_strategy",
    "plan_next",
    "register_policy",
    "register_strategy",
]
