from remedy.state_schema import Finding, State
from remedy.strategies.add_batch_norm import AddBatchNorm
from remedy.strategies.base import Strategy
from remedy.strategies.lower_lr import LowerLR
from remedy.strategies.lower_warmup_lr import LowerWarmupLR
from remedy.strategies.policies.base import Policy, register_policy


@register_policy
class SeedPolicy(Policy):
    """The original ladder, exactly: warmup halvings, then batch norm, then LR x 0.9.

    It ignores which rule fired, as the original did. A step the job does not take (a script
    without a flag for its role) is passed over.
    """

    name = "seed"
    description = "lower warmup LR while warmup/5 >= 1e-3, then add batch norm, then LR x 0.9"
    ladder = (LowerWarmupLR(), AddBatchNorm(), LowerLR())

    def choose(self, state: State, findings: list[Finding]) -> Strategy | None:
        spec = state.run_spec
        return next((s for s in self.ladder if s.understood_by(spec) and s.applies(spec)), None)

    def nothing_left(self, state: State, findings: list[Finding]) -> str:
        steps = [
            f"{step.name}: {step.not_understood(state.run_spec) or 'nothing left to change'}"
            for step in self.ladder
        ]
        return f"{super().nothing_left(state, findings)} ({'; '.join(steps)})"
