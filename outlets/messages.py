"""Human-readable summaries of a state, with secrets taken out.

Everything that leaves the process as a message (notifications, logs) goes through
`redact`: role ARNs, credentials in URLs, access keys and tokens never appear.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from remedy.outlets.metric_columns import metric_names
from remedy.records.best_model import best_model
from remedy.records.verdict import run_is_clean
from remedy.state_schema import (
    Attempt,
    AttemptKind,
    Finding,
    JobStatus,
    Payload,
    ResultKind,
    State,
)
from remedy.state_schema.private import hide_private

if TYPE_CHECKING:
    from rich.table import Table

_PATTERNS = [
    (re.compile(r"arn:aws[a-z-]*:[a-z0-9-]*:[a-z0-9-]*:\d{12}:[^\s\"',]+"), "arn:***"),
    (re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+"), "<url>"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "<access-key>"),
    (
        re.compile(r"(?i)\b(token|secret|password|passwd|api[_-]?key)(\s*[=:]\s*)[^\s,;\"']+"),
        r"\1\2***",
    ),
]


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def payload_for_people(state: State) -> str:
    """The payload as JSON for a screen or a log: the PRIVATE_FIELDS of every run_spec
    hidden (state.json and --state-out keep them; a payload shown to people does not)."""
    return json.dumps(hide_private(Payload(state=state).model_dump(mode="json")), indent=2)


def fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def cell(value: object) -> str:
    """A run_spec value in a table: a script's flag as given, "-" where it has none."""
    if value is None:
        return "-"
    return fmt(value) if isinstance(value, float) else str(value)


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
        (label, role) for label, role in ROLE_COLUMNS if any(spec.has_role(role) for spec in specs)
    ]


def strategy_cell(attempt: Attempt) -> str:
    """What produced the attempt: initial, a strategy, or probe:STRATEGY (a short candidate
    tried beside others; one word, so a terminal table splits on spaces)."""
    name = attempt.strategy or "initial"
    return f"probe:{name}" if attempt.kind is AttemptKind.probe else name


# A column of the attempt table: its title, and its cell for (attempt number, attempt).
Column = tuple[str, Callable[[int, Attempt], str]]


def compact_columns(state: State) -> list[Column]:
    """A terminal's or a notification's table: the roles the job has (a script shows those
    it maps, not the ResNet's), the first finding in a narrow column, the metrics."""
    return [
        ("#", lambda number, _: str(number)),
        ("strategy", lambda _, a: strategy_cell(a)),
        *(role_column(label, role) for label, role in role_columns(state)),
        ("steps", lambda _, a: str(a.steps_run)),
        ("finding", lambda _, a: finding_text(a.findings[0], tensor=False) if a.findings else "-"),
        outcome_column(state),
        *metric_columns(state),
    ]


def detailed_columns(state: State) -> list[Column]:
    """The report's table: why each strategy, what it changed, every finding, the job's
    time and final loss (the test loss when the job reports one, else the latest
    training loss), then the metrics."""
    return [
        ("#", lambda number, _: str(number)),
        ("strategy", lambda _, a: strategy_cell(a)),
        ("why", lambda _, a: a.strategy_reason or ""),
        (
            "spec diff",
            lambda _, a: ", ".join(f"{k}: {v[0]} -> {v[1]}" for k, v in a.changes.items()),
        ),
        ("findings", lambda _, a: "; ".join(finding_text(f) for f in a.findings) or "-"),
        ("steps", lambda _, a: str(a.steps_run)),
        ("s", lambda _, a: fmt(a.duration_s, 3)),
        ("loss", lambda _, a: fmt(a.final_loss)),
        *metric_columns(state),
        outcome_column(state),
    ]


def role_column(label: str, role: str) -> Column:
    return label, lambda _, a: cell(a.spec.role_as_given(role))


def metric_columns(state: State) -> list[Column]:
    """The run's metrics, "-" where an attempt has none."""
    return [(name, metric_cell(name)) for name in metric_names(state)]


def metric_cell(name: str) -> Callable[[int, Attempt], str]:
    return lambda _, a: fmt(a.metrics.get(name))


