"""plan: pick the next strategy for what was found and update run_spec and counters."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from remedy.state_schema import NextAction, State
from remedy.strategies import plan_next
from remedy.tasks.checkpoints import available_checkpoints
from remedy.records.logs import task_logger


@task(cache_policy=NO_CACHE)
def plan(state: State, run_dir: str | None = None) -> State:
    """run_dir lets a warm-starting policy see the stopped attempt's checkpoints."""
    checkpoints = available_checkpoints(state, run_dir) if run_dir else []
    planned = plan_next(state, checkpoints=checkpoints)
    logger = task_logger()
    if planned.next_action is NextAction.end:
        logger.warning("nothing left to try: %s", planned.end_reason)
    elif planned.planned_change:
        logger.info("next: %s", planned.planned_change.reason)
    return planned
