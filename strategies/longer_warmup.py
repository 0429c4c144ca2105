from __future__ import annotations

from collections.abc import Sequence

from remedy.state_schema import Finding, RunSpec, State
from remedy.strategies.base import Strategy, register_strategy
from remedy.strategies.outcomes import first_finding, onset_update

MAX_EPOCHS = 5


@register_strategy
class LongerWarmup(Strategy):
    """Warm up past where the trouble began: the warmup rate stays in effect through the
    epoch of the finding's onset (when the job's epoch length is known: the built-in job),
    at least one epoch more than before; up to 5, and fewer than the run's epochs when the
    job says how many."""

    name = "longer_warmup"
    changes = ("warmup_epochs",)
    reads = ("num_epochs",)
    explanation = "Warm up for longer before the full learning rate"

    def __init__(self, onset_epoch: int | None = None) -> None:
        self.onset_epoch = onset_epoch  # the epoch (from 0) in which the trouble began

    @classmethod
    def for_state(cls, state: State, findings: Sequence[Finding]) -> LongerWarmup:
        attempt, spec = state.current_attempt, state.run_spec
        per_epoch = spec.steps_per_epoch
        if attempt is None or not per_epoch:
            return cls()
        update = onset_update(attempt, first_finding(attempt))
        return cls(None if update is None else (update - 1) // per_epoch)

    def target(self, spec: RunSpec) -> int:
        longer = spec.role("warmup_epochs") + 1
        return longer if self.onset_epoch is None else max(longer, self.onset_epoch + 1)

    def applies(self, spec: RunSpec) -> bool:
        epochs = spec.role("num_epochs")  # None: a script that does not map it
        bound = MAX_EPOCHS if epochs is None else min(MAX_EPOCHS, epochs - 1)
        return self.target(spec) <= bound

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"warmup_epochs": self.target(spec)})

    def reason(self, before: RunSpec, after: RunSpec) -> str:
        said = super().reason(before, after)
        if self.onset_epoch is None:
            return said
        return f"{said}; the trouble began in epoch {self.onset_epoch}"
