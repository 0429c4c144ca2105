"""Scale-out on loopback: a search whose candidates run on two process workers of a pool.

What a user with N machines does (infra/README.md), here on one machine against the test
session's server: create a process work pool, deploy remediate from infra/prefect.yaml,
start `prefect worker start --pool POOL` twice, and run a search with use_deployments.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
import pytest

from remedy.flows.deployments import (
    POOL_DEPLOYMENT,
    REMEDIATE_ENTRYPOINT,
    SEARCH_ENTRYPOINT,
    deploy_to_pool,
)
from remedy.flows.remediate import RemediateSettings
from remedy.flows.search import (
    SearchSettings,
    SearchSpace,
    candidate_dir,
    check_deployment,
    search,
)
from remedy.jobs.local import LocalBackend
from remedy.outlets.leaderboard import leaderboard_row
from remedy.state_schema import Budgets, load_state
from tests.conftest import REPO
from tests.flows.specs import tiny_spec

PREFECT = str(Path(sys.executable).with_name("prefect"))
WORKERS = ("worker-a", "worker-b")


@dataclass(frozen=True)
class Pool:
    name: str  # the work pool; the deployment has the same name
    deployment: str  # flow/deployment, as run_deployment wants it
    logs: dict[str, Path]  # worker name -> its output


def run(command: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each worker's process group (the worker and its flow-run processes), all
    at once, then SIGKILL to those still there after 5 s. (Their runs are over by then; a
    worker did not end on SIGTERM within 30 s either, and each test waited for it.)"""
    running = [worker for worker in workers if worker.poll() is None]
    for worker in running:
        os.killpg(worker.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    for worker in running:
        try:
            worker.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)


@pytest.fixture
def env(prefect_api_url: str, tmp_path: Path) -> dict[str, str]:
    """What every machine of the pool has: the server's URL and this checkout."""
    return {
        **os.environ,
        "PREFECT_API_URL": prefect_api_url,
        "REMEDY_RUNS_DIR": str(tmp_path),  # the runs root: the searches' folders are in it
        "REMEDY_TORCH_THREADS": "1",
        "PREFECT_WORKER_QUERY_SECONDS": "1",  # poll often: the test waits on the workers
    }


@pytest.fixture
def work_pool(env: dict[str, str]) -> str:
    name = f"scale-out-{uuid4().hex[:8]}"
    run([PREFECT, "--no-prompt", "work-pool", "create", name, "--type", "process"], env)
    return name


