"""Turn the findings of a stopped attempt into the next state: new run_spec or end."""

from __future__ import annotations

from state_schema import Finding, NextAction, PlannedChange, State
from state_schema.transitions import end, spec_changes
from strategies.policies import get_policy


def plan_next(state: State, findings: list[Finding] | None = None) -> State:
    findings = state.findings if findings is None else findings
    policy = get_policy(state.policy)
    strategy = policy.choose(state, findings)
    if strategy is None:
        found = ", ".join(sorted({f.rule for f in findings})) or "no finding"
        return end(state, f"policy {policy.name!r} has no strategy left for {found}")
    before = state.run_spec
    after = strategy.apply(before)
    planned = PlannedChange(
        strategy=strategy.name,
        reason=strategy.reason(before, after),
        changes=spec_changes(before, after),
    )
    state = strategy.bump_counter(state)
    return state.model_copy(
        update={
            "run_spec": after,
            "planned_change": planned,
            "next_action": NextAction.launch_new,
            "findings": findings,
        }
    )
