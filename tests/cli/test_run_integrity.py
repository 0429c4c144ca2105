"""A run is driven by one process, never overwritten, never left half-ended, and stops its
job whichever signal ends `remedy run` (real processes, one shared Prefect server)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from remedy.jobs.local import LocalBackend
from remedy.records.run_folder import REPORT_DIR, is_finished
from remedy.state_schema import JobStatus, RunSpec, load_state
from tests.helpers.cli import (
    job_is_training,
    pid_running,
    remedy,
    remedy_env,
    start_gated_run,
    start_remedy,
    wait_for,
    write_spec,
)


def events(run_dir: Path) -> list[str]:
    lines = (run_dir / "transitions.jsonl").read_text().splitlines()
    return [json.loads(line)["event"] for line in lines]


@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_a_second_process_on_a_running_run_is_refused(prefect_api_url: str, tmp_path: Path) -> None:
    flow, run_dir = start_gated_run(tmp_path, prefect_api_url)
    try:
        second = remedy("resume", str(run_dir), api_url=prefect_api_url)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"is being run by another process (pid {flow.pid} on " in second.stderr
        assert "remedy run" in second.stderr
    finally:
        (run_dir / "release").touch()
        output, _ = flow.communicate(timeout=300)
    assert flow.returncode == 0, output
    assert len(list((run_dir / "jobs").iterdir())) == 1  # one job, one supervisor


@pytest.mark.adversarial("fault injection", fails_as="leaked")
def test_sigterm_of_remedy_run_stops_the_job(prefect_api_url: str, tmp_path: Path) -> None:
    flow, run_dir = start_gated_run(tmp_path, prefect_api_url)
    flow.send_signal(signal.SIGTERM)
    output, _ = flow.communicate(timeout=180)
    assert flow.returncode == 130, output
    assert f"continue with `remedy resume {run_dir}`" in output
    job = load_state(run_dir / "state.json").history.latest_job_name
    assert LocalBackend(run_dir).describe(job).status is JobStatus.Stopped


def quick_run(prefect_api_url: str, tmp_path: Path) -> Path:
    spec = RunSpec(entry_point="tests.jobs.entry_points.quick", rules=[])
    run_dir = tmp_path / "run"
    done = remedy(
        "run", str(write_spec(tmp_path / "spec.json", spec)), "--run-dir", str(run_dir),
        "--poll-interval", "0.3", api_url=prefect_api_url,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert is_finished(run_dir)
    return run_dir


@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_a_run_that_crashed_after_its_final_state_is_finished_by_resume(
    prefect_api_url: str, tmp_path: Path
) -> None:
    run_dir = quick_run(prefect_api_url, tmp_path)
    # opened once, by the command (the flow it starts in its process does not journal it again)
    assert events(run_dir).count("start") == 1 and "resume" not in events(run_dir)
    # The flow dies after saving its final state, before the report and the last message:
    journal = run_dir / "transitions.jsonl"
    journal.write_text("".join(journal.read_text().splitlines(keepends=True)[:-1]))
    for path in sorted((run_dir / REPORT_DIR).rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    assert not is_finished(run_dir)

    resumed = remedy("resume", str(run_dir), "--poll-interval", "0.3", api_url=prefect_api_url)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (run_dir / REPORT_DIR / "index.html").is_file()
    assert events(run_dir)[-2:] == ["resume", "finished"] and events(run_dir).count("resume") == 1
    assert len(load_state(run_dir / "state.json").history.attempts) == 1  # nothing redone
    again = remedy("resume", str(run_dir), api_url=prefect_api_url)
    assert again.returncode == 0 and "already ended" in again.stdout


CALL_FLOW = """
import sys
from remedy.flows.remediate import remediate
from remedy.state_schema import load_state
remediate(state=load_state(sys.argv[1]), run_dir=sys.argv[2])
"""


@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_calling_the_flow_again_on_its_run_dir_never_overwrites_it(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """What a Prefect retry of a run started from the UI does: the same parameters again."""
    run_dir = quick_run(prefect_api_url, tmp_path)
    start = run_dir / "start.json"
    before = load_state(run_dir / "state.json")

    def call_flow(state_file: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", CALL_FLOW, str(state_file), str(run_dir)],
            capture_output=True, text=True, timeout=300, env=remedy_env(prefect_api_url),
        )  # fmt: skip

    again = call_flow(start)
    assert again.returncode == 0, again.stderr
    after = load_state(run_dir / "state.json")
    assert after == before  # went on from the saved, ended state: no second job
    assert len(list((run_dir / "jobs").iterdir())) == 1

    other = tmp_path / "other.json"
    other.write_text(load_state(start).model_copy(update={"policy": "seed"}).model_dump_json())
    refused = call_flow(other)
    assert refused.returncode != 0
    assert "already holds another run" in refused.stderr
    assert load_state(run_dir / "state.json") == before


@pytest.mark.slow
@pytest.mark.adversarial("fault injection", fails_as="leaked")
def test_a_killed_remedy_run_leaves_no_temporary_server(tmp_path: Path) -> None:
    spec = RunSpec(entry_point="tests.jobs.entry_points.gated", rules=[])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")  # its own temporary server and database
    run_dir = tmp_path / "run"
    flow = subprocess.Popen(
        [sys.executable, "-m", "remedy", "run", str(write_spec(tmp_path / "spec.json", spec)),
         "--run-dir", str(run_dir), "--poll-interval", "0.3"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    assert flow.stdout is not None
    server = None
    for line in flow.stdout:
        if match := re.search(r"temporary Prefect server at \S+ \(pid (\d+)\)", line):
            server = int(match.group(1))
            break
    assert server is not None and pid_running(server)
    wait_for(lambda: job_is_training(run_dir))
    flow.send_signal(signal.SIGKILL)  # no handler, no atexit: only the watchdog is left
    flow.wait()
    wait_for(lambda: not pid_running(server), timeout=30)
    job = load_state(run_dir / "state.json").history.latest_job_name
    LocalBackend(run_dir).stop(job)  # the job itself outlives its flow by design (resume)


# The orchestrator is killed after each new journal event of a two-attempt run (the first
# attempt explodes, the policy adds batch norm, the second completes): start, launching or
# train, the monitor's transitions, one after another.
KILLS = 7


def phases(run_dir: Path) -> list[str]:
    """The journal's events but the resumes this test causes."""
    if not (run_dir / "transitions.jsonl").exists():
        return []
    return [event for event in events(run_dir) if event != "resume"]


