"""The automation remedy ships (remedy.gave_up -> a notification), created by `remedy
automation` on the session's real server and triggered by a real run that gives up: the
server's automation sends through a real webhook block to a real HTTP receiver."""

from __future__ import annotations

import importlib.resources
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from prefect.blocks.notifications import CustomWebhookNotificationBlock
from prefect.client.orchestration import get_client
from prefect.events.schemas.automations import AutomationCore

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.outlets.publish import run_name
from remedy.state_schema import Budgets, RunSpec, State

REPO = Path(__file__).resolve().parents[2]
# package data: read as an installed package reads it, not from the checkout's tree
AUTOMATION = importlib.resources.files("remedy.cli") / "automations" / "gave_up.yaml"


@pytest.fixture
def receiver() -> Iterator[tuple[str, queue.Queue]]:
    """A real HTTP receiver on loopback: (its URL, the JSON bodies POSTed to it)."""
    received: queue.Queue = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.put(json.loads(body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/alerts", received
    finally:
        server.shutdown()


def remedy_cli(api_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remedy", *args],
        cwd=REPO,
        env={**os.environ, "PREFECT_API_URL": api_url},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_shipped_file_is_what_prefect_automation_create_reads(tmp_path: Path) -> None:
    automation = AutomationCore.model_validate(yaml.safe_load(AUTOMATION.read_text()))
    assert automation.trigger.expect == {"remedy.gave_up"}
    assert [action.type for action in automation.actions] == ["send-notification"]
    # from any folder, for `prefect automation create --from-file`
    printed = subprocess.run(
        [sys.executable, "-m", "remedy", "automation", "--print"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert printed.stdout == AUTOMATION.read_text()


def test_a_run_that_gives_up_notifies_through_the_automation(
    prefect_api_url: str, tmp_path: Path, receiver: tuple[str, queue.Queue]
) -> None:
    url, received = receiver
    block_name = f"remedy-alerts-{uuid.uuid4().hex[:8]}"
    CustomWebhookNotificationBlock(
        name="alerts",
        url=url,
        json_data={"subject": "{{subject}}", "body": "{{body}}"},
        allow_private_urls=True,  # the receiver is on loopback
    ).save(block_name)

    unknown = remedy_cli(prefect_api_url, "automation", "--block", "custom-webhook/nope")
    assert unknown.returncode != 0 and "no such notification block" in unknown.stderr
    for _ in range(2):  # applying twice replaces the automation, never doubles it
        done = remedy_cli(prefect_api_url, "automation", "--block", f"custom-webhook/{block_name}")
        assert done.returncode == 0, done.stderr
    assert "remedy gave up" in done.stdout
    with get_client(sync_client=True) as client:
        automations = client.read_automations_by_name("remedy gave up")
    assert len(automations) == 1 and automations[0].enabled

    # a real run that gives up: the retraining budget ends a job that fails once
    run_dir = tmp_path / "gives-up"
    spec = RunSpec(entry_point="tests.jobs.entry_points.flaky", rules=[])
    flow_state = remediate(
        state=State(run_spec=spec, budgets=Budgets(max_num_retraining=1)),
        run_dir=str(run_dir),
        settings=RemediateSettings(poll_interval_s=0.3),
        return_state=True,
    )
    assert flow_state.is_failed(), flow_state  # the Failed filter and state automations see it
    final = flow_state.result(raise_on_failure=False)
    assert final.end_reason.startswith("max_num_retraining (1) reached; the last attempt: ")

    # sent by the server's automation; the session's server may still be reacting to runs of
    # earlier tests (a search's candidates that gave up), so those are passed over
    name = run_name(str(run_dir))
    notification = next_about(received, name, timeout=120)
    body = notification["body"]
    assert body.startswith(f"remedy gave up on {name} after 1 attempts: max_num_retraining (1)")
    assert "Last job: " in body
    with pytest.raises(queue.Empty):  # once
        next_about(received, name, timeout=3)


def next_about(received: queue.Queue, name: str, timeout: float) -> dict:
    """The next notification received about the run `name`, passing over other runs'."""
    deadline = time.monotonic() + timeout
    while True:
        notification = received.get(timeout=max(0.0, deadline - time.monotonic()))
        if notification["subject"] == f"remedy gave up on {name}":
            return notification
