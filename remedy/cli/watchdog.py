"""python -m remedy.cli.watchdog PARENT_PID CHILD_PID: end CHILD once PARENT is gone.

`remedy run` starts Prefect's temporary server as a child process and stops it when it
exits. Killed with SIGKILL it stops nothing, and the server would run on for ever: this
small process, in a session of its own, ends the server then (SIGTERM, SIGKILL 10 s later).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5
KILL_AFTER_S = 10.0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(parent: int, child: int) -> None:
    # The parent is gone once this process has another parent: children are handed on at
    # the parent's exit, while the parent itself may linger as a zombie its own parent has
    # not reaped (os.kill(pid, 0) still succeeds on it).
    while os.getppid() == parent:
        time.sleep(POLL_S)
    if not alive(child):
        return  # the parent stopped it on its way out
    os.kill(child, signal.SIGTERM)
    deadline = time.monotonic() + KILL_AFTER_S
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(child):
        os.kill(child, signal.SIGKILL)


def start_watchdog(child: int) -> subprocess.Popen[bytes]:
    """Watch this process on behalf of `child`."""
    return subprocess.Popen(
        [sys.executable, "-m", "remedy.cli.watchdog", str(os.getpid()), str(child)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,  # holding remedy's output open would keep a reader of
        stderr=subprocess.DEVNULL,  # it waiting until the watchdog ends
        start_new_session=True,  # outlives its parent's process group being killed
    )


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]))
