"""`remedy server --database-url postgresql+asyncpg://...` against a real PostgreSQL.

The fixture runs Debian's PostgreSQL (`./bootstrap.sh --dev` installs the `postgresql`
package) in a temp dir on a free loopback port, and sets it up the way infra/README.md
says: a `prefect` role with a password owning a `prefect` database. The test starts
`remedy server` with that one URL, runs a real flow against it, and reads the flow run's
row from PostgreSQL itself.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

NOT_INSTALLED = (
    "PostgreSQL's server programs (initdb, pg_ctl, postgres) are not installed: "
    "`./bootstrap.sh --dev` installs Debian's postgresql package"
)
ROLE = DATABASE = PASSWORD = "prefect"  # as in infra/README.md
FLOW = """
from prefect import flow, task

@task
def double(x: int) -> int:
    return 2 * x

@flow(name="postgres-check")
def check() -> int:
    return double(21)

assert check() == 42
"""


def postgres_bindir() -> Path:
    """Debian's /usr/lib/postgresql/<version>/bin (newest), else initdb on PATH."""
    candidates: list[Path] = []
    if pg_config := shutil.which("pg_config"):
        result = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if result.returncode == 0:
            candidates.append(Path(result.stdout.strip()))
    debian = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(
        (Path(path) for path in debian if Path(path).parent.name.isdigit()),
        key=lambda path: int(path.parent.name),
        reverse=True,
    )
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if all((bindir / name).is_file() for name in ("initdb", "pg_ctl", "postgres", "psql")):
            return bindir
    pytest.fail(NOT_INSTALLED, pytrace=False)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Postgres:
    bindir: Path
    socket_dir: Path
    port: int

    def psql(self, sql: str, *, as_owner: bool = False) -> str:
        """Run SQL as the superuser over the unix socket, or as `prefect` over TCP."""
        if as_owner:
            where = ["-h", "127.0.0.1", "-U", ROLE, "-d", DATABASE]
        else:
            where = ["-h", str(self.socket_dir), "-U", "postgres", "-d", "postgres"]
        result = subprocess.run(
            [str(self.bindir / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-p", str(self.port)]
            + where
            + ["-c", sql],
            env={**os.environ, "PGPASSWORD": PASSWORD},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"psql {sql!r}: {result.stderr}"
        return result.stdout.strip()

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://{ROLE}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL cluster of its own, with the `prefect` role and database."""
    bindir = postgres_bindir()
    # initdb and postgres refuse to run as root: run them as the package's system user.
    as_user: list[str] = []
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail(f"running as root and no `postgres` user; {NOT_INSTALLED}", pytrace=False)
        runuser = shutil.which("runuser")
        assert runuser, "running as root needs runuser (util-linux) to start PostgreSQL"
        as_user = [runuser, "-u", "postgres", "--"]
    # In /tmp, not pytest's tmp_path: the postgres user cannot enter root's 0700 folders.
    folder = Path(tempfile.mkdtemp(prefix="remedy-pg-"))
    data, socket_dir, log = folder / "data", folder / "socket", folder / "postgres.log"
    socket_dir.mkdir()
    if as_user:
        for path in (folder, socket_dir):
            os.chown(path, user.pw_uid, user.pw_gid)

    def run(*command: str, check: bool = True) -> bool:
        result = subprocess.run(
            [*as_user, *command], cwd=folder, capture_output=True, text=True, timeout=120
        )
        if check and result.returncode != 0:
            logged = log.read_text()[-3000:] if log.exists() else ""
            pytest.fail(f"{' '.join(command)}: {result.stdout}{result.stderr}{logged}")
        return result.returncode == 0

    port = free_port()
    try:
        run(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--encoding=UTF8",
            "--locale=C",
            "--auth-local=trust",  # the socket is in a folder only its owner can enter
            "--auth-host=scram-sha-256",  # TCP needs the password, as on a Debian install
        )
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {port}\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{socket_dir}'\n"
                "fsync = off\n"  # a throwaway cluster: no need to wait for the disk
            )
        run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "start")
        server = Postgres(bindir=bindir, socket_dir=socket_dir, port=port)
        server.psql(f"CREATE USER {ROLE} WITH PASSWORD '{PASSWORD}';")
        server.psql(f"CREATE DATABASE {DATABASE} OWNER {ROLE};")
        yield server
    finally:
        try:
            if (data / "postmaster.pid").exists():
                stop = [str(bindir / "pg_ctl"), "-D", str(data), "-w", "stop", "-m"]
                run(*stop, "fast", check=False) or run(*stop, "immediate")
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def wait_healthy(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 240  # ~10 s on a 2-core machine
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(
                f"remedy server did not start (exit {server.poll()}): {log.read_text()[-3000:]}"
            )
        time.sleep(0.5)


def test_remedy_server_keeps_flow_runs_in_postgresql(postgres: Postgres, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {
        key: value
        for key, value in os.environ.items()
        if key
        not in (
            "PREFECT_API_URL",
            "PREFECT_SERVER_DATABASE_CONNECTION_URL",
            "PREFECT_API_DATABASE_CONNECTION_URL",
        )
    }
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    log_path = tmp_path / "server.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "remedy", "server", "--port", str(port)]
            + ["--database-url", postgres.url],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_healthy(url, server, log_path)
        # Prefect created its tables in the `prefect` database, owned by the `prefect` role.
        assert postgres.psql(
            "SELECT tableowner FROM pg_tables WHERE tablename = 'flow_run'", as_owner=True
        ) == (ROLE)

        flow = subprocess.run(
            [sys.executable, "-c", FLOW],
            cwd=tmp_path,
            env={**env, "PREFECT_API_URL": url},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert flow.returncode == 0, flow.stdout + flow.stderr

        rows = postgres.psql(
            "SELECT flow_run.state_type, "
            "(SELECT count(*) FROM task_run WHERE task_run.flow_run_id = flow_run.id) "
            "FROM flow_run JOIN flow ON flow.id = flow_run.flow_id "
            "WHERE flow.name = 'postgres-check'",
            as_owner=True,
        )
        assert rows == "COMPLETED|1"
        assert not list((tmp_path / "prefect-home").glob("*.db")), "a SQLite database was made"

        # Stopping `remedy server` stops the Prefect server it started.
        server.terminate()
        server.wait(timeout=30)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{url}/health", timeout=2)
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        try:  # whatever it started, should anything be left
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
