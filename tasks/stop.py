"""stop_job: stop the current job (graceful, then forced) and record how it ended."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from remedy.jobs import backend_for
from remedy.state_schema import JobStatus, State
from remedy.state_schema.transitions import update_current_attempt
from remedy.records.logs import task_logger
from remedy.tasks.monitor import record_duration_and_curve


@task(cache_policy=NO_CACHE)
def stop_job(state: State, run_dir: str) -> State:
    job_name = state.history.latest_job_name
    if job_name is None:
        return state
    backend = backend_for(state.run_spec.backend, run_dir)
    backend.stop(job_name)
    description = backend.describe(job_name)
    status = JobStatus(description["TrainingJobStatus"])
    progress = description.get("Progress", {})
    task_logger().info("job %s is %s", job_name, status.value)
    state = update_current_attempt(
        state,
        outcome=status,
        # steps this job ran: a warm-started job's count begins at its checkpoint's step
        steps_run=max(int(progress.get("step", 0)) - int(progress.get("start_step", 0)), 0),
        ended_at=description.get("TrainingEndTime"),
    )
    state = record_duration_and_curve(state)
    return state.model_copy(update={"job_status": status})
