"""Was this run clean? The one definition every message, report, leaderboard and exit code uses.

An attempt is clean when its job completed, no rule reported an issue on it, and it trained:
it ran at least one update. A run is clean when its last attempt is.
"""

from __future__ import annotations

from remedy.state_schema import Attempt, JobStatus, State


def attempt_flaw(attempt: Attempt | None) -> str | None:
    """Why an attempt is not clean, in a few words; None when it is."""
    if attempt is None:
        return "no job was launched"
    if attempt.outcome is not JobStatus.Completed:
        return f"the job ended {attempt.outcome.value if attempt.outcome else 'running'}"
    if attempt.findings:
        return f"{attempt.findings[0].rule} reported an issue"
    if attempt.steps_run <= 0:
        return "the job completed without running a single update"
    return None


def attempt_is_clean(attempt: Attempt) -> bool:
    return attempt_flaw(attempt) is None


def run_is_clean(state: State) -> bool:
    return attempt_flaw(state.current_attempt) is None
