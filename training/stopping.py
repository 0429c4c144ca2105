"""Stopping a script from outside: the stop file or SIGTERM ends it cleanly and promptly.

    stop = StopRequest(stop_file).install()
    ...  # the capture calls stop.raise_if_requested() between updates
    stop.close()

A request (the stop file appearing, watched by a thread: at once where inotify tells it a
file landed beside it, else every POLL_S; or SIGTERM) is
honoured at the next point between two updates, where the zero-code capture calls
raise_if_requested() (when a backward() starts): it raises StopTraining there, so the last
update is complete and nothing is half-written. StopTraining derives from BaseException, so
a script's `except Exception` does not swallow it, while its `finally` blocks and `with`
statements run. A script that watches the stop file itself and leaves its loop before its
next backward() simply ends as it planned.

SIGTERM (the backend's escalation after its grace period) is also honoured where the script
is when it reaches no point between updates within GRACE_S (it is loading data,
evaluating, saving): StopTraining is raised in the main thread wherever it is, as an
interrupt would be; a second SIGTERM does the same at once. The stop file alone never
interrupts a script that way. Only the process that installed the request reacts: a forked
child (a DataLoader worker) that gets SIGTERM dies of it, as it would without the launcher.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from remedy.debugger.folder_watch import FolderWatch
from remedy.state_schema.job_env import CONTINUE_UNTIL_KEY, MAX_UPDATES_ENV

POLL_S = 0.2  # how often the stop file is looked for
# check_file() at an update looks at most this often: a stat per update is a fixed cost
# per step comparable to a small model's whole step (issue 27); 50 ms keeps a stop prompt.
CHECK_INTERVAL_S = 0.05
GRACE_S = 2.0  # time to reach a point between updates before being interrupted


class StopTraining(BaseException):
    """Raised in the script's main thread to end it cleanly; the launcher catches it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StopRequest:
    """The stop file and SIGTERM, turned into one StopTraining in the main thread."""

    def __init__(
        self, stop_file: Path | None, *, poll_s: float = POLL_S, grace_s: float = GRACE_S
    ) -> None:
        self.stop_file = stop_file
        self.poll_s = poll_s
        self.grace_s = grace_s
        self.reason: str | None = None  # set once a stop is requested
        self.raised = False
        self._pid = os.getpid()
        self._lock = threading.RLock()  # re-entered when SIGTERM lands inside request()
        self._closed = threading.Event()
        self._timer: threading.Timer | None = None
        self._watcher: threading.Thread | None = None
        self._checked_at = -math.inf

    def install(self) -> StopRequest:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.stop_file is not None:
            self._watcher = threading.Thread(
                target=self._watch, name="remedy-stop-file", daemon=True
            )
            self._watcher.start()
        return self

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def request(self, reason: str, *, interrupt_after_grace: bool = False) -> None:
        """Ask for a stop: raised at the next point between updates (or, with
        interrupt_after_grace, wherever the script is after GRACE_S)."""
        with self._lock:
            if self._closed.is_set():
                return
            if self.reason is None:
                self.reason = reason
            if interrupt_after_grace and self._timer is None:
                self._timer = threading.Timer(self.grace_s, self._interrupt)
                self._timer.daemon = True
                self._timer.start()

    def check_file(self, *, now_anyway: bool = False) -> None:
        """Look for the stop file, unless it was looked for in the last CHECK_INTERVAL_S
        (the watcher thread does so every POLL_S too); `now_anyway` at the end."""
        if self.stop_file is None or self.reason is not None:
            return
        now = time.monotonic()
        if now - self._checked_at < CHECK_INTERVAL_S and not now_anyway:
            return
        self._checked_at = now
        if self.stop_file.exists():
            self.request(f"stop file {self.stop_file}")

    def raise_if_requested(self) -> None:
        """In the main thread, at a point between updates: raise StopTraining if asked."""
        if self.reason is None or self.raised or self._closed.is_set():
            return
        if threading.current_thread() is not threading.main_thread():
            return
        self._raise()

    def close(self) -> None:
        """No StopTraining after this (the launcher is writing the results)."""
        self._closed.set()
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
        # The SIGTERM handler stays: restoring the default now could kill the process
        # while it writes result.json; after close() it ignores a request.

    # -- internals ------------------------------------------------------------------------

    def _raise(self) -> None:
        self.raised = True
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
        raise StopTraining(self.reason or "stop requested")

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:  # a forked child: die of it, as without the launcher
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if self._closed.is_set() or self.raised:
            return
        if self._timer is None:  # the first SIGTERM: at the next point between updates
            self.request("SIGTERM", interrupt_after_grace=True)
            return
        self._raise()  # a second SIGTERM, or the grace period is over: stop right here

    def _interrupt(self) -> None:
        """Timer thread: the script did not reach a point between updates in time. A real
        SIGTERM to the main thread (not _thread.interrupt_main, which would wait for a
        blocking call such as time.sleep to return) runs _on_sigterm there, now."""
        if not self._closed.is_set() and not self.raised:
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)

    def _watch(self) -> None:
        """Look for the stop file every POLL_S, and at once whenever a file lands in its
        folder where the system has inotify (the stop file is renamed into place)."""
        assert self.stop_file is not None
        watch = FolderWatch.open()
        try:
            while True:
                if watch is not None:  # before the look: a file landing after it wakes us
                    watch.watch([self.stop_file.parent])
                if self.reason is not None:
                    return
                if self.stop_file.exists():  # polite: raised between updates only
                    self.request(f"stop file {self.stop_file}")
                    return
                if watch is not None:
                    watch.wait(self.poll_s)
                    if self._closed.is_set():
                        return
                elif self._closed.wait(self.poll_s):
                    return
        finally:
            if watch is not None:
                watch.close()


