from remedy.strategies.policies import adaptive, configured, seed  # noqa: F401  (register them)
from remedy.strategies.policies.base import (
    POLICIES,
    Policy,
    check_policy_name,
    get_policy,
    register_policy,
)

__all__ = ["POLICIES", "Policy", "check_policy_name", "get_policy", "register_policy"]
