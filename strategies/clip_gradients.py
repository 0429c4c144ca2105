from __future__ import annotations

from collections.abc import Sequence

from remedy.state_schema import Finding, RunSpec, State
from remedy.strategies.base import Strategy, register_strategy

# Without the job's own gradient norms (a job that logs none): clip to 1.0, then tighten by
# 10x once.
FIRST_NORM = 1.0
SMALLEST_NORM = 0.1


@register_strategy
class ClipGradients(Strategy):
    """Clip the total gradient norm at what the job's healthy updates had: the median norm
    of the updates before the finding. It bounds every update without touching the model,
    so a run can warm-start. A threshold far above the healthy norms (1e9 -> 1e8) would
    change nothing; one taken from the run's own data clips exactly the outliers."""

    name = "clip_gradients"
    changes = ("grad_clip_norm",)
    explanation = "Clip the gradient norm so one bad batch cannot blow the weights up"

    def __init__(self, healthy_norm: float | None = None) -> None:
        self.healthy_norm = healthy_norm

    @classmethod
    def for_state(cls, state: State, findings: Sequence[Finding]) -> ClipGradients:
        attempt = state.current_attempt
        norm = attempt.grad_norm_median if attempt is not None else None
        return cls(norm if norm is not None and norm > 0 else None)

    def target(self, spec: RunSpec) -> float | None:
        norm = spec.role("grad_clip_norm")
        if self.healthy_norm is not None:
            # Only a threshold below the current one changes anything.
            return self.healthy_norm if norm is None or norm > self.healthy_norm else None
        if norm is None:
            return FIRST_NORM
        return norm / 10 if norm / 10 >= SMALLEST_NORM else None

    def applies(self, spec: RunSpec) -> bool:
        return self.target(spec) is not None

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles({"grad_clip_norm": self.target(spec)})

    def reason(self, before: RunSpec, after: RunSpec) -> str:
        said = super().reason(before, after)
        if self.healthy_norm is None:
            return said
        return f"{said}; the median gradient norm before the finding was {self.healthy_norm:.3g}"
