"""Rule evaluator: follows a store while the job runs and writes one status file per rule.

    python -m remedy.debugger.evaluator --trial STORE --rules RULES.json --status-dir DIR \
        [--stop-file PATH] [--notify-file PATH] [--poll-interval 0.5] [--busy-poll-interval S]

Streaming: every poll refreshes the trial (new step files only) and invokes each rule still
in progress on the new steps (in global step order within a poll); old steps are never
read again. With --busy-poll-interval (a store that is cheap to list: the local backend
asks for 0.05 s), polls come that often until the first step and while they find new ones.
A rule that fires is IssuesFound (final); with the StopTraining action and --stop-file,
the stop file is created so the job can stop without waiting for the orchestrator; with
the Notify action a JSON line describing the finding is appended to the notify file
(default <status-dir>/notifications.jsonl) for the orchestrator to send on.
At polls that bring no new step, rules about time (StalledTraining) are asked too.
A rule that raises is Error (final); the others carry on. A rule that has read no tensor
after --unread-steps saved steps, or by the job's end, is Error naming what it waited for
(never NoIssuesFound for having seen nothing). When end.json is seen and every step is
evaluated, the rules left are NoIssuesFound. A damaged store (a corrupt or missing step
file, a file that is not a regular file, JSON that fails its checks) ends the evaluation:
the steps before the damage are evaluated (when it is found while following the store),
then the rules left are Error, naming the file and what is wrong, and the process exits 1
without a traceback.
A store of several processes (torchrun) is read worker by worker: each rule gets one
instance per worker, over that worker's steps alone (a rule keeps its state per worker,
e.g. its window of losses), and fires for the job when it fires on any worker (the status
names the worker). The job has ended when every worker's part has. SIGTERM/SIGINT: evaluate what is
already written, mark rules still in progress Stopped. Exit 0 in all those cases; 2 when
RULES.json is invalid (Error statuses name the problem); 1 on an unexpected failure.
Imports numpy and safetensors only, so it starts fast beside the job.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remedy.debugger import store
from remedy.debugger.exceptions import DebuggerError
from remedy.debugger.folder_watch import FolderWatch, store_folders
from remedy.debugger.modes import STEP_MODES, ModeKeys
from remedy.debugger.readers import LocalStoreReader
from remedy.debugger.rule_config import (
    NOTIFY,
    STOP_TRAINING,
    RuleConfig,
    RuleConfigError,
    load_rule_configs,
)
from remedy.debugger.rules import Rule, get_rule, load_rule_file, reads
from remedy.debugger.status import RuleStatus, RuleStatusRecord, write_status
from remedy.debugger.trial import Trial, create_trial

if TYPE_CHECKING:
    import subprocess

DEFAULT_POLL_INTERVAL = 0.5
# A local store's busy interval: until the first step and while steps keep arriving the
# evaluator polls this often, since a job of 5 ms steps would otherwise run 100 more steps
# between a finding and its stop. Not for S3, where every poll costs requests and a cloud
# job waits minutes for its instance. Where the system has inotify a busy evaluator polls
# as soon as a file lands in the store (debugger/folder_watch.py), within this otherwise.
BUSY_POLL_INTERVAL = 0.05
# ... and it stays busy this long after the last poll that found steps: a job's small steps
# reach the store in batches about 0.05 s apart, 0.1 s when its loop pauses (the hook's
# writer, debugger/writer.py), so a busy poll between two batches finds none.
BUSY_GRACE_S = 0.25
# A rule that has read no tensor after this many saved steps is Error: the job does not
# save what it reads, and its silence must not pass for NoIssuesFound. Generous, because
# some tensors come once per epoch (the accuracy); at the job's end any such rule is Error.
DEFAULT_UNREAD_STEPS = 1000
NOTIFY_FILE = "notifications.jsonl"


@dataclass
class _RuleRun:
    config: RuleConfig
    rule: Rule  # over the whole trial: built at start, so a bad configuration fails there
    record: RuleStatusRecord
    per_worker: dict[str, Rule] = field(default_factory=dict)  # built as workers show up
    evaluated: dict[str, int] = field(default_factory=dict)  # steps evaluated per worker
    has_read: bool = False  # some invocation read a tensor (Trial.tensor_reads grew)


def instantiate_rules(trial: Trial, configs: Sequence[RuleConfig]) -> list[Rule]:
    """Build every rule; raise RuleConfigError naming each one that cannot be built."""
    rules: list[Rule] = []
    problems: dict[str, str] = {}
    for config in configs:
        try:
            if config.rule_file is not None:
                cls = load_rule_file(config.rule_file, config.rule)
            else:
                cls = get_rule(config.rule)
            rules.append(cls(trial, **config.parameters))
        except ValueError as exc:
            problems[config.name] = str(exc)
    if problems:
        message = "; ".join(f"{name}: {problem}" for name, problem in problems.items())
        raise RuleConfigError(message, problems, [c.name for c in configs])
    return rules


class RuleEvaluator:
    """Python API of the evaluator; main() wraps it in a process.

    start() writes InProgress statuses; poll() evaluates new steps and returns True once
    every rule is final; stop() evaluates what is written and marks the rest Stopped;
    run() loops poll() until done or until `stop_event` is set.
    """

    def __init__(
        self,
        trial: Trial,
        configs: Sequence[RuleConfig],
        status_dir: str | os.PathLike[str],
        stop_file: str | os.PathLike[str] | None = None,
        log: Callable[[str], None] = print,  # one line per state change
        notify_file: str | os.PathLike[str] | None = None,
        notify: Callable[[dict[str, Any]], None] | None = None,
        unread_steps: int = DEFAULT_UNREAD_STEPS,
    ) -> None:
        self.trial = trial
        self.unread_steps = unread_steps
        self.status_dir = Path(status_dir)
        self.stop_file = None if stop_file is None else Path(stop_file)
        self.notify_file = Path(notify_file or self.status_dir / NOTIFY_FILE)
        self._notify = notify
        self._log = log
        rules = instantiate_rules(trial, configs)
        self._runs = [
            _RuleRun(
                config,
                rule,
                RuleStatusRecord(config.name, RuleStatus.IN_PROGRESS, "", rule=config.rule),
            )
            for config, rule in zip(configs, rules, strict=True)
        ]
        # last step evaluated, per (worker, mode)
        self._cursor: dict[tuple[str, ModeKeys], int] = {}
        self.store_error: DebuggerError | None = None  # the store is damaged: evaluation over
        # A poll found new steps within BUSY_GRACE_S, or none has come yet: more are likely
        # coming soon.
        self.expecting_steps = True
        self._progressed_at = -math.inf  # when a poll last found new steps

    @property
    def statuses(self) -> dict[str, RuleStatusRecord]:
        return {run.config.name: run.record for run in self._runs}

    @property
    def done(self) -> bool:
        return all(run.record.status.is_final for run in self._runs)

    def start(self) -> None:
        self.status_dir.mkdir(parents=True, exist_ok=True)
        for run in self._runs:
            self._set(run, RuleStatus.IN_PROGRESS, "Waiting for steps")

    def poll(self) -> bool:
        """Evaluate steps written since the last poll; True once every rule is final."""
        try:
            self.trial.refresh()
        except DebuggerError as exc:  # damaged: evaluate the steps before it, then say so
            self.store_error = exc
        progressed = self._evaluate_new_steps()
        now = time.monotonic()
        if progressed:
            self._progressed_at = now
        self.expecting_steps = not self._cursor or now - self._progressed_at < BUSY_GRACE_S
        if self.store_error is not None:
            self.fail_all(f"cannot read the store: {self.store_error}")
            return True
        if not progressed and not self.trial.has_ended:
            for run in self._active():
                self._invoke_idle(run)
        for run in self._active():
            if self._unread(run) and (
                self.trial.has_ended or run.record.steps_evaluated >= self.unread_steps
            ):
                self._set(run, RuleStatus.ERROR, self._unread_message(run))
        if self.trial.has_ended:  # refresh() saw end.json, so every step was listed
            for run in self._active():
                self._set(run, RuleStatus.NO_ISSUES_FOUND, f"No issues found in {self._steps(run)}")
        for run in progressed:
            if not run.record.status.is_final:  # progress only; not a state change
                run.record.details = f"Evaluated {self._steps(run)}"
                self._write(run)
        return self.done

    def stop(self) -> None:
        """Evaluate what is already written, then mark the rules left Stopped."""
        if not self.done:
            self.poll()
        for run in self._active():
            self._set(run, RuleStatus.STOPPED, f"Stopped after evaluating {self._steps(run)}")

    def run(
        self, poll_interval: float, stop_event: threading.Event, busy_interval: float | None = None
    ) -> None:
        self.start()
        watch = self._folder_watch() if busy_interval is not None else None
        try:
            while True:
                if watch is not None:  # before the poll: a file landing after it wakes us
                    watch.watch(store_folders(self.trial.reader.location))
                if self.poll():
                    return
                wait = self.next_wait(poll_interval, busy_interval)
                if watch is not None and self.expecting_steps:
                    # Busy: poll as soon as a file lands in the store (a stop still comes
                    # within `wait`), not at the end of the interval.
                    watch.wait(wait)
                    stopped = stop_event.is_set()
                else:
                    stopped = stop_event.wait(wait)
                if stopped:
                    self.stop()
                    return
        finally:
            if watch is not None:
                watch.close()

    def _folder_watch(self) -> FolderWatch | None:
        """A watch of the store's folders where it is a local store of ours and the system
        has inotify; None: poll only."""
        if not isinstance(self.trial.reader, LocalStoreReader):
            return None
        return FolderWatch.open()

    def next_wait(self, poll_interval: float, busy_interval: float | None = None) -> float:
        """Seconds until the next poll: `busy_interval` (if given) until the first step and
        while steps keep arriving (within BUSY_GRACE_S: a finding stops a fast job within a
        few steps), else `poll_interval` (a pause: the job is evaluating, saving or slow)."""
        if busy_interval is None or not self.expecting_steps:
            return poll_interval
        return min(poll_interval, busy_interval)

    def fail_all(self, message: str) -> None:
        """Mark every rule still in progress Error (the evaluator itself broke)."""
        for run in self._active():
            self._set(run, RuleStatus.ERROR, message)

    # -- internals ------------------------------------------------------------------------

    def _write(self, run: _RuleRun) -> None:
        # Never recreate a status folder someone deleted (with its job folder): a write
        # would bring back part of what they removed.
        if not self.status_dir.is_dir():
            raise FileNotFoundError(f"{self.status_dir} is gone")
        write_status(self.status_dir, run.record)

    def _active(self) -> list[_RuleRun]:
        return [run for run in self._runs if not run.record.status.is_final]

    def _evaluate_new_steps(self) -> list[_RuleRun]:
        # Per-(worker, mode) cursors: per-mode listings only grow at the end, whereas a step
        # of one mode can be listed after a later step of another. New steps run in global
        # order, the workers' steps of one global step in rank order.
        pending: list[tuple[int, int, str, ModeKeys, int]] = []
        for rank, worker in enumerate(self.trial.workers()):
            trial = self.trial.worker(worker)
            for mode in STEP_MODES:
                steps = trial.steps(mode)
                cursor = self._cursor.get((worker, mode))
                start = 0 if cursor is None else bisect.bisect_right(steps, cursor)
                for step in steps[start:]:
                    global_step = trial.step_header(step, mode).global_step
                    pending.append((global_step, rank, worker, mode, step))
        progressed: dict[str, _RuleRun] = {}
        for _, _, worker, mode, step in sorted(pending):
            active = self._active()
            if not active:
                break
            for run in active:
                progressed[run.config.name] = run
                self._invoke(run, worker, step, mode)
            self._cursor[(worker, mode)] = step
        return list(progressed.values())

    def _rule_of(self, run: _RuleRun, worker: str) -> Rule:
        """The run's rule instance for one worker; a store of one process: the rule itself."""
        rule = run.per_worker.get(worker)
        if rule is None:
            trial = self.trial.worker(worker)
            rule = run.rule if trial is self.trial else instantiate_rules(trial, [run.config])[0]
            run.per_worker[worker] = rule
        return rule

    def _unread(self, run: _RuleRun) -> bool:
        return run.rule.READS_TENSORS and not run.has_read

    def _unread_message(self, run: _RuleRun) -> str:
        wanted = reads.describe(run.rule.reads())
        return (
            f"read nothing in {self._steps(run)}: it waits for {wanted}, which the job did "
            "not save (the built-in job saves what its rules read; a script's zero-code "
            "capture saves only losses, gradients, weights and biases: save the others with "
            "the debugger's Hook or a framework callback)"
        )

    def _invoke(self, run: _RuleRun, worker: str, step: int, mode: ModeKeys) -> None:
        try:
            rule = self._rule_of(run, worker)
            reads_before = rule.trial.tensor_reads
            fired = rule.invoke_at_step(step, mode)
            run.has_read = run.has_read or rule.trial.tensor_reads > reads_before
        except Exception as exc:  # a broken rule must not take the others down
            run.record.step, run.record.mode = step, mode
            run.record.worker = self._worker_label(worker)
            where = f"{mode.value} step {step}{self._on(worker)}"
            self._set(run, RuleStatus.ERROR, f"{type(exc).__name__}: {exc} (at {where})")
            return
        run.evaluated[worker] = run.evaluated.get(worker, 0) + 1
        run.record.steps_evaluated = max(run.evaluated.values())
        if not fired:
            return
        run.record.step, run.record.mode = step, mode
        self._issue(run, rule.finding, worker)

    def _invoke_idle(self, run: _RuleRun) -> None:
        # Before any step, the rule over the whole trial (its layout may not be known yet).
        rules = list(run.per_worker.items()) or [(self.trial.workers()[0], run.rule)]
        for worker, rule in rules:
            try:
                fired = rule.invoke_idle()
            except Exception as exc:
                where = f"while idle{self._on(worker)}"
                self._set(run, RuleStatus.ERROR, f"{type(exc).__name__}: {exc} ({where})")
                return
            if fired:
                self._issue(run, rule.finding, worker)
                return

    def _worker_label(self, worker: str) -> str | None:
        """The worker, named only in a job of several processes."""
        return worker if self.trial.num_workers > 1 else None

    def _on(self, worker: str) -> str:
        label = self._worker_label(worker)
        return "" if label is None else f", on {label}"

    def _steps(self, run: _RuleRun) -> str:
        steps = f"{run.record.steps_evaluated} steps"
        workers = self.trial.num_workers
        return steps if workers == 1 else f"{steps} ({workers} workers)"

    def _issue(self, run: _RuleRun, finding: Any, worker: str) -> None:
        """IssuesFound, then the rule's actions."""
        if finding is not None:
            run.record.step, run.record.mode = finding.step, finding.mode
        run.record.tensor = None if finding is None else finding.tensor
        run.record.worker = self._worker_label(worker)
        where = f"{run.record.mode.value} step {run.record.step}" if run.record.mode else "?"
        message = f"fired at {where}" if finding is None else finding.message
        message += self._on(worker)
        self._set(run, RuleStatus.ISSUES_FOUND, message)
        if STOP_TRAINING in run.config.actions and self.stop_file is not None:
            self._request_stop(run, message)
        if NOTIFY in run.config.actions:
            self._send_notification(run, message)

    def _send_notification(self, run: _RuleRun, message: str) -> None:
        payload = self._finding_payload(run, message)
        line = json.dumps(payload, sort_keys=True)
        self.notify_file.parent.mkdir(parents=True, exist_ok=True)
        # One short line per append: readers of a JSON-lines file never see half a record.
        with open(self.notify_file, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        if self._notify is not None:
            self._notify(payload)
        self._log(f"{store.utc_now_iso()} {run.config.name}: Notify -> {self.notify_file}")

    def _finding_payload(self, run: _RuleRun, message: str) -> dict[str, Any]:
        return {
            "rule": run.config.name,
            "rule_type": run.config.rule,
            "step": run.record.step,
            "mode": None if run.record.mode is None else run.record.mode.value,
            "tensor": run.record.tensor,
            "worker": run.record.worker,
            "message": message,
            "time": store.utc_now_iso(),
        }

    def _request_stop(self, run: _RuleRun, message: str) -> None:
        if self.stop_file is None or self.stop_file.exists():
            return  # the first rule to ask wins; the job reads one reason
        store.write_json(self.stop_file, self._finding_payload(run, message))
        self._log(f"{store.utc_now_iso()} {run.config.name}: StopTraining -> {self.stop_file}")

    def _set(self, run: _RuleRun, status: RuleStatus, details: str) -> None:
        old = run.record.status
        run.record.status, run.record.details = status, details
        self._write(run)
        change = str(status) if old is status else f"{old} -> {status}"
        self._log(f"{run.record.last_modified} {run.config.name}: {change}: {details}")


def write_errors(
    status_dir: str | os.PathLike[str],
    names: Sequence[str],
    problems: Mapping[str, str],
    fallback: str,
) -> None:
    """An Error status for each rule: its own problem, else `fallback`."""
    Path(status_dir).mkdir(parents=True, exist_ok=True)
    for name in names:
        record = RuleStatusRecord(name, RuleStatus.ERROR, problems.get(name, fallback))
        write_status(status_dir, record)


def evaluator_command(
    trial: str,
    rules: str,
    status_dir: str,
    stop_file: str,
    poll_interval: float,
    busy_poll_interval: float | None = None,
) -> list[str]:
    """How a job backend starts the evaluator beside a job: it stops when the backend's
    process that started it dies (--exit-with-parent), so none is left polling."""
    busy = [] if busy_poll_interval is None else ["--busy-poll-interval", str(busy_poll_interval)]
    return [
        sys.executable, "-m", "remedy.debugger.evaluator", "--trial", trial, "--rules", rules,
        "--status-dir", status_dir, "--stop-file", stop_file,
        "--poll-interval", str(poll_interval), *busy, "--exit-with-parent",
    ]  # fmt: skip


def wait_while_judging(
    evaluator: subprocess.Popen[bytes],
    status_dir: str | os.PathLike[str],
    quiet_s: float,
    poll_s: float = 0.5,
    each_poll: Callable[[], None] | None = None,
) -> bool:
    """After its job has ended, let an evaluator started by evaluator_command end by
    itself: as long as its statuses keep changing (it is still catching up with the
    store: a slow store, many tensors, a loaded machine), and until `quiet_s` pass
    without a change. True when it ended; the caller stops one that did not."""
    folder = Path(status_dir)

    def said() -> list[tuple[str, int]]:
        stamps = []
        for path in sorted(folder.glob("*.json")):
            with contextlib.suppress(OSError):  # replaced meanwhile: the next poll sees it
                stamps.append((path.name, path.stat().st_mtime_ns))
        return stamps

    last, deadline = said(), time.monotonic() + quiet_s
    while evaluator.poll() is None and time.monotonic() < deadline:
        if each_poll is not None:
            each_poll()
        time.sleep(poll_s)
        if (now := said()) != last:
            last, deadline = now, time.monotonic() + quiet_s
    return evaluator.poll() is not None


def watch_surroundings(
    stop_event: threading.Event, status_dir: Path, with_parent: bool, interval: float
) -> None:
    """An evaluator nobody reads must not poll for ever: it stops when its parent exits
    (with_parent), and exits at once, writing nothing, when the folder holding its status
    folder is deleted (a write would only recreate part of it)."""
    parent = os.getppid()

    def watch() -> None:
        while not stop_event.wait(interval):
            if folder_deleted(status_dir):
                os._exit(1)
            if with_parent and os.getppid() != parent:
                print(f"its parent process {parent} exited: stopping", flush=True)
                stop_event.set()

    threading.Thread(target=watch, name="surroundings", daemon=True).start()


def folder_deleted(status_dir: Path, *, or_status_folder: bool = False) -> bool:
    """Whether the folder holding the status folder (or, or_status_folder: the status folder
    itself, which exists once the evaluator has started) is gone; said on stdout."""
    holder = status_dir.absolute().parent
    if holder.is_dir() and (status_dir.is_dir() or not or_status_folder):
        return False
    gone = status_dir if holder.is_dir() else holder
    print(f"{gone} was deleted: nothing to report to; exiting", flush=True)
    return True


def _print_line(line: str) -> None:
    print(line, flush=True)  # flushed: the job backend tails this output live


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    prog = "python -m remedy.debugger.evaluator"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--trial", required=True, help="store folder the job writes")
    parser.add_argument("--rules", required=True, help="RULES.json")
    parser.add_argument("--status-dir", required=True, help="where <name>.json statuses go")
    parser.add_argument("--stop-file", default=None, help="created when StopTraining fires")
    parser.add_argument(
        "--notify-file",
        default=None,
        help=f"JSON lines appended when a Notify rule fires (default <status-dir>/{NOTIFY_FILE})",
    )
    parser.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_INTERVAL)
    parser.add_argument(
        "--busy-poll-interval",
        type=float,
        default=None,
        help="poll this often until the first step and while steps keep arriving (a store "
        f"cheap to list; the local backend: {BUSY_POLL_INTERVAL}); default: --poll-interval",
    )
    parser.add_argument(
        "--unread-steps",
        type=int,
        default=DEFAULT_UNREAD_STEPS,
        help="a rule that has read no tensor after this many saved steps is Error "
        f"(default {DEFAULT_UNREAD_STEPS}; at the job's end, any such rule is)",
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop (rules left Stopped) when the process that started it exits",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    stop_event = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop_event.set()

    # Installed first: a SIGTERM that arrives while starting up still ends in "Stopped".
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        configs = load_rule_configs(args.rules)
        trial = create_trial(args.trial)
        evaluator = RuleEvaluator(
            trial,
            configs,
            args.status_dir,
            args.stop_file,
            _print_line,
            notify_file=args.notify_file,
            unread_steps=args.unread_steps,
        )
    except RuleConfigError as exc:
        fallback = f"not started: RULES.json is invalid: {exc}"
        write_errors(args.status_dir, exc.names, exc.problems, fallback)
        print(f"invalid rules: {exc}", file=sys.stderr, flush=True)
        return 2
    except DebuggerError as exc:  # e.g. a store of a format this version cannot read
        names = [c.name for c in configs]
        write_errors(args.status_dir, names, {}, f"cannot read the store: {exc}")
        print(f"cannot evaluate: {exc}", file=sys.stderr, flush=True)
        return 1
    watch_surroundings(stop_event, Path(args.status_dir), args.exit_with_parent, args.poll_interval)
    try:
        evaluator.run(args.poll_interval, stop_event, args.busy_poll_interval)
    except Exception as exc:
        if folder_deleted(Path(args.status_dir), or_status_folder=True):  # deleted mid-write
            return 1
        evaluator.fail_all(f"evaluator failed: {type(exc).__name__}: {exc}")
        raise  # traceback to stderr, exit 1
    if evaluator.store_error is not None:
        print(f"cannot evaluate: {evaluator.store_error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
