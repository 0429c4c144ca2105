"""Was this run clean? The one definition every message, report, leaderboard and exit code uses.

An attempt is clean when its job completed, no rule reported an issue on it or could not
judge it (status Error: a rule that read nothing or broke), it ran at least
one update, and its model trained: it meets run_spec.success_criteria (a metric the job did
not report, or whose last value was not finite, is not met), or, when none are given, its
final training loss is finite and clearly below the loss at the start of the run.
A run is clean when its last attempt is.
"""

from __future__ import annotations

import math

from remedy.state_schema import Attempt, JobStatus, State

# "Clearly below": the final loss at least this share of the start loss's size lower.
LOSS_DROP = 0.1


def start_loss(state: State) -> float | None:
    """The loss before any training: the first step of the first attempt that started cold
    (a warm-started attempt begins from an already trained model)."""
    for attempt in state.history.attempts:
        if attempt.start_step == 0 and attempt.initial_loss is not None:
            return attempt.initial_loss
    return None


def attempt_flaw(attempt: Attempt | None, start: float | None = None) -> str | None:
    """Why an attempt is not clean, in a few words; None when it is. start: the run's
    start_loss (default: the attempt's own first loss)."""
    if attempt is None:
        return "no job was launched"
    if attempt.outcome is not JobStatus.Completed:
        return f"the job ended {attempt.outcome.value if attempt.outcome else 'running'}"
    if attempt.findings:
        return f"{attempt.findings[0].rule} reported an issue"
    if attempt.rule_errors:
        # A rule that could not judge (read nothing, broken) leaves the job unwatched.
        error = attempt.rule_errors[0]
        return f"rule {error.rule} could not judge the job: {error.message}"
    if attempt.steps_run <= 0:
        return "the job completed without running a single update"
    if attempt.spec.success_criteria:
        return unmet_criterion(attempt)
    return untrained(attempt, attempt.initial_loss if start is None else start)


def unmet_criterion(attempt: Attempt) -> str | None:
    for criterion in attempt.spec.success_criteria:
        measured = attempt.metrics.get(criterion.metric)
        if measured is None:
            reported = ", ".join(sorted(attempt.metrics)) or "none"
            # A script's printed figure becomes a metric only through a definition.
            defined = {d.name for d in attempt.spec.metric_definitions}
            undefined = not attempt.spec.is_builtin and criterion.metric not in defined
            hint = "; run_spec.metric_definitions has none" if undefined else ""
            return (
                f"success criterion {criterion}: the job reported no {criterion.metric} "
                f"(reported: {reported}{hint})"
            )
        if not criterion.holds(measured):
            return f"success criterion {criterion} not met ({criterion.metric} {measured:.4g})"
    return None


def untrained(attempt: Attempt, start: float | None) -> str | None:
    # Training loss against training loss: a test loss (eval mode, other data) is not
    # comparable with the first step's loss.
    final = attempt.metrics.get("train:loss", attempt.final_loss)
    if start is None or not math.isfinite(start):
        return "no finite loss was reported at the start: cannot tell whether the model trained"
    if final is None or not math.isfinite(final):
        return "no finite final loss was reported: cannot tell whether the model trained"
    if final > start - LOSS_DROP * abs(start):
        return (
            f"the model did not train: final training loss {final:.4g} is not clearly below "
            f"{start:.4g} at the start"
        )
    return None


def attempt_is_clean(attempt: Attempt, start: float | None = None) -> bool:
    return attempt_flaw(attempt, start) is None


def run_flaw(state: State) -> str | None:
    return attempt_flaw(state.current_attempt, start_loss(state))


def run_is_clean(state: State) -> bool:
    return run_flaw(state) is None
