"""Run an unmodified script as a remedy job, with zero-code capture, NaN guard and stopping.

    python -m remedy.training.launch path/to/script.py [script args...]
    python -m remedy.training.launch -m package.module [module args...]

The target runs exactly as `python script.py args` / `python -m module args` would run it
(runpy, __name__ == "__main__", sys.argv, the script's folder first on sys.path), and the
launcher exits with its exit status: SystemExit's code kept, an exception's traceback
printed and status 1. Before it starts, the launcher
  - sets torch's threads from REMEDY_TORCH_THREADS;
  - writes, when REMEDY_CONFIG_EDITS names keys of config files, the attempt's copies of
    them into the output folder and passes the copies' paths where the files were named
    (training/config_copies.py);
  - installs the zero-code capture (remedy.debugger.ZeroCodeCapture: torch's global hooks,
    nothing attached to the script's objects). One step is one update. When
    REMEDY_DEBUGGER_CONFIG is set, losses and gradients go to the store it names, at its
    collections' save intervals, named as the explicit Hook names them;
  - writes, when REMEDY_OUTPUT_DIR is set, progress.json and a metrics.jsonl line after
    every step and result.json at the end (training/progress.py): {"status": "Completed" |
    "Stopped", "steps": N, "final_train_loss": ...};
  - runs the NaN guard (REMEDY_NAN_GUARD: stop | skip | off; training/script_guard.py,
    the policy of training/nan_guard.py that the built-in job's guard follows too), which
    writes its rule status into REMEDY_RULE_STATUS_DIR;
  - measures how much consecutive updates' gradients agree, and how far an update moves
    the weights, every few updates, into the step records (training/gradient_agreement.py,
    training/update_ratio.py);
  - measures the updates of the script's first epoch, a pass over a DataLoader, and
    reports them as steps_per_epoch in progress.json (training/epoch_length.py);
  - turns REMEDY_STOP_FILE appearing, or SIGTERM, into a clean stop between two updates
    (training/stopping.py): store closed, result.json "Stopped", exit status 0; so does
    REMEDY_MAX_UPDATES (a probe's bound), after that many updates; where
    REMEDY_CONTINUE_FILE is set it holds there instead, until continued or stopped. With
    REMEDY_HOLD_BY_EPOCHS it holds so, once it measured an epoch, at the first share of
    that many epochs to be asked past it (an eighth, a quarter or half), saying where in
    progress.json (hold_at).
Under torchrun it runs once per rank: each rank writes its own part of the store, rank 0
alone the progress files, the NaN guard's status is shared, every rank watches the stop
file, and a rank ends with torchrun if torchrun is killed. A rank whose script ended ends
without the interpreter's teardown (end_rank): torch's gloo backend aborts a finished rank
there about one time in ten, and torchrun would call the whole job failed.
Bad contract values (REMEDY_NAN_GUARD, REMEDY_TORCH_THREADS, the debugger config) end the
launcher with status 2 before the script starts. See docs/job-contract.md.
"""

from __future__ import annotations

import atexit
import ctypes
import gc
import io
import os
import runpy
import signal
import sys
import threading
import traceback
import zipfile
from dataclasses import dataclass
from functools import partial

import torch

from remedy.debugger import ConfigError, HookConfig, Update, ZeroCodeCapture
from remedy.debugger.zero_code import ReadLag
from remedy.state_schema.asking_points import first_hold_from, share_at
from remedy.state_schema.config_keys import ConfigKeyError
from remedy.state_schema.job_env import LAUNCHER_LOG_PREFIX
from remedy.training.config_copies import write_copies
from remedy.training.environment import (
    JobEnvironment,
    JobEnvironmentError,
    started_by_torchrun,
)
from remedy.training.epoch_length import EpochLength
from remedy.training.gradient_agreement import GradientAgreement
from remedy.training.progress import ProgressFiles
from remedy.training.script_guard import ScriptNanGuard
from remedy.training.stopping import StopRequest, StopTraining, UpdateBound
from remedy.training.update_ratio import UpdateRatio

USAGE = "usage: python -m remedy.training.launch (SCRIPT.py | -m MODULE) [ARGS...]"


class UsageError(Exception):
    """The launcher's own command line is wrong (exit status 2, as `python` gives)."""


