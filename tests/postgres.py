"""A real PostgreSQL from Debian's packages for the tests (`./bootstrap.sh --dev` installs it).

`running_postgres()` starts a throwaway cluster in a temp dir on a free loopback port and sets
it up the way infra/README.md says: a `prefect` role with a password owning a `prefect`
database. The test session's Prefect server keeps its state there (tests/conftest.py).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

NOT_INSTALLED = (
    "PostgreSQL's server programs (initdb, pg_ctl, postgres) are not installed: "
    "`./bootstrap.sh --dev` installs Debian's postgresql package"
)
ROLE = DATABASE = PASSWORD = "prefect"  # as in infra/README.md


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


@contextmanager
def running_postgres() -> Iterator[Postgres]:
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
