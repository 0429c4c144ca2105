"""The run directory: state.json after every transition, plus an append-only journal.

One run directory holds one run, driven by one process at a time:
  state.json          the payload after every transition
  start.json          the payload the run started from (a retry with it resumes the run)
  transitions.jsonl   the journal: one line per transition; "finished" once the run's end
                      (report, final notification) is done
  .lock               held (flock) by the process driving the run; the kernel drops it
                      when that process dies, so a crash never keeps a run locked
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from remedy.state_schema import RunSpec, State, load_state, save_state
from remedy.state_schema.private import reveal_private, same_run

RUNS_DIR_ENV = "REMEDY_RUNS_DIR"
REPORT_DIR = "report"  # RUN_DIR/report/index.html: the run's HTML report (outlets/report.py)
REPORT_MARKDOWN = "report.md"  # RUN_DIR/report/report.md: it as markdown, plots inline
START_FILE = "start.json"
JOURNAL_FILE = "transitions.jsonl"
LOCK_FILE = ".lock"
FINISHED = "finished"  # the journal's last event once nothing of the run is left to do


class RunBusy(RuntimeError):
    """Another process drives this run right now."""


class RunMismatch(ValueError):
    """The run directory holds another run than the one asked for."""


def runs_root() -> Path:
    """Where runs started without a run directory go: $REMEDY_RUNS_DIR, else ./runs."""
    return Path(os.environ.get(RUNS_DIR_ENV, "runs"))


def default_run_dir(flow_run_name: str) -> str:
    """<REMEDY_RUNS_DIR or ./runs>/<flow run name>, for runs started from the UI."""
    return str(runs_root() / flow_run_name)


def job_run_dir(base_job_name: str, flow_run_name: str) -> str:
    """A flow run's folder when it is given none: <runs>/<base_job_name>-<flow run name>,
    named after the job, and the same for every retry of the flow run."""
    return default_run_dir(f"{base_job_name}-{flow_run_name}")


def run_dir_of(parameters: dict[str, Any], flow_run_name: str) -> str:
    """A remediate flow run's folder from its parameters as the server keeps them (JSON),
    for its hooks: its run_dir, else job_run_dir of its run_spec's base_job_name."""
    if parameters.get("run_dir"):
        return str(parameters["run_dir"])
    spec = (parameters.get("state") or {}).get("run_spec") or parameters.get("run_spec") or {}
    name = spec.get("base_job_name") or RunSpec.model_fields["base_job_name"].default
    return job_run_dir(name, flow_run_name)


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
    with (Path(run_dir) / JOURNAL_FILE).open("a") as journal:
        journal.write(json.dumps(line) + "\n")


def load_run(run_dir: str | Path) -> State:
    return load_state(state_path(run_dir))


def is_finished(run_dir: str | Path) -> bool:
    """True once the run has ended and its end (report, final notification) is done."""
    try:
        lines = (Path(run_dir) / JOURNAL_FILE).read_text().splitlines()
    except FileNotFoundError:
        return False
    return bool(lines) and json.loads(lines[-1]).get("event") == FINISHED


def has_begun(run_dir: str | Path) -> bool:
    """True once a flow has taken the run up: its journal holds more than the start line
    (a search or `remedy run` writes a run's folder before its flow opens it); for a
    folder without journal, once it holds a state."""
    try:
        with (Path(run_dir) / JOURNAL_FILE).open() as journal:
            return sum(1 for _ in zip(journal, range(2), strict=False)) > 1
    except FileNotFoundError:
        return state_path(run_dir).exists()


def open_run_folder(run_dir: str | Path, state: State, journal: bool = True) -> State:
    """The state to go on from: `state` for a new run (state.json and start.json written,
    its hidden private fields taken from the environment), the saved state when `state` is
    this run's start or its saved state, private fields hidden or not (a retry of the same
    flow run, a resume; journaled "resume" unless `journal` is False: this process opened
    it already). RunMismatch for any other state: a run is never overwritten."""
    run_dir = Path(run_dir)
    path = state_path(run_dir)
    if not path.exists():
        state = reveal_private(state)
        run_dir.mkdir(parents=True, exist_ok=True)
        save_state(run_dir / START_FILE, state)
        persist(run_dir, state, "start")
        return state
    saved = load_run(run_dir)
    start = run_dir / START_FILE
    if same_run(state, saved) or (start.exists() and same_run(state, load_state(start))):
        if journal:
            persist(run_dir, saved, "resume")
        return saved
    raise RunMismatch(
        f"{run_dir} already holds another run (state.json, next action "
        f"{saved.next_action.value}): resume it with `remedy resume {run_dir}`, or give "
        "another run directory"
    )


_held: dict[Path, int] = {}  # run directory -> descriptor of its locked .lock file


def lock_run(run_dir: str | Path, holder: str) -> None:
    """Hold the run's lock in this process (again: nothing to do). RunBusy, naming the
    holder, while another process holds it."""
    folder = Path(run_dir).resolve()
    if folder in _held:
        return
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder_text = os.pread(descriptor, 1000, 0).decode(errors="replace").strip()
        os.close(descriptor)
        raise RunBusy(
            f"{run_dir} is being run by another process ({holder_text or 'unknown'}); "
            "wait for it to end, or stop it first"
        ) from None
    os.ftruncate(descriptor, 0)
    since = datetime.now(UTC).isoformat(timespec="seconds")
    who = f"pid {os.getpid()} on {socket.gethostname()}, {holder}, since {since}"
    os.write(descriptor, f"{who}\n".encode())
    _held[folder] = descriptor


def holds_run(run_dir: str | Path) -> bool:
    """Whether this process holds the run's lock (lock_run)."""
    return Path(run_dir).resolve() in _held


def unlock_run(run_dir: str | Path) -> None:
    descriptor = _held.pop(Path(run_dir).resolve(), None)
    if descriptor is not None:
        os.close(descriptor)  # closing drops the flock
