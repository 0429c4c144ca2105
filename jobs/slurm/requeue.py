"""A requeued Slurm job warm-starts from its last checkpoint.

Slurm requeues a job (preemption with PreemptMode=REQUEUE, a failed node, `scontrol
requeue`) by running its batch script again, in the same folder, with SLURM_RESTART_COUNT
set. Before the supervisor starts again, the batch script runs

    python -m remedy.jobs.slurm.requeue JOB_DIR RESTART_COUNT

which sets the previous run's outputs aside (status, progress, result, tensors, rule
statuses, logs: into before-restart-N/), and points the job at the newest checkpoint in
its own checkpoint folder: the built-in job's hyperparameters and a script's resume flag
get it, as a warm start chosen by the planner would (RunSpec.init_checkpoint). A job
without a checkpoint yet starts again from its beginning, saying so.

restart.json records the restart it prepared: the backend knows by it whether the
supervisor's status.json is the current run's or the run Slurm ended.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from remedy.jobs.base import read_checkpoint
from remedy.jobs.local.environment import job_launch
from remedy.jobs.local.launch_record import LaunchRecord, LaunchRecordError
from remedy.jobs.local.layout import JobPaths, read_json
from remedy.jobs.slurm.batch_script import allocation_command
from remedy.state_schema import RunSpec, write_atomic

RUN_SPEC_FILE = "run_spec.json"  # the job's run_spec, written at launch for a restart
RESTART_FILE = "restart.json"  # the restart prepared last: {"restart", "checkpoint", "step"}


def set_aside(paths: JobPaths) -> list[Path]:
    """The previous run's outputs, which the next run writes afresh."""
    return [
        paths.status,
        paths.supervisor_pid,
        paths.progress,
        paths.result,
        paths.metrics,
        paths.log_metrics,
        paths.rule_status,
        paths.tensors,
        paths.training_log,
        paths.evaluator_log,
        paths.supervisor_log,
    ]


def prepared_restart(paths: JobPaths) -> int:
    """The restart whose run the supervisor's files belong to (0: the first run)."""
    return int((read_json(paths.root / RESTART_FILE) or {}).get("restart", 0))


def latest_checkpoint(paths: JobPaths) -> tuple[Path, int] | None:
    """The job's newest whole checkpoint (the most updates) and its step."""
    found = [c for p in paths.checkpoints.glob("*") if p.is_dir() and (c := read_checkpoint(p))]
    if not found:
        return None
    newest = max(found, key=lambda c: (c.step, c.epoch))
    return Path(newest.path), newest.step


def prepare_restart(job_dir: Path, restart: int) -> str:
    """Set the previous run aside and warm-start the job's next run; what was done."""
    paths = JobPaths(job_dir)
    aside = job_dir / f"before-restart-{restart}"
    aside.mkdir(exist_ok=True)
    for path in set_aside(paths):
        if path.exists():
            path.rename(aside / path.name)
    latest = latest_checkpoint(paths)
    if latest is None:
        said = f"Slurm restart {restart}: no checkpoint yet, the job starts from its beginning"
    else:
        checkpoint, step = latest
        warm_start(paths, checkpoint)
        said = f"Slurm restart {restart}: warm start from {checkpoint} (step {step})"
    record = {
        "restart": restart,
        "checkpoint": None if latest is None else str(latest[0]),
        "step": None if latest is None else latest[1],
    }
    write_atomic(job_dir / RESTART_FILE, json.dumps(record))
    return said


def warm_start(paths: JobPaths, checkpoint: Path) -> None:
    """The job's hyperparameters and launch record, as launched, but starting from
    checkpoint (already in its checkpoint folder: nothing is copied)."""
    launched = json.loads((paths.root / RUN_SPEC_FILE).read_text())
    spec = RunSpec.model_validate(launched | {"init_checkpoint": str(checkpoint)})
    record = LaunchRecord.read(paths.job)
    if record is None:
        raise LaunchRecordError(f"{paths.job}: no launch record to warm-start")
    hyperparameters = spec.job_hyperparameters(
        output_dir=str(paths.model), resume=str(paths.checkpoints / checkpoint.name)
    )
    write_atomic(paths.hyperparameters, json.dumps(hyperparameters, indent=2))
    launch = job_launch(spec, record.job_name, paths)
    command = allocation_command(spec, paths, launch.command)  # as SlurmBackend.launch_record
    record.model_copy(update={"command": command, "env": launch.env}).write(paths.job)


def main(argv: list[str]) -> int:
    job_dir, restart = Path(argv[0]), int(argv[1])
    print(f"remedy: {prepare_restart(job_dir, restart)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
