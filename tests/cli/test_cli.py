"""The remedy command line as a user runs it: real processes, one shared Prefect server."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import pytest

from remedy.jobs.local import LocalBackend
from remedy.state_schema import JobStatus, Payload, RunSpec, load_state
from tests.flows.specs import tiny_spec
from tests.helpers.cli import remedy, start_gated_run, start_remedy, write_spec
from tests.state_schema.seed_payload import SEED_FINAL_PAYLOAD


def test_schema_prints_the_payload_schema() -> None:
    out = remedy("schema")
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    assert schema["title"] == "Payload" and "State" in schema["$defs"]


def test_plan_prints_the_next_state(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    seed = json.loads(json.dumps(SEED_FINAL_PAYLOAD))
    seed["state"]["run_spec"]["warmup_learning_rate"] = 0.1
    seed["state"]["policy"] = "seed"  # the original ladder: halve the warmup rate
    state_file.write_text(json.dumps(seed))
    out = remedy("plan", str(state_file), "--finding", "ExplodingTensor", "--step", "7")
    assert out.returncode == 0, out.stderr
    planned = Payload.model_validate_json(out.stdout).state
    assert planned.run_spec.warmup_learning_rate == 0.05
    assert planned.findings[0].step == 7 and planned.next_action.value == "launch_new"
    assert list(tmp_path.iterdir()) == [state_file]  # launched nothing, wrote nothing


def test_bad_run_spec_is_refused_before_anything_runs(tmp_path: Path) -> None:
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps({"learning_rate": -1, "activation": "swish"}))
    out = remedy("run", str(spec), "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 2
    assert "learning_rate" in out.stderr and "activation" in out.stderr
    assert not (tmp_path / "run").exists()


def test_existing_run_dir_is_never_overwritten(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "state.json").write_text("precious")
    spec = write_spec(tmp_path / "spec.json", RunSpec())
    out = remedy("run", str(spec), "--run-dir", str(run_dir))
    assert out.returncode == 2 and "remedy resume" in out.stderr
    assert (run_dir / "state.json").read_text() == "precious"


def test_bad_policy_config_file_is_refused_before_anything_runs(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec.json", RunSpec())
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps({"ExplodingTensor": [{"strategy": "clip_gradients", "max_times": 0}]})
    )
    for config in (policy, tmp_path / "missing.json"):
        out = remedy(
            "run", str(spec), "--policy", "config", "--policy-config", str(config),
            "--run-dir", str(tmp_path / "run"),
        )  # fmt: skip
        assert out.returncode == 2, out.stderr
        assert str(config) in out.stderr and "policy_config" in out.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_run_writes_state_out_and_exits_zero_when_completed(
    prefect_api_url: str, tmp_path: Path
) -> None:
    spec = write_spec(tmp_path / "spec.json", tiny_spec(add_batch_norm=1, num_epochs=1))
    order = {"ExplodingTensor": [{"strategy": "clip_gradients", "max_times": 2}]}
    (tmp_path / "policy.json").write_text(json.dumps(order))
    out = remedy(
        "run",
        str(spec),
        "--policy",
        "config",
        "--policy-config",
        str(tmp_path / "policy.json"),
        "--run-dir",
        str(tmp_path / "run"),
        "--poll-interval",
        "0.5",
        "--state-out",
        str(tmp_path / "final.json"),
        api_url=prefect_api_url,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    final = load_state(tmp_path / "final.json")
    assert final.history.attempts[0].outcome is JobStatus.Completed
    assert final.policy == "config"
    assert final.policy_config["ExplodingTensor"][0].max_times == 2
    assert "initial" in out.stdout and f"report: {tmp_path / 'run'}" in out.stdout
    assert '"next_action"' not in out.stdout  # the payload went to --state-out only
    shown = remedy("resume", str(tmp_path / "run"), "--json", api_url=prefect_api_url)
    assert shown.returncode == 0 and "already ended" in shown.stdout
    assert '"next_action": "end"' in shown.stdout and "initial" in shown.stdout


def test_run_exits_nonzero_when_the_last_attempt_did_not_complete(
    prefect_api_url: str, tmp_path: Path
) -> None:
    spec = write_spec(
        tmp_path / "spec.json", RunSpec(entry_point="tests.jobs.entry_points.crashes", rules=[])
    )
    out = remedy("run", str(spec), "--run-dir", str(tmp_path / "run"), api_url=prefect_api_url)
    assert out.returncode == 1
    assert "AlgorithmError" in out.stdout


@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_resume_after_a_crashed_flow_adopts_the_running_job(
    prefect_api_url: str, tmp_path: Path
) -> None:
    flow, run_dir = start_gated_run(tmp_path, prefect_api_url)
    flow.send_signal(signal.SIGKILL)  # the flow process dies; the detached job does not
    flow.wait()
    job = load_state(run_dir / "state.json").history.latest_job_name
    assert LocalBackend(run_dir).describe(job).status == "InProgress"

    resumed = start_remedy(
        "resume", str(run_dir), "--poll-interval", "0.3", api_url=prefect_api_url
    )
    time.sleep(2.0)
    (run_dir / "release").touch()  # let the job finish
    output, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, output
    final = load_state(run_dir / "state.json")
    assert [a.job_name for a in final.history.attempts] == [job]
    assert final.history.attempts[0].outcome is JobStatus.Completed
    assert len((run_dir / "jobs" / job / "launches.txt").read_text().split()) == 1
    assert [p.name for p in (run_dir / "jobs").iterdir()] == [job]

    again = remedy("resume", str(run_dir), api_url=prefect_api_url)
    assert again.returncode == 0 and "already ended" in again.stdout


def test_cancelling_the_flow_run_stops_the_job(prefect_api_url: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort
    from prefect.states import Cancelling

    flow, run_dir = start_gated_run(tmp_path, prefect_api_url)
    running = FlowRunFilter(
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))
    )
    with get_client(sync_client=True) as client:
        found = client.read_flow_runs(
            flow_run_filter=running, sort=FlowRunSort.START_TIME_DESC, limit=50
        )
        runs = [r for r in found if r.parameters.get("run_dir") == str(run_dir)]
        assert len(runs) == 1
        client.set_flow_run_state(runs[0].id, Cancelling(message="from the test"))
        output, _ = flow.communicate(timeout=120)
        assert client.read_flow_run(runs[0].id).state.type is StateType.CANCELLED

    final = load_state(run_dir / "state.json")
    assert (final.end_reason or "").startswith("cancelled"), output
    job = final.history.latest_job_name
    assert LocalBackend(run_dir).describe(job).status == "Stopped"
    assert flow.returncode == 1


def test_status_and_logs_of_a_run(prefect_api_url: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    spec = write_spec(
        tmp_path / "spec.json", RunSpec(entry_point="tests.jobs.entry_points.quick", rules=[])
    )
    assert (
        remedy("run", str(spec), "--run-dir", str(run_dir), api_url=prefect_api_url).returncode == 0
    )
    status = remedy("status", str(run_dir))
    assert status.returncode == 0 and "Completed" in status.stdout.splitlines()[1]
    why = remedy("status", str(run_dir), "--why")
    assert why.returncode == 0 and "#1 initial: -\n   result: ran to its end, loss " in why.stdout
    logs = remedy("logs", str(run_dir))
    assert logs.returncode == 0 and "trained with lr 0.1" in logs.stdout
    missing = remedy("logs", str(run_dir), "--job", "nope")
    assert missing.returncode == 2 and "no job named 'nope'" in missing.stderr


def test_spec_that_cannot_start_here_is_refused_before_launch(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec.json", RunSpec(dataset="cifar10", data_path="/nowhere"))
    out = remedy("run", str(spec), "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 2 and "run_spec.data_path" in out.stderr
    assert not (tmp_path / "run").exists()


def test_a_script_spec_with_an_unknown_role_is_refused_naming_it(tmp_path: Path) -> None:
    spec = {
        "entry_point": "main.py",
        "hyperparameters": {"lr": 20, "clip": 0.25},
        "hyperparameter_roles": {"learn_rate": "lr", "grad_clip_norm": "gradclip"},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = remedy("run", str(tmp_path / "spec.json"), "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 2
    assert "hyperparameter_roles.learn_rate: unknown role 'learn_rate'; known roles: " in out.stderr
    assert "hyperparameter_roles.grad_clip_norm: maps to the flag 'gradclip'" in out.stderr
    assert not (tmp_path / "run").exists()


def test_a_script_that_is_not_in_source_dir_is_refused_before_launch(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    spec = {"source_dir": str(tmp_path / "code"), "entry_point": "main.py"}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = remedy("run", str(tmp_path / "spec.json"), "--run-dir", str(tmp_path / "run"))
    assert out.returncode == 2
    assert "run_spec.entry_point: no script 'main.py' in run_spec.source_dir" in out.stderr
    assert not (tmp_path / "run").exists()


def test_version() -> None:
    from importlib.metadata import version

    done = remedy("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"remedy {version('remedy-train')}"


def test_an_unreachable_server_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/api"
    spec = tmp_path / "spec.json"
    spec.write_text('{"entry_point": "tests.jobs.entry_points.quick", "rules": []}')
    run_dir = tmp_path / "run"
    for args in (("run", str(spec), "--run-dir", str(run_dir)), ("deploy", "--pool", "p")):
        done = remedy(*args, api_url=url)
        assert done.returncode in (1, 2), done.stderr
        assert done.stderr.strip().splitlines() == [
            f"remedy: cannot reach the Prefect server at {url} (PREFECT_API_URL): [Errno 111] "
            "Connection refused; start it (`remedy server`), or unset PREFECT_API_URL for a "
            "temporary one"
        ], done.stderr
    assert not run_dir.exists()


@pytest.mark.adversarial("fault injection", fails_as="crashed")
def test_a_full_disk_at_start_is_a_clear_error(tmp_path: Path, prefect_api_url: str) -> None:
    from tests.tmpfs import fill, full_disk

    spec = write_spec(tmp_path / "spec.json", tiny_spec(num_epochs=1))
    with full_disk(tmp_path / "disk", "64k") as disk:
        fill(disk)
        run_dir = str(disk / "run")
        done = remedy("run", str(spec), "--run-dir", run_dir, api_url=prefect_api_url)
    assert done.returncode == 2, done.stderr
    assert "cannot write the run folder" in done.stderr and "No space left" in done.stderr
    assert "Traceback" not in done.stderr
