"""The remedy command line as a user runs it, in real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from remedy.state_schema import RunSpec, load_state


def remedy_env(api_url: str) -> dict[str, str]:
    return {**os.environ, "PREFECT_API_URL": api_url}


def remedy(*args: str, api_url: str = "", **kwargs: object) -> subprocess.CompletedProcess:
    env = remedy_env(api_url) if api_url else None
    return subprocess.run(
        [sys.executable, "-m", "remedy", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        **kwargs,
    )


def start_remedy(*args: str, api_url: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "remedy", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=remedy_env(api_url),
    )


def wait_for(
    condition: Callable[[], bool],
    timeout: float = 120.0,
    explain: Callable[[], str] | None = None,
) -> None:
    """Polls `condition` until it holds; on timeout fails with what `explain` says of why."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            why = f": {explain()}" if explain else ""
            raise AssertionError(f"condition not met in time{why}")
        time.sleep(0.2)


def write_spec(path: Path, spec: RunSpec) -> Path:
    path.write_text(spec.model_dump_json())
    return path


def job_is_training(run_dir: Path) -> bool:
    state_file = run_dir / "state.json"
    if not state_file.exists():
        return False
    job = load_state(state_file).history.latest_job_name
    return job is not None and (run_dir / "jobs" / job / "progress.json").exists()


def start_gated_run(tmp_path: Path, api_url: str) -> tuple[subprocess.Popen, Path]:
    """`remedy run` of a job that trains until released, once its job is training."""
    run_dir = tmp_path / "run"
    spec = write_spec(
        tmp_path / "spec.json", RunSpec(entry_point="tests.jobs.entry_points.gated", rules=[])
    )
    flow = start_remedy(
        "run", str(spec), "--run-dir", str(run_dir), "--poll-interval", "0.3", api_url=api_url
    )
    wait_for(lambda: job_is_training(run_dir))
    return flow, run_dir


def pid_running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
