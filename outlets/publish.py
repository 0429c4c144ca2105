"""What a person sees in the Prefect UI while a run goes, and what automations react to.

- a progress artifact per flow run: the current job's share of its steps, with the attempt,
  step and rule statuses in its description;
- a markdown artifact (key remedy-<run>-attempts) with the attempt table and the latest
  finding, rewritten after every transition;
- the flow run's parameters with the role ARN and bucket hidden (hide_parameters: a run
  started from the form or the API may have given them; its run folder keeps them);
- events remedy.issues_found, remedy.retraining, remedy.completed and remedy.gave_up on the
  resource remedy.run.<run>, so Prefect automations can notify or trigger on them;
- at the run's end, its report itself as a markdown artifact (key remedy-<run>-report:
  summary, attempt table and plots inline), so the UI shows it whichever machine ran the
  flow (a pool worker included); it and the attempts artifact link the HTML report when it
  was uploaded to an object store (REMEDY_REPORTS_S3, report_store.py) or a report server
  serves the run (`remedy serve`, or REMEDY_REPORTS_URL), and otherwise name its file and
  the machine it lies on (a file:// link opens from no web page).
Everything published goes through redact(): no role ARN, URL or token reaches the UI; the
report's URL is ours, added after redaction.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from urllib.parse import quote
from uuid import UUID

from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    update_progress_artifact,
)
from prefect.events import emit_event
from prefect.runtime import flow_run

from remedy.jobs import JobSnapshot
from remedy.outlets.messages import attempt_rows, redact
from remedy.outlets.report_server import REPORTS_URL_ENV
from remedy.outlets.report_store import REPORTS_S3_ENV
from remedy.records.best_model import best_model
from remedy.records.run_folder import REPORT_MARKDOWN, runs_root
from remedy.state_schema import State
from remedy.state_schema.private import hide_private

EVENTS = ("issues_found", "retraining", "completed", "gave_up")
_progress_artifacts: dict[UUID, UUID] = {}  # flow run -> its progress artifact
MAX_REPORT_ARTIFACT_CHARS = 4_000_000  # a report artifact with its plots (~100 kB each)


def slug(text: str) -> str:
    """Artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "run"


def run_name(run_dir: str) -> str:
    return slug(run_dir.rstrip("/").rsplit("/", 1)[-1])


def _flow_run_id() -> UUID | None:
    """The flow run this code runs in (from a task or the flow), else None."""
    run_id = flow_run.id
    return UUID(run_id) if run_id else None


def hide_parameters() -> None:
    """Rewrite this flow run's parameters on the server with every private run_spec field
    HIDDEN, when they hold one (the flow has its values in memory already)."""
    from prefect.client.orchestration import get_client

    run_id = _flow_run_id()
    if run_id is None:
        return
    with get_client(sync_client=True) as client:
        parameters = client.read_flow_run(run_id).parameters
        hidden = hide_private(parameters)
        if hidden != parameters:
            client.update_flow_run(run_id, parameters=hidden)


def flow_run_url() -> str | None:
    """The UI page of the flow run this code runs in, when the UI's URL is known."""
    from prefect.utilities.urls import url_for

    run_id = flow_run.id
    return url_for("flow-run", obj_id=run_id) if run_id else None


def publish_progress(state: State, job: JobSnapshot, line: str) -> None:
    """Create or update this flow run's progress artifact from a job snapshot."""
    flow_run_id = _flow_run_id()
    if flow_run_id is None:
        return
    progress = job.progress
    total = progress.total_steps if progress else None
    percent = min(100.0, 100.0 * progress.step / total) if progress and total else 0.0
    description = redact(line)
    artifact = _progress_artifacts.get(flow_run_id)
    if artifact is None:
        created = create_progress_artifact(percent, description=description)
        assert isinstance(created, UUID)  # called from sync code: not a coroutine
        _progress_artifacts[flow_run_id] = created
    else:
        update_progress_artifact(artifact, percent, description=description)


