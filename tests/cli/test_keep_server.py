"""`remedy run --keep-server` starts a Prefect server that later runs reuse, and
`remedy server --stop` stops it (real processes, a server of the test's own)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from remedy.state_schema import RunSpec
from tests.helpers.cli import pid_running, write_spec


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_a_kept_server_serves_the_next_run_and_stops_on_request(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")  # its own database and pid file
    env["REMEDY_SERVER_PORT"] = str(free_port())  # not a `remedy server` of this machine
    api = f"http://127.0.0.1:{env['REMEDY_SERVER_PORT']}/api"
    spec = write_spec(
        tmp_path / "spec.json", RunSpec(entry_point="tests.jobs.entry_points.quick", rules=[])
    )

    def remedy(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "remedy", *args],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip

    def run(name: str, *flags: str) -> subprocess.CompletedProcess:
        command = ["run", str(spec), "--run-dir", str(tmp_path / name), "--poll-interval", "0.3"]
        done = remedy(*command, *flags)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "temporary Prefect server" not in done.stdout + done.stderr
        return done

    pid = None
    try:
        first = run("first", "--keep-server")
        kept = re.search(rf"Prefect server at {re.escape(api)} \(pid (\d+)\), kept", first.stdout)
        assert kept, first.stdout
        pid = int(kept.group(1))
        assert "stop it with `remedy server --stop`" in first.stdout

        second = run("second")  # no flag: the kept server answers, nothing is started
        assert f"Prefect server at {api} (a running `remedy server`)" in second.stdout
        assert "starting a Prefect server" not in second.stdout
        flow_runs = httpx.post(f"{api}/flow_runs/filter", json={}, timeout=30).json()
        assert sorted(run["state_type"] for run in flow_runs) == ["COMPLETED", "COMPLETED"]
    finally:
        stop = remedy("server", "--stop")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert f"stopped the background Prefect server (pid {pid})" in stop.stdout
    assert pid is not None and not pid_running(pid)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{api}/health", timeout=5)
    again = remedy("server", "--stop")  # nothing left to stop: said, not silent
    assert again.returncode == 2
    assert "no background server of `remedy run --keep-server`" in again.stderr
