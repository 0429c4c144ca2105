"""Human-readable summaries of a state, with secrets taken out.

Everything that leaves the process as a message (notifications, logs) goes through
`redact`: role ARNs, credentials in URLs, access keys and tokens never appear.
"""

from __future__ import annotations

import json
import re
from typing import Any

from remedy.records.metric_columns import metric_names
from remedy.records.verdict import run_is_clean
from remedy.state_schema import Attempt, Payload, State

_PATTERNS = [
    (re.compile(r"arn:aws[a-z-]*:[a-z0-9-]*:[a-z0-9-]*:\d{12}:[^\s\"',]+"), "arn:***"),
    (re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+"), "<url>"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "<access-key>"),
    (
        re.compile(r"(?i)\b(token|secret|password|passwd|api[_-]?key)(\s*[=:]\s*)[^\s,;\"']+"),
        r"\1\2***",
    ),
]
# run_spec fields that name cloud resources or identities: never put in a message.
PRIVATE_FIELDS = ("sm_role", "bucket")


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def payload_for_people(state: State) -> str:
    """The payload as JSON for a screen or a log: the PRIVATE_FIELDS of every run_spec
    hidden (state.json and --state-out keep them; a payload shown to people does not)."""

    def hidden(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                key: "<hidden>" if key in PRIVATE_FIELDS and item is not None else hidden(item)
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [hidden(item) for item in value]
        return value

    return json.dumps(hidden(Payload(state=state).model_dump(mode="json")), indent=2)


def fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def cell(value: object) -> str:
    """A run_spec value in a table: a script's flag as given, "-" where it has none."""
    if value is None:
        return "-"
    return fmt(value) if isinstance(value, float) else str(value)


def metric_cells(metrics: dict[str, float], names: list[str]) -> list[str]:
    """An attempt's final metrics under the run's metric columns, "-" where it has none."""
    return [fmt(metrics.get(name)) for name in names]


def metrics_text(metrics: dict[str, float], names: list[str]) -> str:
    """`test:perplexity 148.4, train:loss 4.873`: final metrics under the run's columns."""
    found = [f"{name} {fmt(metrics[name])}" for name in names if name in metrics]
    return ", ".join(found) or "none reported"


# The roles the table shows (label, role): a script shows those it maps, not the ResNet's.
ROLE_COLUMNS = [
    ("warmup_lr", "warmup_learning_rate"),
    ("lr", "learning_rate"),
    ("bn", "add_batch_norm"),
]


def role_columns(state: State) -> list[tuple[str, str]]:
    specs = [attempt.spec for attempt in state.history.attempts] or [state.run_spec]
    return [
        (label, role)
        for label, role in ROLE_COLUMNS
        if any(spec.is_builtin or role in spec.hyperparameter_roles for spec in specs)
    ]


def attempt_row(
    number: int, attempt: Attempt, roles: list[tuple[str, str]], metrics: list[str]
) -> list[str]:
    spec = attempt.spec
    finding = attempt.findings[0] if attempt.findings else None
    found = "-" if finding is None else finding.rule
    if finding is not None and finding.step is not None:
        found += f" @ step {finding.step}"
    return [
        str(number),
        attempt.strategy or "initial",
        *(cell(spec.role_as_given(role)) for _, role in roles),
        str(attempt.steps_run),
        found,
        attempt.outcome.value if attempt.outcome else "running",
        *metric_cells(attempt.metrics, metrics),
    ]


def attempt_rows(state: State) -> list[list[str]]:
    """The attempt table, its header first: the roles the job has, the metrics it reports."""
    roles, metrics = role_columns(state), metric_names(state)
    header = ["#", "strategy", *(label for label, _ in roles), "steps", "finding", "outcome"]
    return [header + metrics] + [
        attempt_row(i, attempt, roles, metrics)
        for i, attempt in enumerate(state.history.attempts, start=1)
    ]


def attempt_table(state: State) -> str:
    """A plain-text table of every attempt, aligned for a terminal or a phone."""
    rows = attempt_rows(state)
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    return "\n".join(line.rstrip() for line in lines)


def public_state_json(state: State) -> str:
    """The payload for messages: private run_spec fields removed, then redacted."""
    data = state.model_dump(mode="json", exclude={"history": {"attempts"}})
    for field in PRIVATE_FIELDS:
        data["run_spec"].pop(field, None)
    return redact(json.dumps(data, indent=1, sort_keys=True))


def repro_lines(state: State) -> list[str]:
    """Per attempt the NaN guard stopped: its repro bundle, where it localised, bad records."""
    lines = []
    for number, attempt in enumerate(state.history.attempts, start=1):
        for f in attempt.findings:
            if f.bundle is None:
                continue
            where = f"; first non-finite: {f.localisation}" if f.localisation else ""
            lines.append(f"Attempt {number}: remedy repro {f.bundle}{where}")
            if (problem := f.data_problem) is not None:
                records = ", ".join(
                    f"{i} ({s})" for i, s in zip(problem.samples, problem.shards, strict=False)
                )
                lines.append(f"  bad records, failed {problem.failures}x: samples {records}")
    return [""] + lines if lines else []


def retraining_message(state: State) -> tuple[str, str]:
    attempt = state.current_attempt
    findings = state.findings
    found = "; ".join(
        f"{f.rule} at step {f.step} on {f.tensor}" if f.step is not None else f.rule
        for f in findings
    )
    change = state.planned_change
    title = f"remedy: retraining {state.run_spec.base_job_name}"
    body = [
        f"Found: {found or 'an issue'} (job {attempt.job_name if attempt else '?'}).",
        f"Next: {change.reason}." if change else "Next: relaunch unchanged.",
        "",
        attempt_table(state),
        *repro_lines(state),
    ]
    return title, redact("\n".join(body))


def final_message(state: State) -> tuple[str, str]:
    attempt = state.current_attempt
    verb = "completed" if run_is_clean(state) else "gave up"
    title = f"remedy: {state.run_spec.base_job_name} {verb}"
    body = [
        f"Run {verb}: {state.end_reason or ''}".rstrip(),
        f"Attempts: {len(state.history.attempts)}; final metrics: "
        f"{metrics_text(attempt.metrics if attempt else {}, metric_names(state))}.",
        "",
        attempt_table(state),
        *repro_lines(state),
    ]
    return title, redact("\n".join(body))
