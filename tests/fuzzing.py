"""A small fuzzing harness: run real readers on mutated copies, each in its own process.

Each read runs in a process forked from a forkserver that has already imported remedy and
torch, so a case costs a fork, not an interpreter start, and a hang can be killed: the
readers run exactly as their entry points do (`remedy check`, `python -m
remedy.debugger.evaluator`, `remedy repro` are called through their main functions, with
their own signal handling), only without the interpreter's start-up. A case is:

  handled cleanly  it read what the pristine copy reads, or it failed with a clear error
                   naming a file of the copy (an exception of the reader's own error type,
                   an Error status, or the CLI's one-line error with exit 2)
  crashed          a traceback, or an exit the entry point does not document
  hung             still running at its deadline (an evaluator following a store without
                   end marker gets SIGTERM first, as the supervisor would, then a grace)
  silently wrong   no error, and not what the pristine copy reads
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# torch too: a replay forked from here starts in milliseconds, not seconds (nothing of
# torch runs in the server, so no thread pool is forked half-started).
PRELOAD = [
    "remedy.cli",
    "remedy.debugger.evaluator",
    "remedy.training.replay",
    "tests.fuzzing",
    "boto3",  # the S3 reader's
]
CASE_TIMEOUT_S = 60.0  # far above any clean read; only a real hang reaches it
FOLLOW_S = 1.5  # an evaluator on a store without end marker follows it this long
GRACE_S = 20.0  # after SIGTERM

ENV_PREFIX = "--env="  # a Job's extra "--env=NAME=VALUE": set in the reading process

# Values a damaged or hostile file may hold where a count, name or list belongs.
HOSTILE = [None, "", "x" * 300, -1, 2**63, 10**30, 1e308, -1e308, 1e7, True, [], {}, [[[[]]]]]


# -- what runs in the forked process ------------------------------------------------------


def _redirect(work: Path) -> None:
    import sys

    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(work / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115


def run_in_child(runner: str, target: str, work: str, extra: Sequence[str]) -> None:
    """The forked process: run one reader, leave result.json and exit with its code."""
    import sys

    _redirect(Path(work))
    for item in extra:  # the forkserver's environment predates the test's: e.g. S3's
        if item.startswith(ENV_PREFIX):
            name, _, value = item.removeprefix(ENV_PREFIX).partition("=")
            os.environ[name] = value
    extra = [item for item in extra if not item.startswith(ENV_PREFIX)]
    code = RUNNERS[runner](target, Path(work), list(extra))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _write_result(work: Path, result: Any) -> None:
    (work / "result.json").write_text(json.dumps(result, sort_keys=True))


def run_trial(target: str, work: Path, extra: list[str]) -> int:
    from remedy.debugger import DebuggerError

    try:
        result: Any = {"read": summarise_store(target)}
    except DebuggerError as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    _write_result(work, result)
    return 0


def run_check(target: str, work: Path, extra: list[str]) -> int:
    from remedy.cli import main

    return main(["check", target, "--status-dir", str(work / "status"), *extra])


def run_evaluator(target: str, work: Path, extra: list[str]) -> int:
    from remedy.debugger.evaluator import main

    argv = ["--trial", target, "--status-dir", str(work / "status"), "--poll-interval", "0.05"]
    return main([*argv, *extra])


def run_replay(target: str, work: Path, extra: list[str]) -> int:
    import torch

    from remedy.training.bundle import BundleError
    from remedy.training.replay import replay

    torch.set_num_threads(1)
    try:
        result: Any = {"read": replay(target).to_json()}
    except BundleError as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    _write_result(work, result)
    return 0


def run_repro(target: str, work: Path, extra: list[str]) -> int:
    from remedy.cli import main

    return main(["repro", target, "--json"])


RUNNERS: dict[str, Callable[[str, Path, list[str]], int]] = {
    "trial": run_trial,
    "check": run_check,
    "evaluator": run_evaluator,
    "replay": run_replay,
    "repro": run_repro,
}


def summarise_store(path: str) -> dict[str, Any]:
    """Everything a trial says about a store, every tensor's bytes included (hashed)."""
    import hashlib

    from remedy.debugger import create_trial
    from remedy.debugger.collections import split_key
    from remedy.debugger.modes import STEP_MODES, ModeKeys

    trial = create_trial(path)
    out: dict[str, Any] = {
        "ended": trial.has_ended,
        "workers": trial.workers(),
        "global": trial.steps(ModeKeys.GLOBAL),
        "collections": {c: trial.tensor_names(collection=c) for c in trial.collection_names()},
        "order": {c: trial.collection_order(c) for c in trial.collection_names()},
        "steps": {},
        "values": {},
    }
    for worker in trial.workers():
        part = trial.worker(worker)
        for mode in STEP_MODES:
            out["steps"][f"{worker} {mode.value}"] = part.steps(mode)
            for step in part.steps(mode):
                header = part.step_header(step, mode)
                where = f"{worker} {mode.value} {step}"
                out["values"][where] = {"global": header.global_step, "time": header.wall_time}
                for key in header.tensor_names:
                    name, reduction = split_key(key)
                    view = trial.tensor(name)
                    if reduction is None:
                        value = view.value(step, mode, worker=worker)
                        digest = hashlib.sha256(value.tobytes()).hexdigest()[:16]
                        out["values"][where][key] = [str(value.dtype), list(value.shape), digest]
                    else:
                        absolute = reduction.startswith("abs_")
                        kind = reduction.removeprefix("abs_")
                        found = view.reduction_value(step, kind, mode, absolute, worker)
                        out["values"][where][key] = repr(found)
    return out


