from remedy.strategies.policies import adaptive, configured, seed  # noqa: F401  (register them)
from remedy.strategies.policies.base import (
    POLICIES,
    Decision,
    Policy,
    check_policy_name,
    get_policy,
    nothing_for,
    register_policy,
)

__all__ = [
    "POLICIES",
    "Decision",
    "Policy",
    "nothing_for",
    "check_policy_name",
    "get_policy",
    "register_policy",
]
