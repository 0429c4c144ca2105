"""The leaderboard of a search: one row per candidate from its run folder, ranked.

Beside the accuracy a candidate is ranked by, a row has the final metrics its run has
(metric_columns.py: those its run_spec defines or its success criteria name), "-" where a
candidate's job did not report one.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from remedy.outlets.messages import Message, cell, markdown_table, redact, sentence
from remedy.outlets.metric_columns import BUILTIN_METRICS, metric_names, unique
from remedy.records.run_folder import has_begun, load_run
from remedy.records.verdict import run_is_clean
from remedy.state_schema import write_atomic


def leaderboard_row(
    number: int, run_dir: str, flow_run: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One candidate from its run directory; flow_run: what run_candidate reported."""
    flow_run = flow_run or {}
    name = flow_run.get("flow_run", "of the candidate")
    ran = f"flow run {name} ended {flow_run.get('flow_run_state')}"
    if flow_run.get("flow_run_message"):
        ran += f": {flow_run['flow_run_message']}"
    if not has_begun(run_dir):  # its folder may be written: no flow took it up
        why = "never started"
        if flow_run.get("flow_run_state") == "COMPLETED":  # it ran, somewhere else
            why = (
                f"{run_dir} is not visible here: put the search directory on a filesystem "
                "every worker shares"
            )
        elif flow_run:
            why = ran
        return {
            "candidate": number,
            "status": "never started",
            "accuracy": None,
            "why": redact(why),
        }
    state = load_run(run_dir)
    spec = state.history.attempts[0].spec if state.history.attempts else state.run_spec
    last = state.current_attempt
    completed = run_is_clean(state)
    strategies = [a.strategy for a in state.history.attempts if a.strategy]
    return {
        "candidate": number,
        "depth": spec.depth,
        "activation": spec.activation.value,
        "batch_norm": spec.add_batch_norm,
        "width": spec.width,
        "learning_rate": spec.learning_rate,
        "warmup_learning_rate": spec.warmup_learning_rate,
        "attempts": len(state.history.attempts),
        "strategies": ", ".join(strategies) or "-",
        "accuracy": last.final_accuracy if completed and last else None,
        "metrics": {
            name: last.metrics.get(name) if last else None
            for name in metric_names(state)
            if name not in BUILTIN_METRICS  # the accuracy is its own column
        },
        "steps_used": state.history.updates_spent,
        "status": "repaired" if completed and strategies else "clean" if completed else "failed",
        "why": "" if completed else redact(state.end_reason or (ran if flow_run else "unknown")),
        **({"flow_run": flow_run["flow_run"]} if flow_run.get("flow_run") else {}),
        "run_dir": run_dir,
    }


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Completed candidates by accuracy, then fewer steps; the failed ones last."""
    return sorted(
        rows,
        key=lambda r: (r["accuracy"] is None, -(r["accuracy"] or 0), r.get("steps_used", 0)),
    )


COLUMNS = [
    "candidate",
    "depth",
    "activation",
    "batch_norm",
    "width",
    "learning_rate",
    "attempts",
    "strategies",
    "accuracy",
    "steps_used",
    "status",
    "why",
]


def leaderboard_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The leaderboard as a table, header first: the candidates' metrics after the accuracy,
    their flow runs when they ran as deployment runs; "-" for what a row does not have."""
    columns = list(COLUMNS)
    if any(row.get("flow_run") for row in rows):
        columns.append("flow_run")
    metrics = unique(name for row in rows for name in row.get("metrics", {}))
    at = columns.index("accuracy") + 1
    table = [columns[:at] + metrics + columns[at:]]
    for row in rows:
        own = row.get("metrics", {})
        cells = [cell(row.get(c)) for c in columns]
        values = [cell(own.get(name)) for name in metrics]
        table.append(cells[:at] + values + cells[at:])
    return table


def leaderboard_markdown(rows: list[dict[str, Any]]) -> str:
    return "\n".join(markdown_table(leaderboard_table(rows))) + "\n"


def leaderboard_lines(table: list[list[str]]) -> list[str]:
    """`Candidate 2 (clean): depth 20, activation elu, ...`: a candidate per line, its values
    named, for targets that show plain text."""
    header, *body = table
    lines = []
    for row in body:
        values = dict(zip(header, row, strict=True))
        named = [
            f"{name} {value}"
            for name, value in values.items()
            if name not in ("candidate", "status") and value not in ("", "-")
        ]
        lines.append(f"Candidate {values['candidate']} ({values['status']}): {', '.join(named)}")
    return lines


def write_leaderboard(search_dir: str, rows: list[dict[str, Any]]) -> None:
    write_atomic(Path(search_dir) / "leaderboard.json", json.dumps(rows, indent=2))
    write_atomic(Path(search_dir) / "leaderboard.md", leaderboard_markdown(rows))


def summary(rows: list[dict[str, Any]]) -> str:
    """`candidate 2 (elu, bn 1, depth 20) is best with accuracy 0.912`."""
    best = rows[0] if rows and rows[0]["accuracy"] is not None else None
    if best is None:
        return "no candidate completed"
    return (
        f"candidate {best['candidate']} ({best['activation']}, bn {best['batch_norm']}, "
        f"depth {best['depth']}) is best with accuracy {best['accuracy']:.3f}"
    )


# The most candidates a notification lists; leaderboard.md has them all.
MESSAGE_CANDIDATES = 5


def search_message(rows: list[dict[str, Any]], search_dir: str) -> Message:
    """The search's end for people: the best candidate in a sentence, how the candidates
    ended, and the top of the leaderboard."""
    counts = Counter(row["status"] for row in rows)
    ended = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
    table = leaderboard_table(rows[:MESSAGE_CANDIDATES])
    more = len(rows) - MESSAGE_CANDIDATES
    return Message(
        title="remedy: search finished",
        opening=[
            sentence(f"Search {Path(search_dir).name} finished: {summary(rows)}"),
            f"{len(rows)} candidate{'s' if len(rows) != 1 else ''}: {ended or 'none'}.",
        ],
        rows=table,
        row_lines=leaderboard_lines(table),
        notes=[f"... and {more} more in leaderboard.md."] if more > 0 else [],
    )


STATUSES = ("clean", "repaired", "failed", "never started")
