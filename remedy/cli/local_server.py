"""The local Prefect server that runs without PREFECT_API_URL reuse.

A run looks for a `remedy server` at http://127.0.0.1:PORT (PORT: REMEDY_SERVER_PORT, default
4200) first. `remedy run --keep-server` starts one there in the background when none answers
(a process of its own session: it outlives the run), notes its pid in PREFECT_HOME, and later
runs reuse it; `remedy server --stop` stops it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PORT_ENV = "REMEDY_SERVER_PORT"
DEFAULT_PORT = 4200
START_TIMEOUT_S = 300.0  # a first start migrates its database: a minute on a busy small machine
STOP_TIMEOUT_S = 30.0


class ServerError(Exception):
    """A background server that could not be started or stopped; the message says why."""


def local_server_port() -> int:
    value = os.environ.get(PORT_ENV, str(DEFAULT_PORT))
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ServerError(f"{PORT_ENV}={value!r}: expected a port number")
    return int(value)


def local_server_api() -> str:
    return f"http://127.0.0.1:{local_server_port()}/api"


def server_answers(api_url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{api_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def state_file(suffix: str) -> Path:
    """PREFECT_HOME/remedy-server-PORT.SUFFIX: the background server's pid and log."""
    from prefect.settings import PREFECT_HOME

    home = Path(PREFECT_HOME.value()).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home / f"remedy-server-{local_server_port()}.{suffix}"


def start_background_server() -> int:
    """Start `remedy server` on the local port, detached; return its pid once it answers."""
    api = local_server_api()
    log_path = state_file("log")
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "remedy", "server", "--port", str(local_server_port())],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not ended with the run, nor by its Ctrl-C
        )
    state_file("pid").write_text(f"{process.pid}\n")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server_answers(api):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process_group(process.pid)
            state_file("pid").unlink(missing_ok=True)
            raise ServerError(
                f"the background Prefect server did not start at {api} (its log: {log_path})"
            )
        time.sleep(0.5)
    return process.pid


def stop_background_server() -> str:
    """Stop the server `remedy run --keep-server` started on the local port; what was done."""
    pid_path = state_file("pid")
    if not pid_path.exists():
        raise ServerError(
            f"no background server of `remedy run --keep-server` on port "
            f"{local_server_port()} ({pid_path} does not exist)"
        )
    pid = int(pid_path.read_text())
    if not is_prefect_server(pid):
        pid_path.unlink()
        return f"remedy: the background server (pid {pid}) had already ended"
    stop_process_group(pid)
    pid_path.unlink()
    return f"remedy: stopped the background Prefect server (pid {pid})"


def is_prefect_server(pid: int) -> bool:
    """pid is a live `prefect server start` (not a process that took a dead server's pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return b"server" in command and any(part.endswith(b"prefect") for part in command)


def stop_process_group(pid: int) -> None:
    """SIGTERM to the server's session (it leads it), SIGKILL after STOP_TIMEOUT_S."""
    for sent, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sent)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not alive(pid):
                return
            time.sleep(0.2)


def alive(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)  # our own child: reap it
        if finished:
            return False
    except ChildProcessError:
        pass  # started by an earlier run
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
