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
from remedy.strategies.policies.base import Decision, Policy, register_policy
from remedy.strategies.policies.ladder import Walk, walk
from remedy.strategies.warm_start import Checkpoint

ANY = "*"


@register_policy
class ConfiguredPolicy(Policy):
    name = "config"
    description = "finding -> ordered strategies with limits, from policy_config"
    warm_start = True

    def decide(
        self, state: State, findings: list[Finding], clean_checkpoint: Checkpoint | None
    ) -> Decision:
        config = state.policy_config or {}
        if not config:
            return Decision.nothing_left(
                "policy 'config' needs policy_config in the payload; none was given"
            )
        walks: dict[str, Walk] = {}
        for finding in findings:
            rungs = config.get(finding.rule, config.get(ANY, []))
            walks[finding.rule] = result = walk(state, rungs, findings)
            if result.chosen is not None:
                return Decision(result.chosen)
        parts = [
            f"{rule}: {'; '.join(w.skipped) or 'no strategies configured'}"
            for rule, w in walks.items()
        ]
        return Decision.nothing_left(
            f"policy 'config' has no strategy left ({' | '.join(parts) or 'no finding'})"
        )
