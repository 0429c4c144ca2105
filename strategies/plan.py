"""Turn the findings of a stopped attempt into the next state: new run_spec or end."""

from __future__ import annotations

from collections.abc import Sequence

from remedy.state_schema import Finding, NextAction, PlannedChange, State
from remedy.state_schema.transitions import end, spec_changes, update_current_attempt
from remedy.strategies.outcomes import classify
from remedy.strategies.policies import get_policy
from remedy.strategies.warm_start import Checkpoint, pick_checkpoint


def plan_next(
    state: State,
    findings: list[Finding] | None = None,
    checkpoints: Sequence[Checkpoint] = (),
) -> State:
    """The next state. `checkpoints` are those the stopped attempt can offer (its own and the
    one it started from); a warm-starting policy relaunches from the last clean one when the
    chosen strategy keeps the weights."""
    findings = state.findings if findings is None else findings
    state = with_result(state, findings)
    policy = get_policy(state.policy)
    if policy.warm_start:
        attempt = state.current_attempt
        policy.clean_checkpoint = pick_checkpoint(
            checkpoints,
            findings,
            state.run_spec.debugger_save_interval,
            start_step=attempt.start_step if attempt else 0,
            skipped=state.run_spec.skip_steps,
        )
    strategy = policy.choose(state, findings)
    if strategy is None:
        return end(state, policy.nothing_left(state, findings))
    before = state.run_spec
    after = strategy.apply(before)
    reason = strategy.reason(before, after)
    if policy.warm_start:
        warm = policy.clean_checkpoint if strategy.keeps_weights() else None
        after = after.model_copy(
            update={
                "init_checkpoint": warm.path if warm else None,
                "start_epoch": warm.epoch if warm else 0,
            }
        )
        if warm is not None:
            reason += f"; warm start from epoch {warm.epoch} (step {warm.step})"
    planned = PlannedChange(
        strategy=strategy.name,
        reason=reason,
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


def with_result(state: State, findings: list[Finding]) -> State:
    """The current attempt classified (diverged at s, stalled, no effect, ...): what the
    policy learns from it. Its findings are the ones being planned for."""
    attempt = state.current_attempt
    if attempt is None:
        return state
    attempt = attempt.model_copy(update={"findings": findings or attempt.findings})
    result = classify(attempt, state.history.attempts[:-1])
    return update_current_attempt(state, findings=attempt.findings, result=result)
