"""What the Prefect UI and automations get from a run: artifacts and events."""

from __future__ import annotations

import base64
import re
import socket
from pathlib import Path
from types import SimpleNamespace
from uuid import UUID

import httpx

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.outlets.publish import run_name
from remedy.state_schema import RunSpec, State
from tests.helpers.events import events_of

ROLE = "arn:aws:iam::123456789012:role/secret-role"


def run_quick(tmp_path: Path) -> UUID:
    spec = RunSpec(entry_point="tests.jobs.entry_points.flaky", rules=[], sm_role=ROLE)
    run_dir = tmp_path / "publish-run"
    final = remediate(
        state=State(run_spec=spec),
        run_dir=str(run_dir),
        settings=RemediateSettings(poll_interval_s=0.3),
        return_state=True,
    )
    return final.state_details.flow_run_id


def test_artifacts_and_events_of_a_run(prefect_api_url: str, tmp_path: Path) -> None:
    flow_run_id = run_quick(tmp_path)
    response = httpx.post(
        f"{prefect_api_url}/artifacts/filter",
        json={
            "artifacts": {"flow_run_id": {"any_": [str(flow_run_id)]}},
            "sort": "CREATED_DESC",
            "limit": 50,
            "offset": 0,
        },
    )
    response.raise_for_status()
    artifacts = [SimpleNamespace(**a) for a in response.json()]
    by_type = {artifact.type: artifact for artifact in reversed(artifacts)}
    by_key = {artifact.key: artifact for artifact in reversed(artifacts)}  # the newest
    assert {"markdown", "progress"} <= set(by_type)
    markdown = by_key["remedy-publish-run-attempts"]  # the final table
    assert "relaunch_unchanged" in markdown.data and "Completed" in markdown.data
    assert ROLE not in markdown.data

    # the run's end wrote its HTML report; the run page shows the report itself (what a
    # pool worker's run shows too), and, with no report server here, where its file lies
    report = tmp_path / "publish-run" / "report" / "index.html"
    assert report.is_file()
    shown = by_key["remedy-publish-run-report"]
    assert shown.type == "markdown"
    assert shown.data.startswith("# remedy run publish-run\n")
    assert "relaunch_unchanged" in shown.data  # the attempt table
    plots = re.findall(r"^!\[plot\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)$", shown.data, re.M)
    assert plots and all(base64.b64decode(plot).startswith(b"\x89PNG") for plot in plots)
    where = f"**Report:** `{report.resolve()}` on {socket.gethostname()} (no report server"
    assert where in shown.data and where in markdown.data
    assert "file://" not in shown.data + markdown.data and ROLE not in shown.data
    assert 0.0 <= float(by_type["progress"].data) <= 100.0
    # Quiet: the attempts artifact once per launch and once at the end (2 attempts), not per
    # poll or transition
    assert [a.key for a in artifacts].count("remedy-publish-run-attempts") == 3

    # A handful of task runs per attempt, whatever the polls
    response = httpx.post(
        f"{prefect_api_url}/task_runs/filter",
        json={"flow_runs": {"id": {"any_": [str(flow_run_id)]}}, "limit": 200, "offset": 0},
    )
    response.raise_for_status()
    names = [run["name"].rsplit("-", 1)[0] for run in response.json()]
    once = ["check_spec", "open_run", "ensure_launched", "report", "announce_end", "finish"]
    assert sorted(set(once) & set(names)) == sorted(once) and all(names.count(n) == 1 for n in once)
    per_attempt = [name for name in names if name not in once]
    # train, its launch_job and a monitor call per transition (2 or 3 here): no record per
    # transition, nothing per poll
    assert per_attempt.count("train") == 2 and len(per_attempt) <= 2 * 5, sorted(names)

    resource = f"remedy.run.{run_name(str(tmp_path / 'publish-run'))}"
    completed = events_of(resource, "remedy.completed")
    assert len(completed) == 1
    assert completed[0].payload["attempt"] == 2
    assert events_of(resource, "remedy.gave_up", timeout=0) == []
