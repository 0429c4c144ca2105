"""Pure bookkeeping on a State shared by the tasks, the CLI and tests.

Each function returns a new State; none launches or reads anything.
"""

from __future__ import annotations

from datetime import UTC, datetime

from remedy.state_schema.models import Attempt, AttemptKind, NextAction, RunSpec, State

JOB_TIME_FORMAT = "%Y-%b-%d-%Hh-%Mm-%S"


def now() -> datetime:
    return datetime.now(UTC)


def new_job_name(state: State, at: datetime | None = None) -> str:
    """base_job_name + launch timestamp, as the original; unique within the run."""
    stamp = (at or now()).strftime(JOB_TIME_FORMAT)
    name = f"{state.run_spec.base_job_name}-{stamp}"
    taken = {attempt.job_name for attempt in state.history.attempts}
    if name in taken:
        name = f"{name}-{state.history.num_retraining + 1}"
    return name


def flat_spec(spec: RunSpec) -> dict[str, object]:
    """A run_spec's JSON fields, with each of a script's flags as "hyperparameters.NAME"."""
    values = spec.model_dump(mode="json")
    flags = values.pop("hyperparameters")
    return values | {f"hyperparameters.{name}": value for name, value in flags.items()}


def spec_changes(before: RunSpec | None, after: RunSpec) -> dict[str, list[object]]:
    """Field -> [before, after] for every field that differs; a script's flag that changed
    is "hyperparameters.NAME" (absent: None)."""
    if before is None:
        return {}
    old, new = flat_spec(before), flat_spec(after)
    keys = [*new, *(key for key in old if key not in new)]
    return {key: [old.get(key), new.get(key)] for key in keys if old.get(key) != new.get(key)}


def begin_attempt(state: State, job_name: str) -> State:
    """Record a launch: the train step counts every launch, the first one included."""
    previous = state.current_attempt
    planned = state.planned_change
    attempt = Attempt(
        job_name=job_name,
        spec=state.run_spec,
        strategy=planned.strategy if planned else None,
        strategy_reason=planned.reason if planned else None,
        changes=spec_changes(previous.spec if previous else None, state.run_spec),
        started_at=now(),
        continues=planned.continue_job if planned else None,
    )
    history = state.history.model_copy(
        update={
            "num_retraining": state.history.num_retraining + 1,
            "latest_job_name": job_name,
            "attempts": [*state.history.attempts, attempt],
        }
    )
    return state.model_copy(
        update={
            "history": history,
            "next_action": NextAction.monitor,
            "job_status": None,
            "rule_status": None,
            "findings": [],
            "planned_change": None,
        }
    )


def update_current_attempt(state: State, **fields: object) -> State:
    """The latest full launch (state.current_attempt) with these fields changed."""
    attempts = list(state.history.attempts)
    runs = [i for i, attempt in enumerate(attempts) if attempt.kind is AttemptKind.run]
    if not runs:
        return state
    # Validate, so values read from files (ISO times, numbers as text) get their types.
    attempts[runs[-1]] = Attempt.model_validate({**attempts[runs[-1]].model_dump(), **fields})
    history = state.history.model_copy(update={"attempts": attempts})
    return state.model_copy(update={"history": history})


# How a clean run's end reason begins (the monitor's, and a withdrawn question's).
CLEAN_END = "completed: the job finished and no rule found an issue"


def end(state: State, reason: str) -> State:
    return state.model_copy(update={"next_action": NextAction.end, "end_reason": reason})


def retraining_budget_spent(state: State) -> bool:
    return state.history.num_retraining >= state.budgets.max_num_retraining
