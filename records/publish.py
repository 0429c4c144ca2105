"""What a person sees in the Prefect UI while a run goes, and what automations react to.

- a progress artifact per flow run: the current job's share of its steps, with the attempt,
  step and rule statuses in its description;
- a markdown artifact (key remedy-<run>-attempts) with the attempt table and the latest
  finding, rewritten after every transition;
- events remedy.issues_found, remedy.retraining, remedy.completed and remedy.gave_up on the
  resource remedy.run.<run>, so Prefect automations can notify or trigger on them;
- at the run's end, a link artifact (key remedy-<run>-report) to its HTML report, which
  the attempts artifact mentions too: on the report server of `remedy serve` when it serves
  the run, else a file:// URL on the machine that ran the flow.
Everything published goes through redact(): no role ARN, URL or token reaches the UI; the
report's URL is ours, added after redaction.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote
from uuid import UUID

from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    update_progress_artifact,
)
from prefect.events import emit_event
from prefect.runtime import flow_run
from remedy.jobs import JobSnapshot
from remedy.records.messages import attempt_rows, redact
from remedy.records.report_server import REPORTS_URL_ENV
from remedy.records.run_folder import runs_root
from remedy.state_schema import State

EVENTS = ("issues_found", "retraining", "completed", "gave_up")
_progress_artifacts: dict[UUID, UUID] = {}  # flow run -> its progress artifact


def slug(text: str) -> str:
    """Artifact keys allow lowercase letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "run"


def run_name(run_dir: str) -> str:
    return slug(run_dir.rstrip("/").rsplit("/", 1)[-1])


def _flow_run_id() -> UUID | None:
    """The flow run this code runs in (from a task or the flow), else None."""
    run_id = flow_run.id
    return UUID(run_id) if run_id else None


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
        _progress_artifacts[flow_run_id] = create_progress_artifact(
            percent, description=description
        )
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
    if state.planned_change:
        lines.append(f"**Next:** {state.planned_change.reason}")
    if state.end_reason:
        lines.append(f"**Ended:** {state.end_reason}")
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


def publish_attempts(state: State, run_dir: str, report_dir: str | None = None) -> None:
    if _flow_run_id() is None:
        return
    markdown = attempts_markdown(state)
    if report_dir is not None:
        markdown += f"\n\n**Report:** [report/index.html]({report_url(report_dir)})"
    create_markdown_artifact(
        markdown,
        key=f"remedy-{run_name(run_dir)}-attempts",
        description="Attempts of this remediation run",
    )


def publish_report(report_dir: str, run_dir: str) -> None:
    """A link artifact from this flow run to its HTML report."""
    if _flow_run_id() is None:
        return
    create_link_artifact(
        report_url(report_dir),
        link_text=f"HTML report of {run_name(run_dir)}",
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
