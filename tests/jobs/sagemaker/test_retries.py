"""A backend call that fails transiently is retried by Prefect, on the session's real
server: the training service throttles CreateTrainingJob longer than botocore's own retries
last, the launch task waits (AwaitingRetry), retries (Retrying) and the flow completes."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.jobs.sagemaker.backend import SageMakerBackend
from remedy.jobs.sagemaker.clients import client as CACHED_CLIENT
from remedy.jobs.sagemaker.clients import sagemaker
from remedy.state_schema import Budgets, JobStatus, State
from tests.jobs.sagemaker.conftest import REGION, cloud_spec

THROTTLED = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()
HOP_BY_HOP = {"host", "content-length", "connection", "transfer-encoding", "content-encoding"}


class Front(BaseHTTPRequestHandler):
    """The training service's endpoint: CreateTrainingJob answered with the service's
    ThrottlingException while `throttle` > 0, every other request passed on to moto."""

    upstream = ""
    throttle = 0
    throttled = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("X-Amz-Target", "").endswith(".CreateTrainingJob") and Front.throttle:
            Front.throttle -= 1
            Front.throttled += 1
            self.answer(400, {"Content-Type": "application/x-amz-json-1.1"}, THROTTLED)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        passed = httpx.post(Front.upstream + self.path, content=body, headers=headers)
        kept = {k: v for k, v in passed.headers.items() if k.lower() not in HOP_BY_HOP}
        self.answer(passed.status_code, kept, passed.content)

    def answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in {**headers, "x-amzn-RequestId": str(uuid.uuid4())}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def throttling_service(
    aws: str, moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[int]:
    """The training service behind Front (S3 and logs stay moto's); how many throttled
    answers make one CreateTrainingJob call fail: botocore's own attempts."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Front)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", f"http://127.0.0.1:{server.server_address[1]}")
    CACHED_CLIENT.cache_clear()
    attempts = sagemaker(REGION).meta.config.retries["total_max_attempts"]
    Front.upstream, Front.throttle, Front.throttled = moto_server, attempts, 0
    yield attempts
    server.shutdown()
    CACHED_CLIENT.cache_clear()


def task_run_states(flow_run_id: uuid.UUID, task: str, final: str) -> list[str]:
    """The state names of the flow run's one run of `task`, once the server has its
    `final` state (task run states reach the server as events, a moment later)."""
    deadline = time.monotonic() + 60
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )
            (run,) = [r for r in runs if r.name.startswith(f"{task}-")]
            names = [s.name for s in client.read_task_run_states(run.id)]
            if names and names[-1] == final or time.monotonic() > deadline:
                return names
            time.sleep(0.5)


@pytest.mark.slow
def test_a_throttled_launch_is_retried_and_the_flow_completes(
    prefect_api_url: str, throttling_service: int, fast: None, tmp_path: Path
) -> None:
    final = remediate(
        state=State(run_spec=cloud_spec(tmp_path, rules=[]), budgets=Budgets(max_num_retraining=1)),
        run_dir=str(tmp_path / "run"),
        settings=RemediateSettings(poll_interval_s=0.3),
        return_state=True,
    )
    # the job trains nothing (it prints): the run is not clean, Failed, but its job completed
    payload = final.result(raise_on_failure=False)
    (attempt,) = payload.history.attempts
    assert attempt.outcome is JobStatus.Completed, payload.end_reason
    assert Front.throttled == throttling_service  # each of botocore's attempts, then no more
    names = task_run_states(final.state_details.flow_run_id, "launch_job", "Completed")
    assert names[names.index("AwaitingRetry") + 1 :] == ["Retrying", "Completed"], names
    assert names.count("AwaitingRetry") == 1
    # the retried launch created the job once: it was refused before, never doubled
    name = SageMakerBackend(tmp_path / "run").record(attempt.job_name)["training_job_name"]
    jobs = boto3.client("sagemaker", region_name=REGION).list_training_jobs(MaxResults=100)
    assert [j["TrainingJobName"] for j in jobs["TrainingJobSummaries"]].count(name) == 1