def outcome_column(state: State) -> Column:
    """How each job ended; a probe the next run went on from did not end: it is that run
    (its job status stays the InProgress it was judged in)."""
    went_on = {a.continues: n for n, a in enumerate(state.history.attempts, 1) if a.continues}

    def outcome(_: int, attempt: Attempt) -> str:
        if attempt.kind is AttemptKind.probe and attempt.job_name in went_on:
            return f"went on as #{went_on[attempt.job_name]}"
        word = attempt.outcome.value if attempt.outcome else "running"
        if (judged := at_rung(attempt)) is not None:  # the flow's judgement, not a rule's
            return f"{word} at its rung, {judged}"
        if attempt.outcome not in (None, JobStatus.InProgress):
            return word
        # asked at half its length, it waits there (a hold its job has yet to say, once it
        # measured an epoch, is not shown: a job without a DataLoader never says one)
        return f"{word}, holds at {attempt.hold_at}" if attempt.hold_at is not None else word

    return "outcome", outcome


def at_rung(attempt: Attempt) -> str | None:
    """How a probe the flow stopped at its rung was judged there (strategies/probes.py:
    outpaced, or diverged: its result says so, no finding does); None for any other."""
    result = attempt.result
    if attempt.kind is not AttemptKind.probe or attempt.findings or result is None:
        return None
    return result.kind.value if result.kind in (ResultKind.outpaced, ResultKind.diverged) else None


def attempt_rows(state: State, *, detailed: bool = False) -> list[list[str]]:
    """The attempt table, its header first, one row per attempt: compact_columns, or
    detailed_columns for the report."""
    columns = detailed_columns(state) if detailed else compact_columns(state)
    return [[title for title, _ in columns]] + [
        [make(number, attempt) for _, make in columns]
        for number, attempt in enumerate(state.history.attempts, start=1)
    ]


def rich_table(rows: list[list[str]]) -> Table:
    """Rows (the header first) as a rich table without borders, for a terminal."""
    from rich.table import Table

    header, *body = rows
    table = Table(*header, box=None, pad_edge=False, header_style="bold")
    for row in body:
        table.add_row(*row)
    return table


