"""A run's report published to an object store (REMEDY_REPORTS_S3), against moto's real S3
server: what a pool worker's run links instead of a file on the worker."""

from __future__ import annotations

from pathlib import Path

import boto3
import httpx
import pytest
from prefect import flow

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.outlets.notifications import NOTIFY_URLS_ENV
from remedy.outlets.report_store import REPORTS_S3_ENV, reports_store
from remedy.state_schema import RunSpec, State
from remedy.tasks.notify import report_location
from remedy.tasks.preflight import PreflightError, preflight
from tests.helpers.receiver import Receiver

BUCKET = "remedy-reports"


@pytest.fixture
def s3_reports(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """boto3's usual chain aimed at the moto server, a bucket, REMEDY_REPORTS_S3 on it."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREMEDYTESTKEY000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "remedy-test-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    monkeypatch.setenv(REPORTS_S3_ENV, f"s3://{BUCKET}/team/runs/")
    return moto_server


@pytest.mark.slow
def test_a_report_is_uploaded_and_linked_by_a_presigned_url(
    prefect_api_url: str,
    s3_reports: str,
    receiver: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(NOTIFY_URLS_ENV, receiver)
    final = remediate(
        state=State(run_spec=RunSpec(entry_point="tests.jobs.entry_points.quick", rules=[])),
        run_dir=str(tmp_path / "worker-run"),
        settings=RemediateSettings(poll_interval_s=0.3),
        return_state=True,
    )
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="team/runs/")
    keys = {item["Key"] for item in listed.get("Contents", [])}
    assert {
        "team/runs/worker-run/report/index.html",
        "team/runs/worker-run/report/report.md",
    } <= keys

    (message,) = Receiver.received
    (link,) = [line.removeprefix("Report: ") for line in message["message"].splitlines()
               if line.startswith("Report: ")]  # fmt: skip
    assert link.startswith(f"{s3_reports}/{BUCKET}/team/runs/worker-run/report/index.html?")
    assert "X-Amz-Signature=" in link and "remedy-test-secret" not in link
    page = httpx.get(link)  # what a browser gets from the link, no credentials of its own
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "worker-run" in page.text and 'src="data:image/png;base64,' in page.text
    # the bucket and the key id are in the link alone
    rest = message["title"] + message["message"].replace(link, "")
    assert BUCKET not in rest and "AKIAREMEDYTESTKEY000" not in rest

    response = httpx.post(
        f"{prefect_api_url}/artifacts/filter",
        json={
            "flow_runs": {"id": {"any_": [str(final.state_details.flow_run_id)]}},
            "sort": "CREATED_DESC",
        },
    )
    response.raise_for_status()
    artifacts: dict[str, str] = {}
    for artifact in response.json():  # the latest of each key (attempts is rewritten)
        artifacts.setdefault(artifact["key"], artifact["data"])
    for key in ("remedy-worker-run-report", "remedy-worker-run-attempts"):
        assert f"**Report:** [report/index.html]({link})" in artifacts[key]
        assert "file://" not in artifacts[key]


def test_a_bad_store_setting_is_refused_before_a_launch(monkeypatch) -> None:
    monkeypatch.delenv(REPORTS_S3_ENV, raising=False)
    assert reports_store() is None
    monkeypatch.setenv(REPORTS_S3_ENV, "s3://bucket")
    assert reports_store() == ("bucket", "")
    monkeypatch.setenv(REPORTS_S3_ENV, "https://bucket.example.com/reports")
    with pytest.raises(PreflightError, match=f"{REPORTS_S3_ENV}: expected s3://bucket"):
        preflight(RunSpec(entry_point="tests.jobs.entry_points.quick", rules=[]))


def test_a_failed_upload_names_the_reports_file_instead(
    prefect_api_url: str, s3_reports: str, tmp_path: Path, monkeypatch, caplog
) -> None:
    """NoSuchBucket is no outage: not retried; the run goes on, naming its file."""
    report = tmp_path / "run" / "report"
    report.mkdir(parents=True)
    (report / "index.html").write_text("<html></html>")
    monkeypatch.setenv(REPORTS_S3_ENV, "s3://no-such-bucket/runs")

    @flow(name="report-store-probe")
    def probe() -> str:
        return report_location(str(report), str(tmp_path / "run"))

    assert probe() == (report / "index.html").resolve().as_uri()
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("prefect.")]
    assert any(f"report not uploaded to {REPORTS_S3_ENV} (" in line for line in ours)
    assert not any("no-such-bucket" in line for line in ours)  # nor in the run's logs
