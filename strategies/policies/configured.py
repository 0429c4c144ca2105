"""config: a policy written as configuration in the payload (State.policy_config).

    {"policy": "config",
     "policy_config": {"ExplodingTensor": [{"strategy": "clip_gradients", "max_times": 2},
                                           {"strategy": "add_batch_norm"}],
                       "*": [{"strategy": "lower_lr_10x"}]}}

Per finding (rule name; "*" for any other) the strategies are tried in order, each at most
max_times launches in the run (default 1), skipping ones that cannot apply. policy_config
may also be a path to a JSON file holding that object: it is read once when the payload is
loaded. Relaunches warm-start when the chosen strategy keeps the weights.
"""

from __future__ import annotations

from remedy.state_schema import Finding, State
from remedy.strategies.base import Strategy
from remedy.strategies.policies.base import Policy, register_policy
from remedy.strategies.policies.ladder import Walk, walk

ANY = "*"


@register_policy
class ConfiguredPolicy(Policy):
    name = "config"
    description = "finding -> ordered strategies with limits, from policy_config"
    warm_start = True

    def __init__(self) -> None:
        super().__init__()
        self.last_walks: dict[str, Walk] = {}

    def choose(self, state: State, findings: list[Finding]) -> Strategy | None:
        config = state.policy_config or {}
        self.last_walks = {}
        for finding in findings:
            rungs = config.get(finding.rule, config.get(ANY, []))
            result = walk(state, rungs, findings)
            self.last_walks[finding.rule] = result
            if result.chosen is not None:
                return result.chosen
        return None

    def nothing_left(self, state: State, findings: list[Finding]) -> str:
        if not state.policy_config:
            return "policy 'config' needs policy_config in the payload; none was given"
        parts = [
            f"{rule}: {'; '.join(w.skipped) or 'no strategies configured'}"
            for rule, w in self.last_walks.items()
        ]
        return f"policy 'config' has no strategy left ({' | '.join(parts) or 'no finding'})"
