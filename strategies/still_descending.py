"""The verdict's open questions: a run that completed still descending in a line, or with
its gradients still agreeing; and a run held at a quarter of its length whose loss
levelled off early (SETTLED_EARLY, below).

A rate far too small and a healthy run stopped early both end with the loss falling as
fast as in their middle third (records/verdict.py, in_a_line); a rate far too small can
also end with a loss that slows as a converged one's does, its gradients still agreeing
(gradients_agree). The monitor asks the
question as a finding (STILL_DESCENDING); the policy answers it as a stall, with probes at
higher rates from the same cold start, each for a quarter of the run's updates at most
(probes.py, probe_length).
The probes step finer than a stall's (3.2x, 10x, 32x: the run learned, its rate may be near
right). A probe learned faster when it reached the run's own final loss in its updates (at
least four times the pace), or took the loss down FASTER times as far as the run did over
the same first updates (its loss trace): the rate held the run back, and the best probe is
relaunched as for any stall. None did, and the question is withdrawn: the run was clean,
and its end reason says what the probes showed. Without probes the question cannot be
answered, and it is withdrawn unasked.

A run whose loss fell fast and then levelled off by a quarter of its length (records/
asked_early.py, settled_question) is asked the other way (SETTLED_EARLY): probes at lower
rates (3.2x, 10x, 32x below), from the same cold start. A lower rate's first updates are
slower, so only its loss answers: one that reached the run's loss in its few updates
shows the run sat on the noise floor of a rate too high, and the best probe is
relaunched as for any rate too high. None did, and the held run goes on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from remedy.state_schema import (
    QUESTIONS,
    SETTLED_EARLY,
    Attempt,
    Finding,
    NextAction,
    ResultKind,
    RuleStatus,
    State,
)
from remedy.state_schema.transitions import CLEAN_END, end, update_current_attempt
from remedy.strategies.outcomes import classify
from remedy.strategies.probes import held_probes, window_loss
from remedy.strategies.search_lr import held_rate, learning_rate, shown_to_hold

# "Faster": over the same first updates, the probe's drop at least this many times the run's.
FASTER = 1.5


def is_question(findings: Sequence[Finding]) -> bool:
    """The findings are one of the verdict's questions alone (QUESTIONS)."""
    return bool(findings) and all(f.rule_class in QUESTIONS for f in findings)


def is_held(state: State) -> bool:
    """The run's current attempt is asked one of the questions where its job holds (a
    quarter or half its length: Attempt.hold_at) and still running: not to be stopped until it
    is answered."""
    attempt = state.current_attempt
    return (
        attempt is not None
        and attempt.hold_at is not None
        and attempt.outcome is None
        and is_question(state.findings)
    )


def answered_by(
    probe: Attempt, attempt: Attempt, held: float | None = None, beside: Sequence[Attempt] = ()
) -> bool:
    """The probe learned faster than the attempt did: in its few updates it reached the
    loss the attempt ended at in all of its, or, over the same first updates (both from
    the same cold start), took the loss down FASTER times as far as the attempt did.
    A probe that ended on its schedule's ramp at a rate above any the run has seen hold
    (`held`: search_lr.shown_to_hold) is faster on the ramp, its peak still to come (a
    fine-tuning script's 0.5 answered its run at 0.21, went on and diverged there): it
    answers only where a probe `beside` it, above the attempt's rate, is at or under
    `held`, and that one is relaunched in its place (probes.on_its_ramp). A OneCycle
    script at 1/30 of its max_lr, its gradients agreeing at its end, was probed for 25 of
    its ramp's 67 updates: 3.2e-3 reached 1e-3 and a loss of 1.15 where the run had 1.38,
    but answered nothing, and the run was called clean at 0.90 accuracy (0.96 intended)."""
    if not shown_to_hold(probe, held) and not held_beside(beside, attempt, held):
        return False
    result = probe.result
    if result is None or result.kind is not ResultKind.trained or result.loss is None:
        return False
    loss = result.loss
    if not math.isfinite(loss):
        return False
    goal = attempt.final_window_loss
    if goal is not None and loss <= goal:
        return True
    own = own_loss(attempt, probe.steps_run) if probe.start_step == 0 else None
    start, probe_start = attempt.initial_loss, probe.initial_loss  # models before any update
    if own is None or start is None or probe_start is None:
        return False
    return loss < own and probe_start - loss >= FASTER * (start - own)


def held_beside(probes: Sequence[Attempt], attempt: Attempt, held: float | None) -> bool:
    """A probe of `probes` at a rate seen to hold (probes.held_probes) above the
    attempt's: what on_its_ramp relaunches in place of a faster one on its ramp."""
    own = learning_rate(attempt)
    if own is None or held is None:
        return False
    return any(own < rate for rate, _ in held_probes(probes, held))


def own_loss(attempt: Attempt, updates: int) -> float | None:
    """The attempt's loss after its first `updates`, measured as a probe's is (the mean
    of the last few); None where its loss trace is shorter, or it began warm (a probe of
    the question starts cold: its first updates and the attempt's are not alike)."""
    if attempt.start_step != 0 or updates <= 0 or len(attempt.loss_trace) < updates:
        return None
    return window_loss(attempt.loss_trace[:updates])


def settle(state: State, probes: Sequence[Attempt], said: str) -> State:
    """After the question's probes (`said`: their summary): the state unchanged when one of
    them learned faster (answered_by: the finding stands, the best probe is relaunched),
    else the run ended clean."""
    attempt = state.current_attempt
    if attempt is None or not is_question(state.findings):
        return state
    held = held_rate(state.history.attempts)
    if any(answered_by(probe, attempt, held, probes) for probe in probes):
        return state
    goal = attempt.final_window_loss
    bound = max((p.spec.max_updates or 0 for p in probes), default=0)
    asked = state.findings[0]
    within = f"({goal:.4g}) in {bound} of its {attempt.steps_run} updates"
    if asked.rule_class == SETTLED_EARLY:
        unanswered = f"no lower rate reached its loss {within}"
    else:
        unanswered = (
            f"no higher rate learned faster, no probe reached its final loss {within}, nor "
            f"took the loss down {FASTER:g}x as far as it did in them"
        )
    return withdraw(state, f"asked because {asked.message}: {unanswered} ({said})")


def withdraw(state: State, why: str) -> State:
    """The question withdrawn: the attempt has no finding and is judged as it ran, and the
    run ends clean, saying why. An attempt asked at half its length, its job held there
    (is_held), goes on instead: the flow lets its job train on and watches it again, and
    its end is judged when it comes."""
    attempt = state.current_attempt
    if attempt is None:
        return state
    if is_held(state):
        state = update_current_attempt(state, findings=[], result=None)
        return state.model_copy(
            update={
                "findings": [],
                "rule_status": RuleStatus.InProgress,
                "probes": [],
                "next_action": NextAction.monitor,
            }
        )
    plain = attempt.model_copy(update={"findings": []})
    state = update_current_attempt(state, findings=[], result=classify(plain))
    state = state.model_copy(
        update={"findings": [], "rule_status": RuleStatus.NoIssuesFound, "probes": []}
    )
    return end(state, f"{CLEAN_END}; {why}")