HOLD_POLL_S = 0.1  # how often a held job looks for the continue file
HOLD_NOTE_S = 30.0  # a line in the log this often while held: the job is waiting, not hung
HOLD_LIMIT_S = 1800.0  # a hold never outlives a flow that is gone: then it stops as bounded


class UpdateBound:
    """A job's bound (run_spec.max_updates: a probe's, or where a run holds to be asked at
    half its length, Attempt.hold_at). Reached, the job stops; or, where its backend
    can continue it (REMEDY_CONTINUE_FILE set), it holds between updates until the continue
    file appears (the flow chose it: it trains on to its own end as the full run, its
    updates kept) or a stop is asked (it ends as at the bound), HOLD_LIMIT_S at most. A
    continue file naming a further bound (CONTINUE_UNTIL_KEY: a probe that passed its rung)
    is taken away, and the job trains on to that bound and holds there again; one naming
    the bound it holds at is taken away and the hold goes on (a resumed flow says its last
    word again)."""

    def __init__(
        self,
        max_updates: int | None,
        continue_file: Path | None,
        stop: StopRequest,
        say: Callable[[str], None],
        flush: Callable[[], None] = lambda: None,
        *,
        limit_s: float = HOLD_LIMIT_S,
    ) -> None:
        self.max_updates = max_updates
        self.continue_file = continue_file
        self.stop = stop
        self.say = say
        self.flush = flush  # the progress files: the flow sees the bound reached
        self.limit_s = limit_s
        self.went_on: Callable[[], None] = lambda: None  # called once continued

    @property
    def can_hold(self) -> bool:
        """Its backend can continue the job: at its bound it holds, not stops."""
        return self.continue_file is not None

    def reached(self, updates: int) -> None:
        """Called after each update with the updates run in this launch."""
        if self.max_updates is None or updates < self.max_updates:
            return
        self.max_updates = None  # once: a job continued trains on to its own end
        bound = f"{MAX_UPDATES_ENV}: {updates} updates run"
        if self.continue_file is None:
            self.stop.request(bound)
        elif not self.hold(updates):
            self.stop.request(f"{bound}, held {self.limit_s:g} s without being continued")

    def hold(self, updates: int) -> bool:
        """Wait to be continued (True) or stopped (True: the stop is raised between
        updates as usual); False when the limit passed first."""
        assert self.continue_file is not None
        self.flush()
        self.say(f"held at its bound ({updates} updates): waiting to go on or stop")
        started = noted = time.monotonic()
        while not self.stop.requested:
            if self.continue_file.exists():
                until = continued_until(self.continue_file)
                if until == updates:  # to hold where it holds: a resumed flow's word again
                    self.continue_file.unlink(missing_ok=True)
                    continue
                if until is not None and until > updates:
                    self.continue_file.unlink(missing_ok=True)  # the next hold waits anew
                    self.max_updates = until
                    self.say(f"continued after {updates} updates: on to {until}, to hold again")
                    return True
                if until is not None:  # a bound already passed: said, not silently dropped
                    self.say(f"the continue file's {CONTINUE_UNTIL_KEY} {until} is passed")
                self.say(f"continued after {updates} updates: training on to the job's end")
                self.went_on()
                return True
            now = time.monotonic()
            if now - started > self.limit_s:
                return False
            if now - noted >= HOLD_NOTE_S:
                self.say(f"still held at {updates} updates ({now - started:.0f} s)")
                noted = now
            self.stop.check_file(now_anyway=True)
            time.sleep(HOLD_POLL_S)
        return True


def continued_until(continue_file: Path) -> int | None:
    """The further bound a continue file names (None: none, the job trains on to its end;
    a file that cannot be read as one names none)."""
    try:
        request = json.loads(continue_file.read_text())
    except (OSError, ValueError):
        return None
    until = request.get(CONTINUE_UNTIL_KEY) if isinstance(request, dict) else None
    return until if isinstance(until, int) and not isinstance(until, bool) else None
