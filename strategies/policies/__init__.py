from strategies.policies import adaptive, configured, seed  # noqa: F401  (register them)
from strategies.policies.base import POLICIES, Policy, get_policy, register_policy

__all__ = ["POLICIES", "Policy", "get_policy", "register_policy"]