def attempts_markdown(state: State) -> str:
    rows = attempt_rows(state)
    table = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    table += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    lines = [f"# remedy: {state.run_spec.base_job_name}", "", *table, ""]
    for finding in state.findings:
        where = f" at step {finding.step} on `{finding.tensor}`" if finding.step is not None else ""
        lines.append(f"**Latest finding:** {finding.rule}{where}: {finding.message}")
    if state.planned_change and not state.end_reason:  # ended: nothing comes next
        lines.append(f"**Next:** {state.planned_change.reason}")
    if state.end_reason:
        lines.append(f"**Ended:** {state.end_reason}")
        if best := best_model(state):
            lines.append(f"**Best model trained:** {best}")
    return redact("\n".join(lines))


def report_url(report_dir: str | Path) -> str:
    """URL of a run's HTML report (RUN_DIR/report/index.html): on the report server of
    `remedy serve` when the run lies under the runs directory it serves, else file://."""
    index = (Path(report_dir) / "index.html").resolve()
    served = os.environ.get(REPORTS_URL_ENV)
    runs = runs_root().resolve()
    if served and index.is_relative_to(runs):
        return f"{served.rstrip('/')}/{quote(index.relative_to(runs).as_posix())}"
    return index.as_uri()


def publish_attempts(
    state: State, run_dir: str, report_dir: str | None = None, url: str | None = None
) -> None:
    """The attempts artifact; `url`: where the report opens (default report_url)."""
    if _flow_run_id() is None:
        return
    markdown = attempts_markdown(state)
    if report_dir is not None:
        markdown += f"\n\n{report_link(report_dir, url)}"
    create_markdown_artifact(
        markdown,
        key=f"remedy-{run_name(run_dir)}-attempts",
        description="Attempts of this remediation run",
    )


def report_link(report_dir: str | Path, url: str | None = None) -> str:
    """Markdown for where the HTML report opens: a link when it is on the web (`url`: the
    object store's; else a report server's), else its path and the machine it lies on."""
    url = url or report_url(report_dir)
    if url.startswith(("http://", "https://")):
        return f"**Report:** [report/index.html]({url})"
    where = (Path(report_dir) / "index.html").resolve()
    return (
        f"**Report:** `{where}` on {socket.gethostname()} (no report server serves this run: "
        f"`remedy serve` does, or set {REPORTS_URL_ENV} or {REPORTS_S3_ENV})"
    )


def report_markdown(report_dir: str | Path, url: str | None = None) -> str:
    """The run's report (report.md) for its artifact: text redacted, our own plots kept
    (left out past MAX_REPORT_ARTIFACT_CHARS), and where the HTML report opens."""
    path = Path(report_dir) / REPORT_MARKDOWN
    text = path.read_text() if path.is_file() else ""  # a report folder of an older remedy
    lines = text.splitlines()
    plot = re.compile(r"^!\[plot\]\(data:image/png;base64,[A-Za-z0-9+/=]+\)$")
    if len(text) > MAX_REPORT_ARTIFACT_CHARS:
        lines = [line for line in lines if not plot.match(line)]
        lines.append(f"_Plots left out ({len(text) // 1_000_000} MB): see the HTML report._")
    kept = "\n".join(line if plot.match(line) else redact(line) for line in lines)
    return f"{kept}\n\n{report_link(report_dir, url)}\n"


def publish_report(report_dir: str, run_dir: str, url: str | None = None) -> None:
    """The run's report as a markdown artifact of this flow run (summary, attempts, plots)."""
    if _flow_run_id() is None:
        return
    create_markdown_artifact(
        report_markdown(report_dir, url),
        key=f"remedy-{run_name(run_dir)}-report",
        description="Every attempt with its curves, findings and gradient norms",
    )


def publish_event(name: str, state: State, run_dir: str) -> None:
    if name not in EVENTS:
        raise ValueError(f"unknown remedy event {name!r}; known: {', '.join(EVENTS)}")
    attempt = state.current_attempt
    payload = {
        "attempt": state.history.num_retraining,
        "job": state.history.latest_job_name,
        "findings": [f.model_dump(mode="json") for f in state.findings],
        "next": state.planned_change.reason if state.planned_change else None,
        "end_reason": state.end_reason,
        "final_accuracy": attempt.final_accuracy if attempt else None,
    }
    emit_event(
        event=f"remedy.{name}",
        resource={
            "prefect.resource.id": f"remedy.run.{run_name(run_dir)}",
            "prefect.resource.name": run_name(run_dir),
        },
        payload={
            key: redact(value) if isinstance(value, str) else value
            for key, value in payload.items()
        },
    )