@dataclass(frozen=True)
class Target:
    """What to run: a script path or a module name (exactly one)."""

    path: str | None = None
    module: str | None = None

    def __str__(self) -> str:
        return self.path if self.path is not None else f"-m {self.module}"


def parse_command_line(argv: list[str]) -> tuple[Target, list[str]]:
    """(target, the target's own arguments); everything after the target is the target's."""
    if not argv or argv[0] in ("-h", "--help"):
        raise UsageError(USAGE)
    first = argv[0]
    if first == "-m":
        if len(argv) < 2:
            raise UsageError(f"-m needs a module name\n{USAGE}")
        return Target(module=argv[1]), argv[2:]
    if first.startswith("-m"):  # python -mpackage.module
        return Target(module=first[2:]), argv[1:]
    if first.startswith("-"):
        raise UsageError(f"unknown option {first}\n{USAGE}")
    return Target(path=first), argv[1:]


def run_target(target: Target, args: list[str]) -> None:
    """Run the target as the `python` command would; raises whatever it raises."""
    if target.module is not None:
        # `python -m` puts the working directory first on sys.path: so does `python -m
        # remedy.training.launch`, so sys.path is already right.
        sys.argv = [target.module, *args]  # runpy replaces argv[0] with the module's file
        runpy.run_module(target.module, run_name="__main__", alter_sys=True)
        return
    assert target.path is not None
    sys.argv = [target.path, *args]
    if not (os.path.isdir(target.path) or zipfile.is_zipfile(target.path)):
        # `python script.py` puts the script's folder first on sys.path (runpy does so
        # itself for a folder or a zip file with a __main__.py).
        sys.path[0] = os.path.dirname(os.path.realpath(target.path))
    runpy.run_path(target.path, run_name="__main__")


def exit_status(exc: SystemExit) -> int:
    """The status `python` exits with for this SystemExit."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def print_script_traceback(exc: BaseException) -> None:
    """The traceback as `python script.py` prints it: the launcher's frames left out."""
    tb = exc.__traceback__
    own = {os.path.realpath(__file__), os.path.realpath(runpy.__file__)}
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename != "<frozen runpy>" and os.path.realpath(filename) not in own:
            break
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


