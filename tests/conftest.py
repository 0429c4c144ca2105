"""Session-wide settings and the one Prefect server of the test session."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests import adversarial
from tests.postgres import Postgres, running_postgres

# Fixtures shared by test modules in several folders.
pytest_plugins = ["tests.helpers.receiver"]

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

REPO = Path(__file__).resolve().parents[1]
SHARED_REFERENCE = REPO.parent / "shared" / "reference"


def healthy(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_remedy_server(home: Path, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """`remedy server OPTIONS` on a free port with PREFECT_HOME=home (its log: server.log
    there), once it answers; (the process, its API URL). No database setting is inherited:
    without --database-url it uses its default, SQLite in PREFECT_HOME."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(home)}
    # No UI setting either: `remedy server` points its UI at its own API (port included).
    for name in (
        "PREFECT_API_URL",
        "PREFECT_SERVER_DATABASE_CONNECTION_URL",
        "PREFECT_UI_API_URL",
        "PREFECT_SERVER_UI_API_URL",
    ):
        env.pop(name, None)
    home.mkdir(parents=True, exist_ok=True)
    with (home / "server.log").open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "remedy", "server", "--port", str(port), *options],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 300  # 20 s on an idle 2-core machine; far more when busy
    while not healthy(url):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(
                f"remedy server did not start (exit {server.poll()}): "
                f"{(home / 'server.log').read_text()[-3000:]}"
            )
        time.sleep(0.5)
    return server, url


@pytest.fixture(scope="session", autouse=True)
def this_machine_allows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the test machine allows a run (tasks/allowed_code.py): code in this checkout
    and in the session's temporary folders, run folders under those folders (the runs
    root); flows in this process, the CLI, `remedy serve` and workers inherit it. Returns
    the runs root."""
    base = tmp_path_factory.getbasetemp().resolve()
    os.environ["REMEDY_ALLOWED_SOURCE_DIRS"] = os.pathsep.join([str(REPO), str(base)])
    os.environ["REMEDY_RUNS_DIR"] = str(base)
    return base


@pytest.fixture(scope="session")
def prefect_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """PREFECT_HOME of the session's server (its log is here)."""
    return tmp_path_factory.mktemp("prefect-home")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """The session's PostgreSQL (Debian's packages), where its Prefect server keeps state."""
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def prefect_api_url(prefect_home: Path, postgres: Postgres) -> Iterator[str]:
    """A real Prefect server with its UI, once per session, started as users start it with
    PostgreSQL: `remedy server --database-url postgresql+asyncpg://...`. (SQLite, the
    default, locks up for minutes under the concurrent runs of the search and worker tests;
    tests/remedy/test_prefect_commands.py checks the SQLite default on a server of its own.)

    Flows in this process use it; subprocesses (the CLI, `remedy serve`, a browser) get
    its URL.
    """
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server, url = start_remedy_server(prefect_home, "--database-url", postgres.url)
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        from prefect.logging.handlers import APILogHandler

        try:
            APILogHandler().flush()  # the last log lines, before the server goes
        finally:
            server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


@dataclass(frozen=True)
class Served:
    ui_url: str  # the Prefect UI of the session's server
    runs_dir: Path  # where runs started from the UI keep their run directories


@pytest.fixture(scope="session")
def served(
    prefect_api_url: str, tmp_path_factory: pytest.TempPathFactory, this_machine_allows: Path
) -> Iterator[Served]:
    """`remedy serve` in its own process against the session's server.

    The remediate form's defaults are a tiny real spec (ResNet-20 width 4 with batch norm,
    256 synthetic images, 1 epoch), so a run started from the UI finishes in seconds.
    """
    from prefect.client.orchestration import get_client

    from tests.flows.specs import tiny_spec

    folder = tmp_path_factory.mktemp("served")
    defaults = folder / "defaults.json"
    defaults.write_text(tiny_spec(add_batch_norm=1, num_epochs=1).model_dump_json())
    env = {
        **os.environ,
        "PREFECT_API_URL": prefect_api_url,
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
    }
    log = (folder / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "remedy", "serve", "--remediate-config", str(defaults)]
        + ["--reports-port", "0"],  # the report server on any free port
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its flow-run processes too can be ended as one group
    )

    def deployed() -> bool:
        with get_client(sync_client=True) as client:
            try:
                client.read_deployment_by_name("remediate/remediate")
                client.read_deployment_by_name("search/overnight")
            except Exception:
                return False
            return True

    deadline = time.monotonic() + 180
    while not deployed():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"remedy serve did not start: {(folder / 'serve.log').read_text()}")
        time.sleep(0.5)
    # REMEDY_RUNS_DIR: this_machine_allows's, so the tests' own run folders are allowed.
    yield Served(ui_url=prefect_api_url.removesuffix("/api"), runs_dir=Path(env["REMEDY_RUNS_DIR"]))
    process.send_signal(signal.SIGINT)
    try:
        # Idle, it ends in about 2 s; a run started from the UI still in flight would hold
        # it for up to 30 s at the end of a worker's session: nothing is left to check then.
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's real server (S3, the training service as far as moto has it, CloudWatch
    Logs) on loopback: its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


# -- the order the workers take the files in -------------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with the most slow tests first, then those with the most tests: under
    --dist loadfile each worker takes the next file as it finishes one, so the longest go
    while the other worker can fill in beside them with many short ones (longest first:
    the usual rule for sharing work between machines). Within a file, its own order."""
    slow: Counter[Path] = Counter()
    count: Counter[Path] = Counter()
    for item in items:
        count[item.path] += 1
        slow[item.path] += item.get_closest_marker("slow") is not None
    # A stable sort: the tests of one file keep their order, files of equal keys theirs.
    items.sort(key=lambda item: (-slow[item.path], -count[item.path]))


# -- the adversarial suite's counts (tests/adversarial.py) -----------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test marked adversarial(SUITE, fails_as=OUTCOME) is one case of SUITE: its outcome
    travels on the report (from a worker too, under pytest -n)."""
    report = yield
    mark = item.get_closest_marker("adversarial")
    if mark is not None and (report.when == "call" or (report.when == "setup" and report.failed)):
        outcome = "handled cleanly" if report.passed else mark.kwargs["fails_as"]
        if not report.skipped:
            report.user_properties.append(("adversarial", (mark.args[0], {outcome: 1})))
    for suite, counts in adversarial.drain():  # a fuzzer's or a corpus's many cases
        report.user_properties.append(("adversarial", (suite, counts)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Counted where the summary is printed: the main process, whichever ran the test."""
    for name, value in report.user_properties:
        if name == "adversarial":
            suite, counts = value
            adversarial.tally(suite, counts)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = adversarial.summary()
    if lines:
        terminalreporter.section("adversarial suite (issue 13)")
        for line in lines:
            terminalreporter.write_line(line)