def text_table(rows: list[list[str]]) -> str:
    """Rows (the header first) as plain text, aligned (rich lays it out), never wrapped."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=10_000, color_system=None, record=True)
    console.print(rich_table(rows))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def attempt_rich_table(state: State) -> Table:
    """Every attempt as a rich table without borders, for a terminal."""
    return rich_table(attempt_rows(state))


def attempt_table(state: State) -> str:
    """The attempt table as plain text."""
    return text_table(attempt_rows(state))


def why_lines(state: State) -> list[str]:
    """Per attempt, why its strategy was chosen (what the policy read in the attempts
    before it: a bracket, probes, a change undone) and what its outcome taught."""
    lines = []
    for number, attempt in enumerate(state.history.attempts, start=1):
        lines.append(f"#{number} {strategy_cell(attempt)}: {attempt.strategy_reason or '-'}")
        if attempt.result is not None:
            lines.append(f"   result: {attempt.result.summary}")
    return lines


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


@dataclass(frozen=True)
class Message:
    """A message for people, rendered for what each target shows: `text` for plain-text
    targets (`row_lines`, a line per row: nothing to align on a phone), `markdown` for chat
    and mail (`rows` as a table; apprise turns it into HTML for targets that take HTML). The
    opening line is a complete sentence. Everything is redacted but `links`: ours (the flow
    run's page, the report), added after redaction. `title, body = message` gives the text
    body."""

    title: str
    opening: list[str]
    rows: list[list[str]] = dataclasses.field(default_factory=list)  # a table, header first
    row_lines: list[str] = dataclasses.field(default_factory=list)  # its rows as plain text
    notes: list[str] = dataclasses.field(default_factory=list)
    links: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (label, URL)

    def text(self) -> str:
        lines = [redact(line) for line in self.opening]
        if self.row_lines:
            lines += ["", *(redact(line) for line in self.row_lines)]
        lines += [redact(line) for line in self.notes]
        lines += [f"{label}: {url}" for label, url in self.links]
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [redact(line) for line in self.opening]
        if self.rows:
            lines += ["", *(redact(line) for line in markdown_table(self.rows))]
        lines += [redact(line) for line in self.notes]
        if self.links:
            lines += ["", " · ".join(f"[{label}]({url})" for label, url in self.links)]
        return "\n".join(lines)

    def with_links(self, *links: tuple[str, str | None]) -> Message:
        known = [(label, url) for label, url in links if url]
        return dataclasses.replace(self, links=self.links + known)

    def __iter__(self) -> Iterator[str]:
        return iter((self.title, self.text()))


def attempt_lines(rows: list[list[str]]) -> list[str]:
    """`1. initial: warmup_lr 0.1, lr 0.1, bn 0; 10 steps; ExplodingTensor @ step 5;
    Stopped`: an attempt per line, its values named (metrics only where reported)."""
    header, *body = rows
    lines = []
    for row in body:
        values = dict(zip(header, row, strict=True))
        roles = [f"{name} {values[name]}" for name in header[2:] if name in ROLE_LABELS]
        after = header[header.index("outcome") + 1 :]
        metrics = [f"{name} {values[name]}" for name in after if values[name] != "-"]
        parts = [
            f"{row[0]}. {row[1]}" + (f": {', '.join(roles)}" if roles else ""),
            f"{values['steps']} steps",
            *([] if values["finding"] == "-" else [values["finding"]]),
            values["outcome"],
            *metrics,
        ]
        lines.append("; ".join(parts))
    return lines


ROLE_LABELS = frozenset(label for label, _ in ROLE_COLUMNS)


def markdown_table(rows: list[list[str]]) -> list[str]:
    escape = [[cell.replace("|", "\\|") for cell in row] for row in rows]
    return [
        "| " + " | ".join(escape[0]) + " |",
        "|" + "---|" * len(escape[0]),
        *("| " + " | ".join(row) + " |" for row in escape[1:]),
    ]


def finding_text(finding: Finding, *, tensor: bool = True) -> str:
    """`ExplodingTensor @ step 40 on gradient/head.weight`: how every outlet names a
    finding, with only what it knows (no 'None')."""
    text = finding.rule
    if finding.step is not None:
        text += f" @ step {finding.step}"
    if tensor and finding.tensor:
        text += f" on {finding.tensor}"
    return text


def findings_phrase(state: State) -> str:
    """`Found ExplodingTensor @ step 40 on gradient/head.weight`, for a message's opening."""
    found = "; ".join(finding_text(finding) for finding in state.findings)
    return f"Found {found}" if found else "An issue found"


def sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def retraining_message(state: State) -> Message:
    attempt = state.current_attempt
    name = state.run_spec.base_job_name
    where = f"attempt {state.history.num_retraining} of {name}"
    if attempt is not None:
        where += f" (job {attempt.job_name})"
    change = state.planned_change
    rows = attempt_rows(state)
    return Message(
        title=f"remedy: retraining {name}",
        opening=[
            sentence(f"{findings_phrase(state)} in {where}"),
            sentence(f"Next: {change.reason}") if change else "Next: relaunch unchanged.",
        ],
        rows=rows,
        row_lines=attempt_lines(rows),
        notes=repro_lines(state),
    )


def final_message(state: State) -> Message:
    attempt = state.current_attempt
    clean = run_is_clean(state)
    name = state.run_spec.base_job_name
    count = len(state.history.attempts)
    attempts = f"{count} attempt{'s' if count != 1 else ''}"
    reason = (state.end_reason or "").strip()
    if clean:
        reason = reason.removeprefix("completed:").strip()
        opening = f"{name} completed cleanly after {attempts}"
    else:
        opening = f"remedy gave up on {name} after {attempts}"
    rows = attempt_rows(state)
    return Message(
        title=f"remedy: {name} {'completed' if clean else 'gave up'}",
        opening=[
            sentence(f"{opening}: {reason}" if reason else opening),
            f"Attempts: {count}; final metrics: "
            f"{metrics_text(attempt.metrics if attempt else {}, metric_names(state))}.",
            *([sentence(f"Best model trained: {best}")] if (best := best_model(state)) else []),
        ],
        rows=rows,
        row_lines=attempt_lines(rows),
        notes=repro_lines(state),
    )
