from strategies.policies import seed  # noqa: F401  (registers the policy)
from strategies.policies.base import POLICIES, Policy, get_policy, register_policy

__all__ = ["POLICIES", "Policy", "get_policy", "register_policy"]
