"""Every process a job started, found and ended: nothing outlives its job.

The supervisor makes itself a child subreaper (PR_SET_CHILD_SUBREAPER, Linux): a process its
job forks and abandons, even one in its own session (setsid), becomes the supervisor's child
instead of init's, so it stays in the supervisor's process tree, which /proc shows.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process; False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children_by_parent() -> dict[int, list[int]]:
    """ppid -> pids, from /proc (a process that ends while it is read is left out)."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def descendants(pid: int, spare: frozenset[int] = frozenset()) -> list[int]:
    """The processes below pid, parents before children; the subtrees of `spare` left out."""
    tree = children_by_parent()
    found: list[int] = []
    queue = [child for child in tree.get(pid, []) if child not in spare]
    while queue:
        current = queue.pop(0)
        found.append(current)
        queue.extend(child for child in tree.get(current, []) if child not in spare)
    return found


def end_descendants(
    pid: int, spare: frozenset[int] = frozenset(), grace_s: float = 2.0
) -> list[int]:
    """SIGTERM every descendant of pid (but the subtrees of `spare`), SIGKILL those left
    after grace_s; reaps the ones that are our children. Returns the pids it signalled."""
    found = descendants(pid, spare)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in found if signal_process(p, sig)]
        if sig is signal.SIGTERM and alive:
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(running(p) for p in alive):
                reap(alive)
                time.sleep(0.05)
        reap(alive)
    # new ones may have been forked meanwhile, or orphaned to us: once more, at once
    late = [p for p in descendants(pid, spare) if p not in found]
    for child in late:
        signal_process(child, signal.SIGKILL)
    reap(late)
    return found + late


def signal_process(pid: int, sig: signal.Signals) -> bool:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
        return True
    return False


def running(pid: int) -> bool:
    """True while pid exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def reap(pids: list[int]) -> None:
    """Collect the exit of those that are our children (no zombies left)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
