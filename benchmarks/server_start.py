"""What a short `remedy run` spends before its first launch: with Prefect's temporary server
(started per run), with `--keep-server` (its first run starts a background server that later
runs reuse) and with a `remedy server` already running on this machine (reused).

    python benchmarks/server_start.py [--repeats 3] [--quick]

Each repeat runs `remedy run` on a job that completes in a second, once per mode, the modes
interleaved (so all see the same load), and times from the command's start to the flow's
"launched attempt 1" line. `--keep-server`'s run is timed with no server up (it starts one),
then stopped with `remedy server --stop`; its database is kept across repeats, as a user's is
from one day to the next. Prints each time, the medians and the ratios. --quick: one
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


def time_to_first_launch(
    workdir: Path, name: str, says: str, options: tuple[str, ...] = (), home: Path | None = None
) -> float:
    """Seconds from `remedy run` to its first launch; `says`: how remedy must name the
    server it used (so the mode measured is the mode meant)."""
    spec = workdir / "spec.json"
    spec.write_text(SPEC)
    run_dir = workdir / name
    command = [*remedy(), "run", str(spec), "--run-dir", str(run_dir), "--poll-interval", "0.3"]
    started = time.monotonic()
    process = subprocess.Popen(
        [*command, *options],
        cwd=REPO,
        env=env() | ({"PREFECT_HOME": str(home)} if home else {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    launched = None
    server_lines = []
    for line in process.stdout:
        if launched is None and "launched attempt 1" in line:
            launched = time.monotonic() - started
        if "Prefect server at" in line:
            server_lines.append(line.strip())
    if process.wait() != 0 or launched is None:
        raise SystemExit(f"remedy run failed or never launched ({name})")
    if not any(says in line for line in server_lines):
        raise SystemExit(f"{name}: expected {says!r}, remedy said {server_lines}")
    return launched


def stop_kept_server(home: Path) -> None:
    subprocess.run(
        [*remedy(), "server", "--stop"], cwd=REPO, env=env() | {"PREFECT_HOME": str(home)},
        check=True, capture_output=True,
    )  # fmt: skip


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
    kept_home = workdir / "kept-home"  # --keep-server's database, kept across repeats
    times: dict[str, list[float]] = {"temporary": [], "keep": [], "reused": []}
    try:
        for repeat in range(repeats):
            if server_up():
                raise SystemExit(f"a server already listens on port {PORT}: stop it first")
            times["temporary"].append(
                time_to_first_launch(workdir, f"temporary-{repeat}", "temporary Prefect server")
            )
            try:  # its first run starts the server: timed with it
                times["keep"].append(
                    time_to_first_launch(
                        workdir,
                        f"keep-{repeat}",
                        "kept for later runs",
                        ("--keep-server",),
                        kept_home,
                    )  # fmt: skip
                )
            finally:
                stop_kept_server(kept_home)
            server = start_server(workdir)  # started outside the timed part: it is reused
            try:
                times["reused"].append(
                    time_to_first_launch(workdir, f"reused-{repeat}", "a running `remedy server`")
                )
            finally:
                server.terminate()
                server.wait(timeout=60)
            print(f"repeat {repeat + 1}: " + ", ".join(f"{mode} {values[-1]:.1f} s"
                  for mode, values in times.items()), flush=True)  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    temporary, keep, reused = (statistics.median(times[mode]) for mode in times)
    print(f"\n`remedy run` start to first launch, median of {repeats}:")
    print(f"  temporary server per run:             {temporary:.1f} s")
    print(f"  --keep-server, the run that starts it: {keep:.1f} s")
    print(f"  running local server (later runs):     {reused:.1f} s")
    print(f"  ratio temporary / reused: {temporary / reused:.1f}x; "
          f"--keep-server's first / temporary: {keep / temporary:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
