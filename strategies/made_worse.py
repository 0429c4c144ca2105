"""Undo a change that made the run fail sooner.

Every launch builds on the spec the one before it left, so a change stays once made. When
a launch failed much sooner than the launch before it, from the same start, the change
between them made things worse: the next launch undoes it (the roles that strategy changed
go back to the earlier launch's values) before the policy's next strategy is applied.
The learning rate is left to its bracket (search_lr.py), which already learns from every
rate that failed.

Measured on the built-in chance case (ReLU without batch norm at lr 0.1): a new init ran
75 updates to DyingRelu, SELU after it diverged at update 14. Kept, SELU took the batch
norm launch after it to a divergence at 44 and the run to a 10x cut of its rate: 6
launches, test accuracy 0.884 against its intended run's 0.968. Undone, the batch norm
launch trained at once (5 launches, 266 updates against 280), to 0.768: ReLU with batch
norm at this rate generalises worse on that data (README, "Not reached yet").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remedy.state_schema import RunSpec, State
from remedy.strategies.base import STRATEGIES
from remedy.strategies.outcomes import first_finding, onset_update

SOONER = 0.5  # failed at no more than this share of the earlier launch's updates
RATE_ROLES = frozenset({"learning_rate", "warmup_learning_rate"})  # the bracket's


@dataclass(frozen=True)
class Undo:
    """The roles to set back, and why (the next attempt's reason ends with it)."""

    roles: dict[str, Any]
    why: str
    keeps_weights: bool  # the undone change kept the weights: a warm start still fits

    def apply(self, spec: RunSpec) -> RunSpec:
        return spec.with_roles(self.roles)

    def joined(self, other: Undo) -> Undo:
        """Both set back; where both set a role, the other's value stands (it was
        worked out on the spec this one left)."""
        return Undo(
            self.roles | other.roles,
            f"{self.why}; {other.why}",
            self.keeps_weights and other.keeps_weights,
        )


def made_worse(state: State) -> Undo | None:
    """The change the last launch made, when that launch failed at no more than SOONER of
    the updates the launch before it failed at, both from the same start; None otherwise."""
    runs = state.history.runs
    if len(runs) < 2:
        return None
    last, before = runs[-1], runs[-2]
    cls = STRATEGIES.get(last.strategy or "")
    if cls is None or set(cls.changes) <= RATE_ROLES or last.start_step != before.start_step:
        return None
    now = onset_update(last, first_finding(last))
    then = onset_update(before, first_finding(before))
    if now is None or then is None or now > SOONER * then:
        return None
    roles = {
        role: before.spec.role(role)
        for role in cls.changes
        if before.spec.has_role(role)
        and last.spec.has_role(role)
        and before.spec.role(role) != last.spec.role(role)
    }
    if not roles:
        return None
    back = ", ".join(
        f"{last.spec.role_label(role)} {last.spec.role_as_given(role)} -> "
        f"{before.spec.role_as_given(role)}"
        for role in roles
    )
    why = (
        f"undid {last.strategy}: {back} ({last.job_name} failed at update {now}, "
        f"{before.job_name} before it at {then})"
    )
    return Undo(roles, why, cls.keeps_weights())
