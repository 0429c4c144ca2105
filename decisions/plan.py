"""Turn the findings of a stopped attempt into the next state: new run_spec or end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from remedy.state_schema import Finding, NextAction, PlannedChange, ProbeCandidate, State
from remedy.state_schema.transitions import end, spec_changes, update_current_attempt
from remedy.strategies.base import Strategy
from remedy.strategies.made_worse import Undo
from remedy.strategies.outcomes import classify
from remedy.strategies.policies import Decision, Policy, get_policy, nothing_for
from remedy.strategies.still_descending import is_question, withdraw
from remedy.strategies.warm_start import Checkpoint, pick_checkpoint


def plan_next(
    state: State,
    findings: list[Finding] | None = None,
    checkpoints: Sequence[Checkpoint] = (),
    probing: bool = False,
) -> State:
    """The next state. `checkpoints` are those the stopped attempt can offer (its own and the
    one it started from); a warm-starting policy relaunches from the last clean one when the
    chosen strategy keeps the weights. With `probing` and a policy that offers alternatives
    for its choice (the rate's bracket), the next state holds probes: candidates to try
    briefly, side by side, before the full relaunch (tasks/probe.py picks the best)."""
    findings = state.findings if findings is None else findings
    state = with_result(state, findings)
    policy = get_policy(state.policy)
    clean = None
    if policy.warm_start:
        attempt = state.current_attempt
        clean = pick_checkpoint(
            checkpoints,
            findings,
            state.run_spec.debugger_save_interval,
            start_step=attempt.start_step if attempt else 0,
            skipped=state.run_spec.skip_steps,
        )
    decision = policy.decide(state, findings, clean)
    candidates = decision.probe if probing else ()
    if is_question(findings):  # the verdict's open question: only probes answer it
        if not candidates or probes_left(state) < len(candidates):
            why = unasked(state, decision, probing)
            return withdraw(state, f"not asked whether its rate held it back: {why}")
        return planned_probes(state, candidates, policy, clean, findings, decision.undo)
    if decision.strategy is None:
        return end(state, decision.why_none or nothing_for(policy, findings))
    if len(candidates) > 1 and probes_left(state) >= len(candidates):
        return planned_probes(state, candidates, policy, clean, findings, decision.undo)
    strategy = decision.strategy
    proposed = proposal(state, strategy, policy, clean, decision.undo)
    state = strategy.bump_counter(state)
    return state.model_copy(
        update={
            "run_spec": proposed.pop("run_spec"),
            "planned_change": PlannedChange(**proposed),
            "probes": [],
            "next_action": NextAction.launch_new,
            "findings": findings,
        }
    )


def planned_probes(
    state: State,
    candidates: Sequence[Strategy],
    policy: Policy,
    clean: Checkpoint | None,
    findings: list[Finding],
    undo: Undo | None = None,
) -> State:
    """The next state holds probes: the candidates, to try briefly side by side."""
    probes = [ProbeCandidate(**proposal(state, c, policy, clean, undo)) for c in candidates]
    return state.model_copy(
        update={
            "probes": probes,
            "planned_change": None,
            "next_action": NextAction.launch_new,
            "findings": findings,
        }
    )


def proposal(
    state: State,
    strategy: Strategy,
    policy: Policy,
    clean: Checkpoint | None,
    undo: Undo | None = None,
) -> dict[str, Any]:
    """What applying the strategy makes of the run_spec (after `undo`, when the policy sets
    a change back): the new spec (warm-started from the clean checkpoint when the policy
    warm-starts and both keep the weights), why, and what changed."""
    before = state.run_spec
    base = undo.apply(before) if undo else before
    after = strategy.apply(base)
    reason = strategy.reason(base, after)
    if undo is not None:
        reason += f"; {undo.why}"
    if policy.warm_start:
        fits = strategy.keeps_weights() and (undo is None or undo.keeps_weights)
        warm = clean if fits else None
        after = after.model_copy(
            update={
                "init_checkpoint": warm.path if warm else None,
                "start_epoch": warm.epoch if warm else 0,
            }
        )
        if warm is not None:
            reason += f"; warm start from epoch {warm.epoch} (step {warm.step})"
    return {
        "strategy": strategy.name,
        "reason": reason,
        "changes": spec_changes(before, after),
        "run_spec": after,
    }


def unasked(state: State, decision: Decision, probing: bool) -> str:
    """Why the verdict's question gets no probes."""
    if decision.strategy is None:
        return decision.why_none or f"policy '{state.policy}' has nothing to try"
    if not probing:
        return "no launch is left to act on the answer (budgets.max_num_retraining)"
    if not decision.probe:
        return f"policy '{state.policy}' does not probe"
    return f"too few probes are left (budgets.max_num_probes {state.budgets.max_num_probes})"


def probes_left(state: State) -> int:
    if state.budgets.probe_steps <= 0:
        return 0
    used = len(state.history.attempts) - len(state.history.runs)
    return state.budgets.max_num_probes - used


def with_result(state: State, findings: list[Finding]) -> State:
    """The current attempt classified (diverged at s, stalled, no effect, ...): what the
    policy learns from it. Its findings are the ones being planned for."""
    attempt = state.current_attempt
    if attempt is None:
        return state
    attempt = attempt.model_copy(update={"findings": findings or attempt.findings})
    result = classify(attempt, state.history.runs[:-1])
    return update_current_attempt(state, findings=attempt.findings, result=result)
