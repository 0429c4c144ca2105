"""The best model a run that did not end clean still trained, so a user who spent its
launches is told which one to keep (or start from) rather than only what failed.

A candidate is a full launch (kind run) whose job ran to its end and whose model trained
by the verdict's measure: its figures judged, its final training loss clearly below the
untrained model's, above chance where the classes are known. A finding on it does not rule
it out (a run still speeding up at its end, a plateau a rule saw at the end: it trained,
the policy only wanted better). Probes do not count: theirs is a model of a few updates.
Ranked by the metric of the run's first success criterion where it states one, else by
test accuracy where the job has classes, else by final training loss (every launch of a
run trains on the same data).
"""

from __future__ import annotations

import math

from remedy.records.verdict import (
    Baseline,
    at_chance,
    chance_bar,
    final_training_loss,
    run_is_clean,
    start_loss,
    test_accuracy,
    unjudged,
    untrained,
)
from remedy.state_schema import Attempt, AttemptKind, JobStatus, State

TRAINING_LOSS = "final training loss"  # the verdict's: the median of the last steps' losses


def trained(attempt: Attempt, start: Baseline | None) -> bool:
    """Ran to its end and its model learned (findings aside)."""
    if attempt.kind is not AttemptKind.run or attempt.outcome is not JobStatus.Completed:
        return False
    if attempt.steps_run <= 0:
        return False
    return not (unjudged(attempt, start) or untrained(attempt, start) or at_chance(attempt))


def yardstick(state: State) -> tuple[str, bool]:
    """(metric, higher is better) the run's models are ranked by: its first success
    criterion's metric, else test accuracy where the job has classes, else the final
    training loss."""
    if criteria := state.run_spec.success_criteria:
        return criteria[0].metric, criteria[0].op in (">", ">=")
    if chance_bar(state.run_spec) is not None:
        return "test:accuracy", True
    return TRAINING_LOSS, False


def figure(attempt: Attempt, metric: str) -> float | None:
    if metric == TRAINING_LOSS:
        value = final_training_loss(attempt)
    elif metric == "test:accuracy":
        value = test_accuracy(attempt)
    else:
        value = attempt.metrics.get(metric)
    return value if value is not None and math.isfinite(value) else None


def best_trained(state: State) -> tuple[int, Attempt] | None:
    """(its number in the attempt table, from 1; the attempt) of the best trained model
    that reported the yardstick's figure, None when no launch trained one."""
    start = start_loss(state)
    metric, higher = yardstick(state)
    found = [
        (value if higher else -value, number, attempt)
        for number, attempt in enumerate(state.history.attempts, start=1)
        if trained(attempt, start) and (value := figure(attempt, metric)) is not None
    ]
    if not found:
        return None
    _, number, attempt = max(found, key=lambda ranked: ranked[0])
    return number, attempt


def best_model(state: State) -> str | None:
    """`attempt #6 (job tab-6), test accuracy 0.954`: the best model a run that ended not
    clean trained; None otherwise (a clean run's model is its last attempt's). The outlets
    show it as "best model trained"."""
    if state.end_reason is None or run_is_clean(state):
        return None
    best = best_trained(state)
    if best is None:
        return None
    number, attempt = best
    metric, _ = yardstick(state)
    name = "test accuracy" if metric == "test:accuracy" else metric
    found = f"; its finding: {attempt.findings[0].rule}" if attempt.findings else ""
    return (
        f"attempt #{number} (job {attempt.job_name}), {name} {figure(attempt, metric):.4g}{found}"
    )