@pytest.fixture
def pool(work_pool: str, env: dict[str, str], tmp_path: Path) -> Iterator[Pool]:
    """remediate deployed on the work pool, and two workers of one run at a time."""
    name = work_pool
    run([sys.executable, "-m", "remedy", "deploy", "--pool", name, "--name", name], env)
    logs = {worker: tmp_path / f"{worker}.log" for worker in WORKERS}
    workers: list[subprocess.Popen[bytes]] = []
    try:
        for worker, log in logs.items():
            with log.open("w") as out:
                workers.append(
                    subprocess.Popen(
                        [PREFECT, "worker", "start", "--pool", name, "--type", "process"]
                        + ["--name", worker, "--limit", "1"],
                        cwd=tmp_path,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        yield Pool(name=name, deployment=f"remediate/{name}", logs=logs)
    finally:
        stop(workers)


def post(api: str, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A filter query through the REST API."""
    response = httpx.post(f"{api}/{path}", json={"offset": 0, "limit": 50, **body}, timeout=30)
    response.raise_for_status()
    return response.json()


def stop_jobs(search_dir: Path, candidates: int) -> None:
    """A failed test must not leave detached training jobs behind."""
    for number in range(1, candidates + 1):
        run_dir = Path(candidate_dir(str(search_dir), number))
        if (run_dir / "state.json").exists():
            job = load_state(run_dir / "state.json").history.latest_job_name
            if job:
                LocalBackend(str(run_dir)).stop(job)


@pytest.mark.slow
def test_two_workers_share_the_candidates_of_a_search(
    prefect_api_url: str, pool: Pool, tmp_path: Path
) -> None:
    space = SearchSpace(
        depth=[8],
        activation=["elu", "relu"],
        add_batch_norm=[1],
        width=[4],
        learning_rate=[0.1, 0.05],
        warmup_learning_rate=[0.003125],
    )
    settings = SearchSettings(
        concurrency=4,  # all four wait at once: each worker takes one at a time
        use_deployments=True,
        deployment=pool.deployment,
        budgets=Budgets(max_num_retraining=1),
        remediate=RemediateSettings(poll_interval_s=0.5),
    )
    search_dir = tmp_path / "search"
    try:
        final = search(
            space=space,
            base_spec=tiny_spec(num_epochs=1),
            settings=settings,
            search_dir=str(search_dir),
            return_state=True,
        )
    finally:
        stop_jobs(search_dir, 4)
    assert final.is_completed(), final
    rows = final.result()

    # every candidate ran as a run of the pool's deployment, and completed
    (deployment,) = post(
        prefect_api_url, "deployments/filter", {"deployments": {"name": {"any_": [pool.name]}}}
    )
    runs = post(
        prefect_api_url,
        "flow_runs/filter",
        {"flow_runs": {"deployment_id": {"any_": [deployment["id"]]}}, "sort": "START_TIME_ASC"},
    )
    assert len(runs) == 4
    assert {run["state"]["type"] for run in runs} == {"COMPLETED"}

    # both workers took part: each started at least one of them, none started twice (both
    # workers may try for the same run; the server lets one of them have it)
    started = {
        worker: set(re.findall(r"Flow run '([\w-]+)' submitted to infrastructure", log.read_text()))
        for worker, log in pool.logs.items()
    }
    assert all(started.values()), started
    assert set.union(*started.values()) == {run["name"] for run in runs}
    assert not set.intersection(*started.values())
    assert {run["name"] for run in runs} == {f"tiny-c{n}" for n in range(1, 5)}

    # the leaderboard is whole: file and table artifact, four rows with attempts and accuracy
    assert sorted(row["candidate"] for row in rows) == [1, 2, 3, 4]
    for row in rows:
        assert row["status"] == "clean", row
        assert row["attempts"] == 1 and row["accuracy"] is not None
        assert row["flow_run"] == f"tiny-c{row['candidate']}"
    assert json.loads((search_dir / "leaderboard.json").read_text()) == rows
    markdown = (search_dir / "leaderboard.md").read_text()
    assert markdown.splitlines()[0].endswith("| flow_run |")
    assert all(f"| tiny-c{n} |" in markdown for n in range(1, 5))
    (table,) = post(
        prefect_api_url,
        "artifacts/filter",
        {
            "artifacts": {
                "flow_run_id": {"any_": [str(final.state_details.flow_run_id)]},
                "type": {"any_": ["table"]},
            },
            "sort": "CREATED_DESC",
        },
    )
    assert table["key"] == "remedy-search-leaderboard"
    table_rows = json.loads(table["data"])
    assert [r["candidate"] for r in table_rows] == [r["candidate"] for r in rows]
    assert all(r["attempts"] == 1 and r["accuracy"] is not None for r in table_rows)


@pytest.mark.slow
def test_prefect_yaml_describes_what_remedy_deploy_registers(
    prefect_api_url: str, work_pool: str, env: dict[str, str]
) -> None:
    mine, theirs = f"{work_pool}-remedy", f"{work_pool}-yaml"
    run([sys.executable, "-m", "remedy", "deploy", "--pool", work_pool, "--name", mine], env)
    done = subprocess.run(
        [PREFECT, "--no-prompt", "deploy", "--prefect-file", "infra/prefect.yaml"]
        + ["--name", theirs, "--pool", work_pool],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert f"Deployment 'remediate/{theirs}' successfully created" in output, output

    def read(name: str) -> dict[str, Any]:
        response = httpx.get(f"{prefect_api_url}/deployments/name/remediate/{name}")
        response.raise_for_status()
        return response.json()

    fields = ("entrypoint", "pull_steps", "work_pool_name", "tags", "enforce_parameter_schema")
    registered, described = read(mine), read(theirs)
    assert {f: registered[f] for f in fields} == {f: described[f] for f in fields}
    assert registered["entrypoint"] == REMEDIATE_ENTRYPOINT  # a module: no checkout needed
    assert not registered["pull_steps"]
    # The form comes with the flow's parameter types (flows/run_form.py), so prefect.yaml
    # registers the same one: the same fields, groups and positions (their order; the
    # server stores keys re-sorted, the UI orders by "position").
    yaml_schema = described["parameter_openapi_schema"]
    assert registered["parameter_openapi_schema"] == yaml_schema

    def order(fields: dict[str, Any]) -> list[str]:
        return sorted(fields, key=lambda name: fields[name]["position"])

    assert order(yaml_schema["properties"])[:2] == ["run_spec", "budgets"]
    run_spec = yaml_schema["definitions"]["RunSpec"]["properties"]
    assert order(run_spec)[0] == "base_job_name"
    assert order(run_spec)[-4:] == ["backend", "local", "sagemaker", "slurm"]
    assert "sm_role" not in run_spec and "start_epoch" not in run_spec
    for model in ("RunSpec", "Budgets", "RemediateSettings"):
        fields = yaml_schema["definitions"][model]["properties"]
        assert sorted(field["position"] for field in fields.values()) == list(range(len(fields)))
    yaml_file = (REPO / "infra" / "prefect.yaml").read_text()
    assert f"name: {POOL_DEPLOYMENT}" in yaml_file and REMEDIATE_ENTRYPOINT in yaml_file


@pytest.mark.slow
def test_infra_deploys_the_overnight_search_on_its_schedule(
    prefect_api_url: str, work_pool: str, env: dict[str, str]
) -> None:
    name = f"{work_pool}-overnight"
    done = subprocess.run(
        [PREFECT, "--no-prompt", "deploy", "--prefect-file", "infra/overnight.yaml"]
        + ["--name", name, "--pool", work_pool],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    response = httpx.get(f"{prefect_api_url}/deployments/name/search/{name}")
    response.raise_for_status()
    deployment = response.json()
    assert deployment["entrypoint"] == SEARCH_ENTRYPOINT
    assert not deployment["pull_steps"]
    [schedule] = deployment["schedules"]
    assert schedule["active"]
    assert schedule["schedule"]["cron"] == "0 1 * * *"
    assert schedule["schedule"]["timezone"] == "UTC"
    parameters = deployment["parameters"]
    settings = SearchSettings.model_validate(parameters["settings"])
    assert settings.use_deployments and settings.deployment == f"remediate/{POOL_DEPLOYMENT}"
    assert len(SearchSpace.model_validate(parameters["space"]).candidates(tiny_spec())) == 4


def test_deploying_to_a_pool_that_is_not_there_says_how_to_make_it(
    prefect_api_url: str,
) -> None:
    with pytest.raises(ValueError, match="prefect work-pool create no-such-pool"):
        deploy_to_pool("no-such-pool")


def test_a_search_checks_its_deployment_before_sending_candidates(
    prefect_api_url: str, work_pool: str, env: dict[str, str]
) -> None:
    with pytest.raises(ValueError, match="settings.deployment: no deployment 'remediate/nope'"):
        check_deployment("remediate/nope")
    run([sys.executable, "-m", "remedy", "deploy", "--pool", work_pool, "--name", work_pool], env)
    warning = check_deployment(f"remediate/{work_pool}")  # no worker started on this pool
    assert warning and f"prefect worker start --pool {work_pool}" in warning


def test_the_leaderboard_says_what_became_of_a_candidate_run(tmp_path: Path) -> None:
    nowhere = str(tmp_path / "candidate-001")
    ran_elsewhere = leaderboard_row(
        1, nowhere, {"flow_run": "tiny-c1", "flow_run_state": "COMPLETED"}
    )
    assert ran_elsewhere["status"] == "never started"
    assert "not visible here" in ran_elsewhere["why"]
    crashed = leaderboard_row(
        2,
        nowhere,
        {
            "flow_run": "tiny-c2",
            "flow_run_state": "CRASHED",
            "flow_run_message": "worker died: token=abc",
        },
    )
    assert crashed["why"] == "flow run tiny-c2 ended CRASHED: worker died: token=***"
    assert leaderboard_row(3, nowhere)["why"] == "never started"


@pytest.mark.slow
def test_a_candidate_no_worker_starts_fails_with_why_instead_of_waiting_for_ever(
    prefect_api_url: str, work_pool: str, env: dict[str, str], tmp_path: Path
) -> None:
    """A pool with no worker: after settings.worker_timeout_s the candidate's run is
    cancelled (no worker takes it later) and the leaderboard says why; the search ends."""
    run([sys.executable, "-m", "remedy", "deploy", "--pool", work_pool, "--name", work_pool], env)
    settings = SearchSettings(
        use_deployments=True,
        deployment=f"remediate/{work_pool}",
        worker_timeout_s=3,
        budgets=Budgets(max_num_retraining=1),
    )
    space = SearchSpace(activation=["elu"], add_batch_norm=[1], max_candidates=1)
    final = search(
        space=space,
        base_spec=tiny_spec(num_epochs=1),
        settings=settings,
        search_dir=str(tmp_path / "search"),
        return_state=True,
    )
    assert final.is_completed(), final
    (row,) = final.result()
    assert row["status"] == "never started"
    why = re.fullmatch(
        r"flow run (\S+) ended CANCELLED: no worker started it within worker_timeout_s "
        r"\(3 s\): start one with `prefect worker start --pool (\S+)`",
        row["why"],
    )
    assert why and why.group(2) == work_pool, row["why"]
    # Flow run names are drawn at random: another run of the session may share this one's.
    (candidate,) = post(
        prefect_api_url,
        "flow_runs/filter",
        {
            "flow_runs": {"name": {"any_": [why.group(1)]}},
            "work_pools": {"name": {"any_": [work_pool]}},
        },
    )
    assert candidate["state"]["type"] == "CANCELLED"
