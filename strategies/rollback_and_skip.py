"""Roll back to the last clean checkpoint and skip the batches around a late spike.

What large runs do by hand (PaLM restarted about 100 steps before a loss spike and skipped
200-500 batches around it): the weights are fine up to the spike, so the retry costs only
the steps since the checkpoint, and the data that met the bad state is passed over. The
data order is deterministic, so the skipped steps are exactly the ones around the spike.
"""

from __future__ import annotations

from collections.abc import Sequence

from remedy.state_schema import Finding, RunSpec, State
from remedy.state_schema.hyperparameters import StepWindow
from remedy.strategies.base import Strategy, register_strategy
from remedy.strategies.outcomes import Trouble, trouble
from remedy.strategies.warm_start import update_of

# Findings that see the onset of an instability (the first update of trouble is then known).
ONSET_TROUBLES = (Trouble.divergence, Trouble.spike)


@register_strategy
class RollbackAndSkip(Strategy):
    """skip_steps gains the window [onset - interval, onset + interval] of updates around
    the earliest finding; the planner warm-starts from the last clean checkpoint before it.

    The window comes from the findings and the stopped attempt, which apply() does not see:
    a policy builds it with RollbackAndSkip.for_state(state, findings). Built without them
    (get_strategy) it never applies. A second spike inside a window already skipped does not
    apply either: skipping did not help there, so the policy escalates."""

    name = "rollback_and_skip"
    changes = ("skip_steps",)
    explanation = "Roll back to the last clean checkpoint and skip the batches around the spike"

    def __init__(self, window: StepWindow | None = None) -> None:
        self.window = window

    @classmethod
    def for_state(cls, state: State, findings: Sequence[Finding]) -> RollbackAndSkip:
        spec = state.run_spec
        steps = [
            f.step for f in findings if trouble(f, spec) in ONSET_TROUBLES and f.step is not None
        ]
        attempt = state.current_attempt
        if not steps or attempt is None:
            return cls()
        onset = update_of(min(steps), attempt.start_step, spec.skip_steps)
        interval = spec.debugger_save_interval
        return cls(StepWindow(first=max(onset - interval, 1), last=onset + interval))

    @classmethod
    def missing_roles(cls, spec: RunSpec) -> list[str]:
        # Windows of steps are no command-line flag: a job passes over them itself, or not.
        return super().missing_roles(spec) if spec.job.passes_over_steps else ["skip_steps"]

    def applies(self, spec: RunSpec) -> bool:
        if self.window is None:
            return False
        skipped = spec.role("skip_steps") or []
        return not any(self._overlaps(window) for window in skipped)

    def _overlaps(self, window: StepWindow) -> bool:
        assert self.window is not None
        return window.first <= self.window.last and self.window.first <= window.last

    def apply(self, spec: RunSpec) -> RunSpec:
        assert self.window is not None  # applies() said so
        skipped = sorted([*(spec.role("skip_steps") or []), self.window], key=lambda w: w.first)
        return spec.with_roles({"skip_steps": skipped})

    def reason(self, before: RunSpec, after: RunSpec) -> str:
        assert self.window is not None
        window = f"steps {self.window.first}-{self.window.last}"
        return f"{self.explanation} (skip_steps += {window})"
