"""The slurm backend on a real one-node Slurm cluster (tests/slurm_cluster.py): sbatch,
scontrol, squeue and scancel as they are, nothing of Slurm mocked."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.jobs import backend_for, is_infrastructure_failure, known_backends
from remedy.jobs.local.layout import JobPaths
from remedy.jobs.slurm import SlurmBackend
from remedy.jobs.slurm.batch_script import batch_script
from remedy.jobs.slurm.checks import SlurmSpecError, check_slurm_spec
from remedy.jobs.slurm.controller import SlurmJob
from remedy.jobs.slurm.requeue import RUN_SPEC_FILE, prepare_restart
from remedy.outlets.report import run_figures, summary_lines
from remedy.state_schema import (
    JobStatus,
    NextAction,
    RunSpec,
    State,
    exploding_tensor_rule,
    load_state,
)
from remedy.training.checkpoint import save_checkpoint, step_checkpoint_name
from tests.flows.specs import tiny_spec
from tests.helpers.cli import remedy, start_remedy, wait_for, write_spec
from tests.slurm_cluster import SlurmCluster

FAST = RemediateSettings(poll_interval_s=0.5)


def gated(**fields: object) -> RunSpec:
    """A job that trains until <run_dir>/release exists, or a stop request arrives."""
    base = {"entry_point": "tests.jobs.entry_points.gated", "rules": [], "backend": "slurm"}
    return RunSpec.model_validate(base | fields)


def training(backend: SlurmBackend, job: str) -> bool:
    return (backend.paths(job).progress).exists()


def slurm_state(cluster: SlurmCluster, job_id: str) -> str:
    line = cluster.run("scontrol", "show", "job", "--oneliner", job_id)
    return line.split("JobState=")[1].split()[0]


def jobs_named(cluster: SlurmCluster, name: str) -> list[str]:
    return cluster.run("squeue", "-h", "--states=all", f"--name={name}", "-o", "%i").split()


# --- the spec ----------------------------------------------------------------------------


def test_run_spec_backend_takes_every_registered_backend() -> None:
    for name in known_backends():
        assert RunSpec(backend=name).backend == name


def test_the_flow_takes_a_slurm_run_spec_and_other_specs_stay_as_they_were() -> None:
    parameters = {"run_spec": {"backend": "slurm", "slurm": {"gpus_per_node": 2}}}
    run_spec = remediate.validate_parameters(parameters)["run_spec"]
    assert run_spec.slurm is not None and run_spec.slurm.gpus_per_node == 2
    assert "slurm" not in RunSpec().model_dump(mode="json")  # absent unless given


def test_slurm_fields_are_checked_naming_the_field() -> None:
    with pytest.raises(ValidationError, match=r"slurm\.time_limit"):
        RunSpec(backend="slurm", slurm={"time_limit": "an hour"})
    with pytest.raises(ValidationError, match=r"slurm\.mem_per_task"):
        RunSpec(backend="slurm", slurm={"mem_per_task": "lots"})
    with pytest.raises(ValidationError, match=r"--output is set by the slurm backend"):
        RunSpec(backend="slurm", slurm={"extra_sbatch_args": ["--output=x.log"]})
    with pytest.raises(SlurmSpecError, match=r"run_spec\.slurm\.nodes: 2 nodes need"):
        check_slurm_spec(RunSpec(backend="slurm", slurm={"nodes": 2}))
    with pytest.raises(SlurmSpecError, match=r"run_spec\.local\.gpus_per_job"):
        check_slurm_spec(RunSpec(backend="slurm", local={"gpus_per_job": 1}))
    with pytest.raises(SlurmSpecError, match=r"run_spec\.slurm\.shared_dir: no folder"):
        check_slurm_spec(RunSpec(backend="slurm", slurm={"shared_dir": "/no/such/folder"}))


def test_the_cluster_refuses_an_allocation_before_launch(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """sbatch --test-only: the controller judges the allocation, nothing is submitted."""
    with pytest.raises(SlurmSpecError, match=r"run_spec\.slurm: .*--partition=gpu-nowhere"):
        check_slurm_spec(RunSpec(backend="slurm", slurm={"partition": "gpu-nowhere"}))
    too_many = slurm_cluster.cpus + 64
    with pytest.raises(SlurmSpecError, match=rf"--cpus-per-task={too_many}"):
        check_slurm_spec(RunSpec(backend="slurm", slurm={"cpus_per_task": too_many}))
    # GPUs this node lacks (it has no gres), either way of asking: refused, nothing runs
    for request in ("gpus-per-node", "gres"):
        spec = RunSpec(backend="slurm", slurm={"gpus_per_node": 1, "gpu_request": request})
        with pytest.raises(SlurmSpecError, match=r"run_spec\.slurm: .*gpu.*Invalid generic"):
            check_slurm_spec(spec)
    with pytest.raises(ValueError, match=r"run_spec\.slurm: .*Invalid generic resource"):
        SlurmBackend(tmp_path / "run").launch("gpus", gated(slurm={"gpus_per_node": 1}))
    assert not (tmp_path / "run" / "jobs" / "gpus" / "job.json").exists()
    check_slurm_spec(RunSpec(backend="slurm", slurm={"cpus_per_task": 1, "time_limit": "10"}))
    assert slurm_cluster.run("squeue", "-h", "--states=all").strip() == ""  # none submitted


def test_a_multi_node_job_runs_torchrun_on_every_node_with_a_rendezvous(tmp_path: Path) -> None:
    spec = RunSpec(
        backend="slurm",
        entry_point="train.py",
        source_dir=str(tmp_path),
        hyperparameters={"lr": 0.1},
        distribution={"torch_distributed": {"enabled": True, "processes_per_host": 4}},
        slurm={"nodes": 2, "gpus_per_node": 4, "gpu_request": "gres", "partition": "a100",
               "time_limit": "1-00:00:00", "extra_sbatch_args": ["--exclusive"]},
    )  # fmt: skip
    backend = SlurmBackend(tmp_path / "run")
    paths = JobPaths(tmp_path / "run" / "jobs" / "j")
    script = batch_script("j", spec, paths)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:4",
                 "#SBATCH --partition=a100", "#SBATCH --time=1-00:00:00", "#SBATCH --exclusive",
                 "#SBATCH --requeue", "#SBATCH --job-name=j"):  # fmt: skip
        assert line in script.splitlines()
    assert 'export REMEDY_RDZV_HOST="$(scontrol show hostnames "$SLURM_JOB_NODELIST"' in script
    assert script.rstrip().splitlines()[-1].endswith(f"remedy.jobs.local.supervisor {paths.root}")
    command = backend.launch_record("j", spec, paths).command
    assert command[:4] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    torchrun = command[6]
    for part in ("-m torch.distributed.run", "--nnodes=2", "--nproc-per-node=4",
                 "--rdzv-backend=c10d", '--rdzv-endpoint="$REMEDY_RDZV_HOST:29400"',
                 f"--log-dir={paths.logs / 'torchrun'}"):  # fmt: skip
        assert part in torchrun
    assert command[8:] == ["-m", "remedy.training.launch", "train.py", "--lr", "0.1"]
    # bash expands the rendezvous where the job runs: the line is valid bash
    assert subprocess.run(["bash", "-n", "-c", torchrun]).returncode == 0


def test_slurm_ends_map_to_failure_reasons() -> None:
    """The ends only Slurm sees, as the controller reports them."""
    backend = SlurmBackend("/nonexistent")
    paths = JobPaths(Path("/nonexistent"))
    reasons = {}
    for state in ("TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"):
        job = SlurmJob("7", state, None, None, None, None, "0:15")
        end = backend.slurm_end(job, JobStatus.Stopped, stopping=False, paths=paths)
        assert end["status"] is JobStatus.Failed and state in end["failure_reason"]
        reasons[state] = is_infrastructure_failure(end["failure_reason"])
    # a failed node or preemption is relaunched unchanged; a time or memory limit is not
    assert reasons == {"TIMEOUT": False, "NODE_FAIL": True, "PREEMPTED": True,
                       "OUT_OF_MEMORY": False}  # fmt: skip


def test_a_requeued_script_gets_its_newest_checkpoint_and_the_last_run_is_set_aside(
    tmp_path: Path,
) -> None:
    """What the batch script runs on SLURM_RESTART_COUNT (requeue.py), on a job folder as
    launch() writes it, with real checkpoints of a tiny model."""
    spec = RunSpec.model_validate(
        {"backend": "slurm", "entry_point": "train.py", "hyperparameters": {"lr": 0.1},
         "hyperparameter_roles": {"resume": "resume"}}
    )  # fmt: skip
    paths = JobPaths(tmp_path / "jobs" / "j")
    paths.root.mkdir(parents=True)
    (paths.root / RUN_SPEC_FILE).write_text(spec.model_dump_json())
    SlurmBackend(tmp_path).write_job("j", spec, paths)
    assert "--resume" not in json.loads(paths.job.read_text())["command"]

    said = prepare_restart(paths.root, 1)  # killed before its first checkpoint
    assert said == "Slurm restart 1: no checkpoint yet, the job starts from its beginning"
    assert "--resume" not in json.loads(paths.job.read_text())["command"]

    paths.status.write_text('{"TrainingJobStatus": "Stopped"}')  # the run Slurm ended
    paths.training_log.write_text("step 8\n")
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in (4, 8):
        save_checkpoint(paths.checkpoints, model, optimizer, epoch=0, step=step,
                        name=step_checkpoint_name(step))  # fmt: skip
    said = prepare_restart(paths.root, 2)
    newest = paths.checkpoints / step_checkpoint_name(8)
    assert said == f"Slurm restart 2: warm start from {newest.resolve()} (step 8)"
    record = json.loads(paths.job.read_text())
    assert record["command"][-2:] == ["--resume", str(newest)]
    assert json.loads(record["env"]["SM_HPS"])["resume"] == str(newest)
    assert json.loads(paths.hyperparameters.read_text())["resume"] == str(newest)
    assert not paths.status.exists() and not paths.training_log.exists()
    aside = paths.root / "before-restart-2"
    assert (aside / "status.json").exists() and (aside / "training.log").read_text() == "step 8\n"
    assert json.loads((paths.root / "restart.json").read_text()) == {
        "restart": 2, "checkpoint": str(newest.resolve()), "step": 8
    }  # fmt: skip


# --- on the cluster ------------------------------------------------------------------------


def test_a_job_left_pending_shows_why_and_is_cancelled_on_stop(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    blocker = slurm_cluster.run(
        "sbatch", "--parsable", "--exclusive", f"--output={tmp_path}/blocker.out",
        "--wrap=sleep 300",
    ).strip()  # fmt: skip
    try:
        wait_for(lambda: slurm_state(slurm_cluster, blocker) == "RUNNING", timeout=60)
        backend = SlurmBackend(tmp_path / "run")
        backend.launch("waits", gated())
        snapshot = backend.describe("waits")
        assert snapshot.status is JobStatus.InProgress and snapshot.secondary_status == "Pending"
        assert snapshot.backend_job_id is not None
        assert f"pending in Slurm's queue (Resources), job {snapshot.backend_job_id}" in (
            snapshot.status_message or ""
        )
        assert "scontrol" not in (snapshot.status_message or "")  # resources free it by themselves
        slurm_cluster.run("scontrol", "hold", snapshot.backend_job_id)  # only a person frees it
        held = backend.describe("waits").status_message or ""
        assert f"held until released: `scontrol release {snapshot.backend_job_id}`" in held, held
        backend.stop("waits")
        stopped = backend.describe("waits")
        assert stopped.status is JobStatus.Stopped and stopped.failure_reason is None
        assert slurm_state(slurm_cluster, snapshot.backend_job_id) == "CANCELLED"
        assert stopped.progress is None  # it never ran
    finally:
        slurm_cluster.run("scancel", blocker)


def test_stop_request_then_scancel_after_the_grace(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A job deaf to the stop file and to SIGTERM (its supervisor would wait kill_after_s
    before SIGKILL): stop_grace_s after the stop request the backend cancels it, and Slurm
    kills what is left after its KillWait. Its Slurm job id is the one recorded."""
    backend = SlurmBackend(tmp_path / "run")
    spec = gated(entry_point="tests.jobs.entry_points.stubborn", stop_grace_s=1.0,
                 kill_after_s=600.0)  # fmt: skip
    backend.launch("stubborn", spec)
    backend.launch("stubborn", spec)  # a second launch of the name submits nothing
    assert len(jobs_named(slurm_cluster, "stubborn")) == 1
    wait_for(lambda: backend.describe("stubborn").secondary_status == "Training", timeout=120)
    job_id = backend.describe("stubborn").backend_job_id
    assert job_id == jobs_named(slurm_cluster, "stubborn")[0]
    backend.stop("stubborn")
    snapshot = backend.describe("stubborn")
    assert snapshot.status is JobStatus.Stopped and snapshot.failure_reason is None
    wait_for(lambda: slurm_state(slurm_cluster, job_id) == "CANCELLED", timeout=60)
    logs = backend.logs("stubborn")
    assert f"slurm-{job_id}.out <==" in logs and f"JOB {job_id} ON" in logs
    assert "CANCELLED" in logs  # Slurm's own line in the job's output file