@pytest.mark.slow
@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_remedy_killed_at_every_phase_loses_and_repeats_nothing(
    prefect_api_url: str, tmp_path: Path
) -> None:
    """kill -9 of `remedy run`, then of each `remedy resume`, right after each phase's
    journal line: the run still ends clean, each job launched once, the history whole."""
    from tests.flows.specs import tiny_spec

    run_dir = tmp_path / "run"
    spec = write_spec(
        tmp_path / "spec.json", tiny_spec(warmup_learning_rate=0.003125, nan_guard="off")
    )
    command = ["run", str(spec), "--run-dir", str(run_dir), "--poll-interval", "0.3"]
    command += ["--policy", "seed"]  # the ladder's batch norm: two attempts
    killed_after: list[str] = []
    for _ in range(KILLS):
        before = len(phases(run_dir))
        process = start_remedy(*command, api_url=prefect_api_url)
        wait_for(
            lambda p=process, n=before: len(phases(run_dir)) > n or p.poll() is not None,
            timeout=300,
        )
        process.kill()  # SIGKILL: no handler runs
        process.wait()
        killed_after.append(phases(run_dir)[-1])
        command = ["resume", str(run_dir), "--poll-interval", "0.3"]
    # launching and train are a moment apart: a kill lands after either
    assert {"start", "monitor"} <= set(killed_after), killed_after
    assert {"launching", "train"} & set(killed_after), killed_after
    done = remedy(*command, api_url=prefect_api_url)
    assert done.returncode == 0, done.stdout + done.stderr + str(killed_after)
    final = load_state(run_dir / "state.json")
    jobs = [attempt.job_name for attempt in final.history.attempts]
    assert len(jobs) == 2 and final.history.num_retraining == 2, killed_after
    assert sorted(p.name for p in (run_dir / "jobs").iterdir()) == sorted(jobs)
    assert phases(run_dir).count("launching") == 2  # no job launched twice
    assert final.history.attempts[-1].outcome is JobStatus.Completed and is_finished(run_dir)
