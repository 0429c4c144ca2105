"""The verdict's open question: a run that completed still descending in a line.

A rate far too small and a healthy run stopped early both end with the loss falling as
fast as in their middle third (records/verdict.py, in_a_line). The monitor asks the
question as a finding (STILL_DESCENDING); the policy answers it as a stall, with probes at
higher rates from the same cold start, each a quarter of the run's updates (probes.py).
A probe that reaches the run's own final loss in them learned at least four times as fast:
the rate held the run back, and the best probe is relaunched as for any stall. None does,
and the question is withdrawn: the run was clean, and its end reason says what the probes
showed. Without probes the question cannot be answered, and it is withdrawn unasked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from remedy.state_schema import (
    STILL_DESCENDING,
    Attempt,
    Finding,
    ResultKind,
    RuleStatus,
    State,
)
from remedy.state_schema.transitions import CLEAN_END, end, update_current_attempt
from remedy.strategies.outcomes import classify


def is_question(findings: Sequence[Finding]) -> bool:
    """The findings are the verdict's open question alone."""
    return bool(findings) and all(f.rule_class == STILL_DESCENDING for f in findings)


def answered_by(probe: Attempt, attempt: Attempt) -> bool:
    """The probe, in its few updates, reached the loss the attempt ended at in all of its."""
    goal = attempt.final_window_loss
    result = probe.result
    if goal is None or result is None or result.kind is not ResultKind.trained:
        return False
    return result.loss is not None and math.isfinite(result.loss) and result.loss <= goal


def settle(state: State, probes: Sequence[Attempt], said: str) -> State:
    """After the question's probes (`said`: their summary): the state unchanged when one of
    them reached the run's final loss (the finding stands; the best probe is relaunched),
    else the run ended clean."""
    attempt = state.current_attempt
    if attempt is None or not is_question(state.findings):
        return state
    if any(answered_by(probe, attempt) for probe in probes):
        return state
    goal = attempt.final_window_loss
    bound = max((p.spec.max_updates or 0 for p in probes), default=0)
    return withdraw(
        state,
        f"its loss still fell in a line at its end, and no higher rate learned faster: no "
        f"probe reached its final loss ({goal:.4g}) in {bound} of its {attempt.steps_run} "
        f"updates ({said})",
    )


def withdraw(state: State, why: str) -> State:
    """The question withdrawn: the attempt has no finding and is judged as it ran, and the
    run ends clean, saying why."""
    attempt = state.current_attempt
    if attempt is None:
        return state
    plain = attempt.model_copy(update={"findings": []})
    state = update_current_attempt(state, findings=[], result=classify(plain))
    state = state.model_copy(
        update={"findings": [], "rule_status": RuleStatus.NoIssuesFound, "probes": []}
    )
    return end(state, f"{CLEAN_END}; {why}")