# -- the parent: cases, processes, verdicts -----------------------------------------------


@dataclass
class Read:
    exit: int | None  # None: killed (hung)
    stdout: str
    stderr: str
    result: Any
    statuses: dict[str, dict[str, Any]] | None
    hung: bool = False


@dataclass
class Tally:
    what: str
    counts: Counter[str] = field(default_factory=Counter)
    bad: list[str] = field(default_factory=list)

    def add(self, verdict: str, label: str, why: str) -> None:
        self.counts["cases"] += 1
        self.counts[verdict] += 1
        if verdict != "handled cleanly":
            self.bad.append(f"{verdict}: {label}: {why}")

    def report(self) -> str:
        order = ["cases", "handled cleanly", "crashed", "hung", "silently wrong"]
        line = ", ".join(f"{self.counts[k]} {k}" for k in order)
        details = "\n".join(self.bad[:40])
        return f"{self.what}: {line}" + (f"\n{details}" if details else "")


_CONTEXT: Any = None


def context() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


@dataclass
class Job:
    runner: str
    target: Path | str  # a folder, or an s3:// URI
    work: Path
    extra: Sequence[str]
    follow: bool  # an evaluator on a store that has not ended: SIGTERM after FOLLOW_S
    done: Callable[[Read], None]


def run_jobs(jobs: list[Job], parallel: int = 2) -> None:
    """Run jobs `parallel` at a time, each with its deadline; call each one's `done`."""
    pending = list(jobs)
    running: list[tuple[Job, Any, float, float | None]] = []
    while pending or running:
        while pending and len(running) < parallel:
            job = pending.pop(0)
            job.work.mkdir(parents=True)
            process = context().Process(
                target=run_in_child,
                args=(job.runner, str(job.target), str(job.work), list(job.extra)),
            )
            process.start()
            running.append((job, process, time.monotonic(), None))
        time.sleep(0.01)
        still = []
        for job, process, started, termed in running:
            now = time.monotonic()
            if not process.is_alive():
                process.join()
                job.done(_collect(job, process.exitcode, hung=False))
                continue
            if job.follow and termed is None and now - started > FOLLOW_S:
                os.kill(process.pid, signal.SIGTERM)
                termed = now
            deadline = started + CASE_TIMEOUT_S if termed is None else termed + GRACE_S
            if now > deadline:
                os.kill(process.pid, signal.SIGKILL)
                process.join()
                job.done(_collect(job, None, hung=True))
                continue
            still.append((job, process, started, termed))
        running = still


def _collect(job: Job, exit: int | None, hung: bool) -> Read:
    def text(name: str) -> str:
        path = job.work / name
        return path.read_text(errors="replace") if path.exists() else ""

    result_file = job.work / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else None
    statuses = None
    status_dir = job.work / "status"
    if status_dir.is_dir():
        statuses = {}
        for file in sorted(status_dir.glob("*.json")):
            record = json.loads(file.read_text())
            statuses[record["RuleConfigurationName"]] = record
    return Read(exit, text("stdout"), text("stderr"), result, statuses, hung)


# -- mutations ----------------------------------------------------------------------------


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def replace_with(path: Path, make: Callable[[Path], None]) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    make(path)


def json_paths(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key/index path into a JSON value."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield (*prefix, key)
            yield from json_paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield (*prefix, index)
            yield from json_paths(value, (*prefix, index))


def set_path(data: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> None:
    for key in path[:-1]:
        data = data[key]
    if delete:
        del data[path[-1]]
    else:
        data[path[-1]] = value


def byte_mutations(rng: random.Random, path: Path) -> list[tuple[str, Callable[[], None]]]:
    """Damage a file can take on disk, as (label, apply)."""
    size = path.stat().st_size

    def flip() -> None:
        data = bytearray(path.read_bytes())
        if data:
            index = rng.randrange(len(data))
            data[index] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))

    def overwrite() -> None:
        data = bytearray(path.read_bytes())
        if data:
            start = rng.randrange(len(data))
            span = rng.randint(1, 16)
            data[start : start + span] = rng.randbytes(min(span, len(data) - start))
        path.write_bytes(bytes(data))

    cut = rng.randrange(size) if size else 0
    return [
        ("flip a bit", flip),
        ("overwrite bytes", overwrite),
        (f"truncate to {cut}", lambda: path.write_bytes(path.read_bytes()[:cut])),
        ("append garbage", lambda: path.write_bytes(path.read_bytes() + rng.randbytes(37))),
        ("empty", lambda: path.write_bytes(b"")),
        ("delete", lambda: path.unlink()),
        ("FIFO", lambda: replace_with(path, lambda p: os.mkfifo(p))),
        ("symlink to /dev/zero", lambda: replace_with(path, lambda p: p.symlink_to("/dev/zero"))),
        (
            "symlink to /etc/hostname",
            lambda: replace_with(path, lambda p: p.symlink_to("/etc/hostname")),
        ),
        ("folder", lambda: replace_with(path, lambda p: p.mkdir())),
    ]


def is_special(path: Path) -> bool:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)
