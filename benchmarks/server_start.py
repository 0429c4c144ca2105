"""What a short `remedy run` spends before its first launch: with Prefect's temporary server
(started per run) against a `remedy server` already running on this machine (reused).

    python benchmarks/server_start.py [--repeats 3] [--quick]

Each repeat runs `remedy run` on a job that completes in a second, once per mode, the modes
interleaved (so both see the same load), and times from the command's start to the flow's
"launched attempt 1" line. Prints each time, the medians and their ratio. --quick: one
repeat. Run it on a quiet machine and say the load (`uptime`) with the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
PORT = 4200  # where `remedy server` listens by default, and where `remedy run` looks
API = f"http://127.0.0.1:{PORT}/api"
SPEC = '{"entry_point": "tests.jobs.entry_points.quick", "rules": []}'


def remedy() -> list[str]:
    return [sys.executable, "-m", "remedy"]


def env() -> dict[str, str]:
    clean = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    return clean | {"OMP_NUM_THREADS": "1"}


def time_to_first_launch(workdir: Path, name: str, reuses: bool) -> float:
    spec = workdir / "spec.json"
    spec.write_text(SPEC)
    run_dir = workdir / name
    command = [*remedy(), "run", str(spec), "--run-dir", str(run_dir), "--poll-interval", "0.3"]
    started = time.monotonic()
    process = subprocess.Popen(
        command, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    launched = None
    server_lines = []
    for line in process.stdout:
        if launched is None and "launched attempt 1" in line:
            launched = time.monotonic() - started
        if "Prefect server at" in line or "temporary Prefect server" in line:
            server_lines.append(line.strip())
    if process.wait() != 0 or launched is None:
        raise SystemExit(f"remedy run failed or never launched ({name})")
    said = "a running `remedy server`" if reuses else "temporary Prefect server"
    if not any(said in line for line in server_lines):  # measured what it says it measures
        raise SystemExit(f"{name}: expected {said!r}, remedy said {server_lines}")
    return launched


def server_up() -> bool:
    try:
        return httpx.get(f"{API}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(workdir: Path) -> subprocess.Popen:
    if server_up():
        raise SystemExit(f"a server already listens on port {PORT}: stop it first")
    home = workdir / "prefect-home"  # a database of its own, removed with the workdir
    server = subprocess.Popen(
        [*remedy(), "server", "--port", str(PORT)],
        cwd=REPO,
        env=env() | {"PREFECT_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    while not server_up():
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            raise SystemExit("remedy server did not start")
        time.sleep(0.5)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one repeat")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    workdir = Path(tempfile.mkdtemp(prefix="remedy-server-bench-"))
    temporary: list[float] = []
    reused: list[float] = []
    try:
        for repeat in range(repeats):
            temporary.append(time_to_first_launch(workdir, f"temporary-{repeat}", False))
            server = start_server(workdir)  # started outside the timed part: it is reused
            try:
                reused.append(time_to_first_launch(workdir, f"reused-{repeat}", True))
            finally:
                server.terminate()
                server.wait(timeout=60)
            print(f"repeat {repeat + 1}: temporary {temporary[-1]:.1f} s, reused "
                  f"{reused[-1]:.1f} s", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    before, after = statistics.median(temporary), statistics.median(reused)
    print(f"\n`remedy run` start to first launch, median of {repeats}:")
    print(f"  temporary server per run: {before:.1f} s")
    print(f"  running local server:     {after:.1f} s")
    print(f"  ratio temporary / reused: {before / after:.1f}x")


if __name__ == "__main__":
    main()
