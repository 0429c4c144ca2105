from remedy.state_schema import Finding, State
from remedy.strategies.add_batch_norm import AddBatchNorm
from remedy.strategies.lower_lr import LowerLR
from remedy.strategies.lower_warmup_lr import LowerWarmupLR
from remedy.strategies.policies.base import Decision, Policy, nothing_for, register_policy
from remedy.strategies.warm_start import Checkpoint


@register_policy
class SeedPolicy(Policy):
    """The original ladder, exactly: warmup halvings, then batch norm, then LR x 0.9.

    It ignores which rule fired, as the original did. A step the job does not take (a script
    without a flag for its role) is passed over.
    """

    name = "seed"
    description = "lower warmup LR while warmup/5 >= 1e-3, then add batch norm, then LR x 0.9"
    ladder = (LowerWarmupLR(), AddBatchNorm(), LowerLR())

    def decide(
        self, state: State, findings: list[Finding], clean_checkpoint: Checkpoint | None
    ) -> Decision:
        spec = state.run_spec
        for step in self.ladder:
            if step.understood_by(spec) and step.applies(spec):
                return Decision(step)
        steps = [
            f"{step.name}: {step.not_understood(spec) or 'nothing left to change'}"
            for step in self.ladder
        ]
        return Decision.nothing_left(f"{nothing_for(self, findings)} ({'; '.join(steps)})")
