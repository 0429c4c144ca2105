"""plan: pick the next strategy for what was found and update run_spec and counters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from prefect import task
from prefect.cache_policies import NO_CACHE

from remedy.decisions.plan import plan_next, with_result
from remedy.jobs import backend_for
from remedy.jobs.base import read_checkpoint
from remedy.records.logs import task_logger
from remedy.state_schema import Checkpoint, NextAction, State
from remedy.state_schema.transitions import retraining_budget_spent, update_current_attempt
from remedy.strategies import POLICIES
from remedy.strategies.outcomes import digest

# The registered policies (each registers itself at import): a dropdown in the run form.
# Known only at run time, so a type checker sees a plain str.
if TYPE_CHECKING:
    PolicyName = str
else:
    PolicyName = Literal[tuple(sorted(POLICIES))]


def available_checkpoints(state: State, run_dir: str) -> list[Checkpoint]:
    """What a stopped attempt can offer a warm start: its own checkpoints and the one it
    began from."""
    attempt = state.current_attempt
    if attempt is None:
        return []
    found = backend_for(attempt.spec.backend, run_dir).checkpoints(attempt.job_name)
    started_from = attempt.spec.init_checkpoint
    if started_from and (checkpoint := read_checkpoint(Path(started_from))):
        found.append(checkpoint)
    return found


def learned(
    state: State, run_dir: str, records: Sequence[Mapping[str, Any]] | None = None
) -> State:
    """The current attempt with what the policy learns from it: its first losses and its
    gradient norms before the finding (from the job's step records, read here unless
    given), and its outcome classified (diverged at s, stalled, trained, no effect)."""
    attempt = state.current_attempt
    if attempt is None:
        return state
    if records is None:
        records = backend_for(attempt.spec.backend, run_dir).metrics(attempt.job_name)
    state = update_current_attempt(state, **digest(attempt, records))
    return with_result(state, state.findings)


@task(cache_policy=NO_CACHE)
def plan(state: State, run_dir: str | None = None, probing: bool = True) -> State:
    """run_dir lets a warm-starting policy see the stopped attempt's checkpoints and learn
    from its step records. With `probing`, the plan may hold probes (state.probes: run
    them with tasks/probe.py) instead of one change."""
    if run_dir:
        state = learned(state, run_dir)
    checkpoints = available_checkpoints(state, run_dir) if run_dir else []
    probing = probing and not retraining_budget_spent(state)  # nothing will be relaunched
    planned = plan_next(state, checkpoints=checkpoints, probing=probing)
    logger = task_logger()
    if planned.next_action is NextAction.end:
        logger.warning("nothing left to try: %s", planned.end_reason)
    elif planned.planned_change:
        logger.info("next: %s", planned.planned_change.reason)
    elif planned.probes:
        logger.info("next: %d probes before the relaunch", len(planned.probes))
    return planned