class ScriptMonitor:
    """What the launcher does at each update the capture reports (its UpdateObserver)."""

    def __init__(
        self,
        progress: ProgressFiles | None,
        guard: ScriptNanGuard,
        stop: StopRequest,
        bound: UpdateBound | None = None,
        hold_epochs: int | None = None,
    ) -> None:
        self.progress = progress
        self.guard = guard
        self.stop = stop
        self.bound = bound  # a probe's (run_spec.max_updates), or a hold to be asked
        self.hold_epochs = hold_epochs  # run_spec.hold_by_epochs
        self.updates = 0
        self.capture: ZeroCodeCapture | None = None  # once installed: its optimizer count
        self.epochs: EpochLength | None = None  # once installed: has a DataLoader run
        self.optimizers = 1  # separate optimizers reported so far
        self.agreement = GradientAgreement()
        self.update_ratio = UpdateRatio()

    def on_update(self, update: Update) -> None:
        if self.progress is not None:
            self.progress.step(
                update.step,
                update.loss,
                grad_norm=update.grad_norm,
                learning_rate=update.learning_rate,
                loss_scale=update.loss_scale,  # AMP's GradScaler only (None: left out)
                scaler_skipped=update.scaler_skipped or None,
                wall_time=update.wall_time,
                **self.agreement.see(update.step, partial(parameters_of, update)),
                **self.update_ratio.see(update.step, partial(parameters_of, update)),
            )
        if self.capture is not None and self.capture.separate_optimizers > self.optimizers:
            self.several_optimizers(self.capture.separate_optimizers)
        if self.updates == 0:
            self.first_update()
        self.guard.check(update)  # raises StopTraining on a non-finite update ("stop")
        self.stop.check_file()
        self.updates += 1
        if self.bound is not None:
            self.bound.reached(self.updates)

    def between_updates(self) -> None:
        self.stop.raise_if_requested()

    def first_update(self) -> None:
        """Told to hold by its epochs, a script whose first update came from no DataLoader
        batch (batched by hand) will never have its epoch measured (EpochLength): said in
        progress.json (epoch_unmeasured), where the flow warns of it, rather than left to
        a hold that never comes."""
        if self.hold_epochs is None or self.epochs is None or self.epochs.seen_a_batch:
            return
        if self.progress is not None:
            self.progress.know("epoch_unmeasured", 1)
        log("not held by its epochs: its first update came from no DataLoader batch")

    def several_optimizers(self, count: int) -> None:
        """A second optimizer over parameters of its own stepped (a GAN): said in
        progress.json, where the monitor reads it (the losses are no one objective)."""
        self.optimizers = count
        if self.progress is not None:
            self.progress.know("optimizers", count)
        log(f"{count} optimizers step parameters of their own (each step() is an update)")

    def epoch_measured(self, updates: int) -> None:
        """The updates of the script's first DataLoader pass (EpochLength): its epoch."""
        if self.progress is not None:
            self.progress.know("steps_per_epoch", updates)
        log(f"{updates} updates an epoch (the first pass over a DataLoader that made any)")
        if self.hold_epochs is not None:
            self.hold_by_epochs(self.hold_epochs, updates)

    def hold_by_epochs(self, epochs: int, per_epoch: int) -> None:
        """The hold the flow asked for on a length counted in epochs (REMEDY_HOLD_BY_EPOCHS),
        set once the first epoch measured it: at the first share of the length to be asked
        (an eighth, a quarter, half: first_hold_from) at that epoch's end or past it (at
        its end: held at once; the VAE's eighth is its first epoch), and said in
        progress.json (hold_at): the flow knows the hold by the job's word, not by redoing
        the sum; let go on, the flow names the next. Not set where half has passed already
        (under two epochs), is too short to be asked, nothing can continue the job (it
        would stop there), or a bound of its own (REMEDY_MAX_UPDATES: a probe's) comes
        first."""
        length = epochs * per_epoch
        point = first_hold_from(length, self.updates)
        bound = self.bound
        if bound is None or not bound.can_hold:
            log("not held by its epochs: nothing can continue this job (no continue file)")
            return
        if bound.max_updates is not None:
            log(f"not held by its epochs: bounded at {bound.max_updates} updates already")
            return
        if point is None:
            log(f"not held in {length} updates ({epochs} epochs): half is past or too short")
            return
        bound.max_updates = point
        if self.progress is not None:
            self.progress.know("hold_at", point)
        share = share_at(length, point)
        log(f"holds at {point} updates, {share} of {epochs} epochs x {per_epoch}, to be asked")
        if point <= self.updates:
            bound.reached(self.updates)  # the point is the first epoch's end: held now

    def went_on(self) -> None:
        """Continued from its hold: no longer held (progress.json's hold_at dropped)."""
        if self.progress is not None:
            self.progress.forget("hold_at")


def parameters_of(update: Update) -> list[torch.Tensor]:
    return [param for _, param in update.named_parameters()]


def main(argv: list[str] | None = None) -> int:
    try:
        target, args = parse_command_line(sys.argv[1:] if argv is None else argv)
        if target.path is not None and not os.path.exists(target.path):
            raise UsageError(f"can't open file {os.path.abspath(target.path)!r}: no such file")
        env = JobEnvironment.from_environ()
        config = None
        if env.debugger_config is not None:
            config = HookConfig.from_json_file(env.debugger_config)
        if env.config_edits:
            args = write_copies(env.config_edits, args, env.output_dir, log)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2  # as `python missing.py` does
    except (JobEnvironmentError, ConfigError, ConfigKeyError, OSError) as exc:
        print(f"{LAUNCHER_LOG_PREFIX} error: {exc}", file=sys.stderr)
        return 2
    return launch(target, args, env, config)


