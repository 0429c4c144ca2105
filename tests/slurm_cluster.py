"""A real one-node Slurm cluster for the tests (`./bootstrap.sh --dev` installs Debian's
slurm-wlm and munge).

`running_slurm()` starts, in a temp dir: munged with its own key and socket, slurmctld and
slurmd (as root) with one slurm.conf naming this host as controller and only node, on free
ports, every state, spool, pid and log file in the temp dir; it yields the environment
(SLURM_CONF) Slurm's commands need, and stops all three at the end. Nothing of the machine's
own Slurm or munge setup is read or changed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

NOT_INSTALLED = (
    "Slurm's daemons (slurmctld, slurmd) or munged are not installed: `./bootstrap.sh --dev` "
    "installs Debian's slurm-wlm and munge packages"
)
NOT_ROOT = (
    "the test cluster's slurmd must run as root (it starts each job as the submitting user); "
    "run the Slurm tests as root, as CI does"
)
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")
START_TIMEOUT_S = 60.0
PARTITION = "remedy"


@dataclass
class SlurmCluster:
    folder: Path
    node: str
    cpus: int
    env: dict[str, str] = field(default_factory=dict)  # SLURM_CONF for Slurm's commands

    def run(self, *command: str) -> str:
        """A Slurm command against this cluster; its stdout (CalledProcessError on failure)."""
        done = subprocess.run(
            command, env=os.environ | self.env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
        return done.stdout

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.folder.glob("*.log"))
        )


def start_problem() -> tuple[str, bool] | None:
    """Why the cluster cannot start here and whether that is a skip (not root: the tests
    cannot run as this user) rather than a failure (not installed); None when it can."""
    if any(shutil.which(program) is None for program in PROGRAMS):
        return NOT_INSTALLED, False
    if os.geteuid() != 0:
        return NOT_ROOT, True
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def slurm_conf(folder: Path, node: str, cpus: int, memory_mb: int, socket_path: Path) -> str:
    ctld_port, slurmd_port = free_port(), free_port()
    return f"""\
ClusterName=remedytest
SlurmctldHost={node}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path}
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
DefMemPerCPU=512
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName={node} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def stop_pid_file(path: Path) -> None:
    with suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(path.read_text().split()[0]), signal.SIGTERM)


@contextmanager
def running_slurm() -> Iterator[SlurmCluster]:
    folder = Path(tempfile.mkdtemp(prefix="remedy-slurm-"))
    node = socket.gethostname().split(".")[0]  # `hostname -s`: what slurmd calls itself
    cpus = os.cpu_count() or 1
    memory_mb = max(256, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2)
    for sub in ("state", "spool", "munge"):
        (folder / sub).mkdir()
    folder.chmod(0o755)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = folder / "munge" / "munge.socket"
    conf = folder / "slurm.conf"
    conf.write_text(slurm_conf(folder, node, cpus, memory_mb, munge_socket))
    cluster = SlurmCluster(folder, node, cpus, {"SLURM_CONF": str(conf)})
    env = os.environ | cluster.env
    try:
        subprocess.run(
            ["munged", "--force", f"--socket={munge_socket}", f"--key-file={key}",
             f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
             f"--seed-file={folder}/munge/munged.seed"],
            check=True, env=env, capture_output=True,
        )  # fmt: skip
        subprocess.run(["slurmctld", "-c", "-f", str(conf)], check=True, env=env)
        subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with suppress(subprocess.CalledProcessError):
                state = cluster.run("sinfo", "-h", "-n", node, "-o", "%T").strip()
                if state == "idle":
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test Slurm cluster did not start:\n{cluster.logs()}")
            time.sleep(0.5)
        yield cluster
    finally:
        with suppress(subprocess.CalledProcessError, FileNotFoundError):
            cluster.run("scancel", "--full", "--partition", PARTITION)
        for daemon in ("slurmd", "slurmctld", "munged"):
            stop_pid_file(folder / f"{daemon}.pid")
        time.sleep(1)
        shutil.rmtree(folder, ignore_errors=True)