def test_a_launch_cut_after_sbatch_adopts_its_job_on_a_shared_folder(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The job's folder under slurm.shared_dir, its pointer in the run folder; a launch
    that died between sbatch and recording the id finds its job by name next time."""
    shared = tmp_path / "shared"
    shared.mkdir()
    backend = SlurmBackend(tmp_path / "run")
    spec = gated(slurm={"shared_dir": str(shared)})
    backend.launch("cut", spec)
    pointer = backend.pointer("cut")
    recorded = json.loads(pointer.read_text())
    assert recorded["job_dir"] == str(shared / "run" / "cut")
    assert (shared / "run" / "cut" / "job.sbatch").exists() and backend.exists("cut")
    pointer.write_text(json.dumps(recorded | {"job_id": None}))  # as if cut right after sbatch
    backend.launch("cut", spec)
    assert jobs_named(slurm_cluster, "cut") == [recorded["job_id"]]  # not submitted again
    assert json.loads(pointer.read_text())["job_id"] == recorded["job_id"]
    wait_for(lambda: training(backend, "cut"), timeout=120)
    assert (shared / "run" / "cut" / "progress.json").exists()
    backend.stop("cut")  # the gated job honours the stop file: no scancel needed
    assert backend.describe("cut").status is JobStatus.Stopped


@pytest.mark.slow
def test_a_job_cancelled_outside_remedy_ends_the_flow_saying_so(
    slurm_cluster: SlurmCluster, prefect_api_url: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    spec = write_spec(tmp_path / "spec.json", gated())
    flow = start_remedy(
        "run", str(spec), "--run-dir", str(run_dir), "--poll-interval", "0.3",
        api_url=prefect_api_url,
    )  # fmt: skip
    backend = SlurmBackend(run_dir)
    state_file = run_dir / "state.json"
    wait_for(lambda: state_file.exists() and load_state(state_file).history.latest_job_name)
    job = load_state(state_file).history.latest_job_name
    wait_for(lambda: training(backend, job), timeout=120)
    job_id = backend.describe(job).backend_job_id
    slurm_cluster.run("scancel", job_id)  # by hand, as a user or an administrator would
    output, _ = flow.communicate(timeout=180)
    final = load_state(state_file)
    attempt = final.history.attempts[-1]
    assert attempt.outcome is JobStatus.Stopped, output
    assert f"Slurm job {job_id} was cancelled outside remedy" in (attempt.failure_reason or "")
    assert final.next_action is NextAction.end and len(final.history.attempts) == 1
    assert "stopped outside the flow" in (final.end_reason or "")


@pytest.mark.slow
def test_resume_after_sigkill_adopts_the_running_job(
    slurm_cluster: SlurmCluster, prefect_api_url: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    spec = write_spec(tmp_path / "spec.json", gated())
    command = ["--run-dir", str(run_dir), "--poll-interval", "0.3"]
    flow = start_remedy("run", str(spec), *command, api_url=prefect_api_url)
    backend = SlurmBackend(run_dir)
    state_file = run_dir / "state.json"
    wait_for(lambda: state_file.exists() and load_state(state_file).history.latest_job_name)
    job = load_state(state_file).history.latest_job_name
    wait_for(lambda: training(backend, job), timeout=120)
    flow.send_signal(signal.SIGKILL)  # no handler runs: the job is left to Slurm
    flow.wait()
    job_id = backend.describe(job).backend_job_id
    assert slurm_state(slurm_cluster, job_id) == "RUNNING"

    resumed = start_remedy("resume", str(run_dir), *command[2:], api_url=prefect_api_url)
    time.sleep(3)  # the resumed flow looks at the job before it is released
    (run_dir / "release").touch()
    output, _ = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, output
    assert jobs_named(slurm_cluster, job) == [job_id]  # adopted, never submitted twice
    final = load_state(state_file)
    assert [a.job_name for a in final.history.attempts] == [job]
    assert final.history.attempts[0].outcome is JobStatus.Completed, output
    assert slurm_state(slurm_cluster, job_id) == "COMPLETED"
    attempt = final.history.attempts[0]
    assert attempt.backend_job_id == job_id and attempt.queue_wait_s is not None
    status = remedy("status", str(run_dir))
    assert f"attempt 1: job id {job_id}; queue wait {attempt.queue_wait_s:.0f} s; run time" in (
        status.stdout
    )
    logs = remedy("logs", str(run_dir))
    assert f"slurm-{job_id}.out <==" in logs.stdout and "training.log <==" in logs.stdout


@pytest.mark.slow
def test_real_explosion_under_slurm_is_stopped_repaired_and_completed(
    slurm_cluster: SlurmCluster, prefect_api_url: str, tmp_path: Path
) -> None:
    """The seed's exploding ResNet, each attempt a Slurm job: the rule finds the NaN
    gradients, the job is stopped (stop request, scancel after a grace of 0), batch norm
    is added and the second job completes."""
    spec = tiny_spec(
        warmup_learning_rate=0.003125, nan_guard="off", rules=[exploding_tensor_rule()],
        backend="slurm", stop_grace_s=0.0,
    )  # fmt: skip
    state = State(run_spec=spec, policy="seed")
    final = remediate(state=state, run_dir=str(tmp_path), settings=FAST)
    first, second = final.history.attempts
    assert first.findings[0].rule == "ExplodingTensor" and first.outcome is JobStatus.Stopped
    assert first.steps_run < 64
    assert second.changes == {"add_batch_norm": [0, 1]}
    assert second.outcome is JobStatus.Completed and second.final_accuracy is not None
    assert final.job_status is JobStatus.Completed and final.next_action is NextAction.end
    backend = backend_for("slurm", tmp_path)
    ids = [backend.describe(a.job_name).backend_job_id for a in (first, second)]
    assert ids[0] != ids[1] and all(ids)
    assert slurm_state(slurm_cluster, ids[1]) == "COMPLETED"
    # the first job ended by the rule's stop request or by scancel: never by itself
    assert slurm_state(slurm_cluster, ids[0]) in ("COMPLETED", "CANCELLED")
    assert (
        json.loads((tmp_path / "jobs" / first.job_name / "slurm.json").read_text())["job_id"]
        == ids[0]
    )


def release_requeued(cluster: SlurmCluster, job_id: str) -> None:
    """Slurm holds a requeued job back (BeginTime, about two minutes); an administrator's
    `scontrol update StartTime=now` lets it run again at once, once the node's slurmd has
    let go of the run Slurm ended (a copy launched while it has not is refused, and held)."""
    wait_for(lambda: slurm_state(cluster, job_id) == "PENDING", timeout=60)
    wait_for(lambda: not job_steps_on_node(cluster, job_id), timeout=60)
    # slurmd revoked the killed run's credential; it kills a relaunch whose new credential
    # was made in the same second ("Job credential revoked": its times are whole seconds).
    time.sleep(1.1)
    cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")


def relaunch_if_refused(cluster: SlurmCluster, job_id: str, refused: list[str]) -> bool:
    """What an administrator does when the node's slurmd refused the requeued job because it
    had not yet let go of the killed run (it answers "Duplicate jobid" until its cleanup of
    that run ends, a moment after its last step is gone): the node is drained and the job
    held (a requeue more, noted in `refused`), so resume the one and release the other.
    Returns False: the caller keeps waiting."""
    line = cluster.run("scontrol", "show", "job", "--oneliner", job_id)
    if "Reason=launch_failed_requeued_held" in line:
        refused.append(line)
        with contextlib.suppress(subprocess.CalledProcessError):  # not drained after all
            cluster.run("scontrol", "update", f"NodeName={cluster.node}", "State=RESUME")
        cluster.run("scontrol", "release", job_id)
        with contextlib.suppress(subprocess.CalledProcessError):  # no hold of time left
            cluster.run("scontrol", "update", f"JobId={job_id}", "StartTime=now")
    return False


def job_steps_on_node(cluster: SlurmCluster, job_id: str) -> bool:
    """Whether the node still runs a step of the job (`scontrol listpids` asks its stepds)."""
    try:
        lines = cluster.run("scontrol", "listpids", job_id).strip().splitlines()
    except subprocess.CalledProcessError:
        return False  # no step of it here
    return len(lines) > 1  # beyond the header


@pytest.mark.slow
def test_a_requeued_job_goes_on_from_its_last_checkpoint(
    slurm_cluster: SlurmCluster, prefect_api_url: str, tmp_path: Path
) -> None:
    """`scontrol requeue` mid-run (what Slurm does to a job preempted with PreemptMode=
    REQUEUE): the same Slurm job runs again, warm-started from the newest checkpoint the
    built-in job wrote, and completes; the flow watches the one job, never submits it
    again, and the attempt says it was requeued."""
    spec = tiny_spec(
        backend="slurm", rules=[], add_batch_norm=1, num_epochs=20,
        checkpoint_every_steps=4,
    )  # fmt: skip
    run_dir = tmp_path / "run"
    flow = start_remedy(
        "run", str(write_spec(tmp_path / "spec.json", spec)), "--run-dir", str(run_dir),
        "--poll-interval", "0.3", api_url=prefect_api_url,
    )  # fmt: skip
    backend = SlurmBackend(run_dir)
    state_file = run_dir / "state.json"
    wait_for(lambda: state_file.exists() and load_state(state_file).history.latest_job_name)
    job = load_state(state_file).history.latest_job_name
    wait_for(lambda: any(c.step > 0 for c in backend.checkpoints(job)), timeout=120)
    job_id = backend.describe(job).backend_job_id
    slurm_cluster.run("scontrol", "requeue", job_id)
    release_requeued(slurm_cluster, job_id)
    output, _ = flow.communicate(timeout=240)
    assert flow.returncode == 0, output

    final = load_state(state_file)
    assert [a.job_name for a in final.history.attempts] == [job], output
    attempt = final.history.attempts[0]
    assert attempt.outcome is JobStatus.Completed, output
    assert attempt.requeues == 1 and attempt.backend_job_id == job_id
    assert attempt.start_step > 0  # the requeued run went on from a checkpoint
    assert attempt.start_step + attempt.steps_run == 20 * 8  # and trained to the end
    assert jobs_named(slurm_cluster, job) == [job_id]  # never submitted twice
    assert slurm_state(slurm_cluster, job_id) == "COMPLETED"
    restart = json.loads((backend.paths(job).root / "restart.json").read_text())
    assert restart["restart"] == 1 and restart["step"] == attempt.start_step
    logs = backend.logs(job, tail=400)
    assert f"Slurm restart 1: warm start from {restart['checkpoint']}" in logs
    assert f"warm start from {restart['checkpoint']}: epoch" in logs  # the job's own word
    status = remedy("status", str(run_dir))
    assert "requeued 1x, each from its last checkpoint" in status.stdout
    report = summary_lines(run_figures(run_dir))
    assert "- requeued by the scheduler 1x, each time going on from the job's last checkpoint" in (
        report
    )


@pytest.mark.slow
def test_a_node_failure_requeues_the_job_and_it_goes_on_from_its_checkpoint(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The node taken DOWN mid-run, as Slurm does to a node that stops answering: Slurm
    kills the job (NODE FAILURE) and requeues it; the node returns to service (as an
    administrator returns it: waiting for the controller's next ping of the node would make
    the test's length depend on the machine's load) and the job goes on from its newest
    checkpoint to the end, under its one Slurm job id."""
    backend = SlurmBackend(tmp_path / "run")
    spec = tiny_spec(
        backend="slurm", rules=[], add_batch_norm=1, num_epochs=20, checkpoint_every_steps=4
    )
    backend.launch("nodefail", spec)
    wait_for(lambda: any(c.step > 0 for c in backend.checkpoints("nodefail")), timeout=120)
    job_id = backend.describe("nodefail").backend_job_id
    assert job_id is not None
    refused: list[str] = []  # relaunches the node's slurmd refused: each a requeue more
    try:
        slurm_cluster.run("scontrol", "update", f"NodeName={slurm_cluster.node}", "State=DOWN",
                          "Reason=remedy-test")  # fmt: skip
        release_requeued(slurm_cluster, job_id)
        with contextlib.suppress(subprocess.CalledProcessError):  # it may be back already
            slurm_cluster.run("scontrol", "update", f"NodeName={slurm_cluster.node}",
                              "State=RESUME")  # fmt: skip
        wait_for(
            lambda: (
                relaunch_if_refused(slurm_cluster, job_id, refused)
                or backend.describe("nodefail").is_final
            ),
            timeout=240,
            explain=lambda: (
                slurm_cluster.run("scontrol", "show", "job", job_id)
                + slurm_cluster.run("scontrol", "show", "node", slurm_cluster.node)
            ),
        )
    finally:  # never leave the session's node down
        with contextlib.suppress(subprocess.CalledProcessError):
            slurm_cluster.run("scontrol", "update", f"NodeName={slurm_cluster.node}",
                              "State=RESUME")  # fmt: skip
    snapshot = backend.describe("nodefail")
    # Why, if not: the job's record and the daemons' logs (a requeued run that failed
    # before training once left only the first run's log).
    assert snapshot.status is JobStatus.Completed, (
        f"{snapshot.failure_reason}\n{backend.logs('nodefail')}\n"
        + slurm_cluster.run("scontrol", "show", "job", job_id)
        + slurm_cluster.logs()[-4000:]
    )
    assert snapshot.requeues == 1 + len(refused), refused
    assert snapshot.backend_job_id == job_id
    assert snapshot.progress is not None and snapshot.progress.start_step > 0
    assert snapshot.progress.step == 20 * 8
    assert jobs_named(slurm_cluster, "nodefail") == [job_id]
    logs = backend.logs("nodefail", tail=400)
    assert "DUE TO NODE FAILURE" in logs and "Slurm restart 1: warm start from" in logs
