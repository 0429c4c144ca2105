"""The report server of `remedy serve`, and which URL a run's report link gets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from remedy.outlets.publish import report_url
from remedy.outlets.report_server import REPORTS_URL_ENV, reports_url, start_report_server
from remedy.records.run_folder import RUNS_DIR_ENV


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / "search-1" / "candidate-001"
    (run / "report").mkdir(parents=True)
    (run / "report" / "index.html").write_text("<html>the report</html>")
    (run / "report" / "loss.png").write_bytes(b"\x89PNG")
    (run / "state.json").write_text("{}")
    return tmp_path / "runs"


@pytest.fixture
def base_url(runs: Path) -> Iterator[str]:
    server = start_report_server(runs, "127.0.0.1", 0)
    try:
        yield reports_url(server)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_serves_the_files_of_reports_and_nothing_else(base_url: str) -> None:
    run = f"{base_url}/search-1/candidate-001"
    assert httpx.get(f"{run}/report/index.html").text == "<html>the report</html>"
    assert httpx.get(f"{run}/report/loss.png").content == b"\x89PNG"
    for private in ("state.json", "report/", "report/missing.html", "report/%2e%2e/state.json"):
        assert httpx.get(f"{run}/{private}").status_code == 404, private
    assert httpx.get(f"{base_url}/").status_code == 404  # no listing of the runs


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_no_link_and_no_run_called_report_opens_anything_else(runs: Path, base_url: str) -> None:
    run = runs / "search-1" / "candidate-001"
    (run / "report" / "passwd.html").symlink_to("/etc/passwd")  # a link inside a report
    (run / "report" / "state.html").symlink_to(run / "state.json")
    (run / "report" / "jobs").symlink_to(run)  # a linked folder
    named_report = runs / "report"  # a run directory that is called "report"
    (named_report / "jobs").mkdir(parents=True)
    (named_report / "state.json").write_text('{"secret": 1}')
    (named_report / "jobs" / "log.txt").write_text("a job's log")
    for path in (
        "search-1/candidate-001/report/passwd.html",
        "search-1/candidate-001/report/state.html",
        "search-1/candidate-001/report/jobs/state.json",
        "report/state.json",
        "report/jobs/log.txt",
        "search-1/report/candidate-001/state.json",
    ):
        assert httpx.get(f"{base_url}/{path}").status_code == 404, path


def test_report_links_use_the_server_for_runs_under_its_directory(
    runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = runs / "search-1" / "candidate-001" / "report"
    elsewhere = tmp_path / "elsewhere" / "report"
    monkeypatch.setenv(RUNS_DIR_ENV, str(runs))
    monkeypatch.delenv(REPORTS_URL_ENV, raising=False)
    assert report_url(report) == (report / "index.html").resolve().as_uri()  # not served
    monkeypatch.setenv(REPORTS_URL_ENV, "http://host:4201")
    assert report_url(report) == "http://host:4201/search-1/candidate-001/report/index.html"
    assert report_url(elsewhere) == (elsewhere / "index.html").resolve().as_uri()
