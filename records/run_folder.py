"""The run directory: state.json after every transition, plus an append-only journal."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from remedy.state_schema import State, load_state, save_state

RUNS_DIR_ENV = "REMEDY_RUNS_DIR"
REPORT_DIR = "report"  # RUN_DIR/report/index.html: the run's HTML report (records/report.py)


def runs_root() -> Path:
    """Where runs started without a run directory go: $REMEDY_RUNS_DIR, else ./runs."""
    return Path(os.environ.get(RUNS_DIR_ENV, "runs"))


def default_run_dir(flow_run_name: str) -> str:
    """<REMEDY_RUNS_DIR or ./runs>/<flow run name>, for runs started from the UI."""
    return str(runs_root() / flow_run_name)


def state_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "state.json"


def persist(run_dir: str | Path, state: State, event: str) -> None:
    """Write state.json atomically and journal the transition (transitions.jsonl)."""
    save_state(state_path(run_dir), state)
    line = {
        "time": datetime.now(UTC).isoformat(),
        "event": event,
        "next_action": state.next_action.value,
        "job": state.history.latest_job_name,
        "job_status": state.job_status.value if state.job_status else None,
        "rule_status": state.rule_status.value if state.rule_status else None,
    }
    with (Path(run_dir) / "transitions.jsonl").open("a") as journal:
        journal.write(json.dumps(line) + "\n")


def load_run(run_dir: str | Path) -> State:
    return load_state(state_path(run_dir))