def end_with_parent() -> None:
    """This rank gets SIGKILL when torchrun dies. torchrun starts each rank in a session of
    its own, so the backend's last resort (SIGKILL to torchrun and its process group) would
    not reach the rank, which would train on, orphaned. Linux only (prctl)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # torchrun died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def launch(target: Target, args: list[str], env: JobEnvironment, config: HookConfig | None) -> int:
    """Run the target with capture, NaN guard, stop handling and progress files; its status."""
    if env.under_torchrun:
        end_with_parent()
    if env.torch_threads is not None:
        torch.set_num_threads(env.torch_threads)
    stop = StopRequest(env.stop_file).install()
    # Rank 0 alone writes the progress files: the others would overwrite them.
    progress = None
    if env.output_dir is not None and env.rank == 0:
        progress = ProgressFiles(env.output_dir)
    worker = f"worker_{env.rank}" if env.world_size > 1 else None
    guard = ScriptNanGuard(env.nan_guard, env.rule_status_dir, worker)
    # On a GPU the guard reads each update's values one update late, never stalling the
    # device (debugger/zero_code.py, "One-step lag"); "skip" must see an update before it
    # is applied, to discard it. (So does the update bound: one update late on a GPU.)
    lag: ReadLag = "off" if env.nan_guard == "skip" else "accelerator"
    flush = progress.flush if progress is not None else lambda: None
    bound = UpdateBound(env.max_updates, env.continue_file, stop, log, flush)
    monitor = ScriptMonitor(progress, guard, stop, bound, env.hold_epochs)
    bound.went_on = monitor.went_on
    capture = ZeroCodeCapture(config, monitor, lag=lag).install()
    monitor.capture = capture
    epochs = EpochLength(lambda: monitor.updates, monitor.epoch_measured).install()
    monitor.epochs = epochs
    ranks = f" | {worker} of {env.world_size}" if worker else ""
    log(
        f"{target}{ranks} | store {config.out_dir if config else 'off'} | nan guard "
        f"{env.nan_guard} | output {env.output_dir if progress else 'off'}"
    )
    code, reason = 0, None
    try:
        run_target(target, args)
    except StopTraining as exc:
        reason = exc.reason
    except SystemExit as exc:
        code = exit_status(exc)
    except BaseException as exc:  # the script failed: its traceback, status 1
        print_script_traceback(exc)
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        stop.check_file(now_anyway=True)  # one not seen yet counts too (below)
        stop.close()  # no StopTraining from here on
        epochs.close()
        try:
            capture.report_pending()  # the last update, when lagged: the guard sees it too
        except StopTraining as exc:
            reason = reason or exc.reason
        try:
            capture.close()  # the store's last steps and end.json
        except Exception as exc:  # the training ran: its status matters more than the store
            log(f"closing the tensor store failed: {exc}")
    guard.close(capture.steps)  # a "skip" run that met bad updates: its final word
    # A script that ends by itself after a request (a framework callback saw the stop file
    # and ended the training) was stopped too.
    reason = reason or stop.reason
    stopped = reason is not None or stop.raised or guard.stopped
    if progress is not None:
        if code == 0:  # a failed script writes no result: the backend reports the failure
            last = capture.last_update
            progress.result(
                "Stopped" if stopped else "Completed",
                capture.steps,
                final_train_loss=None if last is None else last.loss,
            )
        progress.close()
    status = "stopped" if stopped else "finished" if code == 0 else f"failed (status {code})"
    log(f"{status} after {capture.steps} steps" + (f" ({reason})" if reason else ""))
    return code


def log(line: str) -> None:
    """The launcher's own lines in the job's log, told apart by their prefix."""
    print(f"{LAUNCHER_LOG_PREFIX} {line}", file=sys.stderr, flush=True)


def end_rank(code: int) -> None:
    """End a torchrun rank whose script ended, skipping the interpreter's teardown.

    torch's gloo process group (torch 2.13, CPU) aborts a rank at interpreter exit about
    one time in ten ("terminate called without an active exception", SIGABRT), after the
    script returned and destroy_process_group() with it; torchrun then fails the job.
    Ending with os._exit does not meet it. What the teardown would have done for the
    script is done first, in its order: non-daemon threads joined, atexit handlers run
    (multiprocessing's, tempfile's, the script's own), every open file flushed (a
    module-level file left open keeps its last lines)."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for obj in gc.get_objects():
        if isinstance(obj, io.IOBase) and not obj.closed:
            try:
                obj.flush()
            except (OSError, ValueError):  # a pipe whose reader left, a detached buffer
                pass
    os._exit(code)


if __name__ == "__main__":
    status = main()
    if started_by_torchrun(os.environ):
        end_rank(status)
    sys.exit(status)
