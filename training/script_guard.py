"""The NaN guard for scripts run by the launcher: a non-finite update is never applied.

At each update the zero-code capture reports (before the update is applied), the loss and
the L2 norm of all gradients (float64: finite exactly when every gradient is) must be
finite. When they are not:
  - "stop" (default): rule status NonFiniteGradient IssuesFound is written, in the shape
    training/guard.py writes it (its writer, write_rule_status), the stop file is created
    (as a StopTraining action does, so the rule evaluator stops with the job), and
    StopTraining is raised: the update is not applied, result.json says "Stopped";
  - "skip": the update's gradients are discarded (it changes nothing), a NoIssuesFound
    status says so, and training goes on; after MAX_SKIPPED_BATCHES bad updates it
    stops as "stop" does;
  - "off": nothing.
Unlike the built-in job's guard, it writes no repro bundle: the launcher does not know the
script's batch, data or model layout.
On a GPU with "stop" or "off" the launcher has the capture report each update one update
late (debugger/zero_code.py, "One-step lag"): a non-finite update is then applied, and the
job stops before the next one; "skip" always sees an update before it is applied.

AMP: a GradScaler skips an update whose (scaled) gradients overflow and lowers its scale;
that is its normal calibration, not a divergence, and the guard lets it be. It is one when
  - the loss itself, unscaled, is not finite (the scaler would skip forever), or
  - the scaler skips an update at a loss scale of MIN_LOSS_SCALE or less: the gradients
    overflow even when not amplified, the scale is collapsing. DeepSpeed ends a run then
    ("loss scale already at minimum", min_loss_scale 1), Megatron's min_scale is 1 too,
    fairseq raises "Minimum loss scale reached ... your loss is probably exploding".
With torch's defaults (2**16, halved at each skip) that is 17 skips in a row. Such an
update is a bad one as a non-finite update without a scaler is.
"""

from __future__ import annotations

import fcntl
import math
from pathlib import Path

from remedy.debugger import store
from remedy.debugger.status import RuleStatus, status_path
from remedy.debugger.zero_code import Update
from remedy.training.environment import NanGuardMode
from remedy.training.guard import (
    MAX_SKIPPED_BATCHES,
    RULE_NAME,
    request_stop,
    write_rule_status,
)
from remedy.training.stopping import StopTraining

# A GradScaler skipping an update at this scale or below is a divergence (see above).
MIN_LOSS_SCALE = 1.0


class ScriptNanGuard:
    def __init__(
        self, mode: NanGuardMode, status_dir: Path | None, worker: str | None = None
    ) -> None:
        """`worker`: this process's name in a job of several (they share the status)."""
        self.mode = mode
        self.status_dir = status_dir
        self.worker = worker
        self.bad_updates = 0
        self.first_bad_step: int | None = None
        self.stopped = False
        self.scaler_skips = 0  # updates a GradScaler skipped in a row

    def check(self, update: Update) -> None:
        """Raises StopTraining ("stop"), or discards the update ("skip"), when non-finite
        (an overflow a GradScaler handles is not; see the module docstring)."""
        if self.mode == "off":
            return
        self.scaler_skips = self.scaler_skips + 1 if update.scaler_skipped else 0
        if update.finite or (update.scaler_skipped and not _diverged(update)):
            return
        self.bad_updates += 1
        if self.first_bad_step is None:
            self.first_bad_step = update.step
        what = _what(update, self.scaler_skips)
        stop = self.mode == "stop" or self.bad_updates >= MAX_SKIPPED_BATCHES
        if stop:
            action = "update not applied, job stopped"
            status = RuleStatus.ISSUES_FOUND
        else:
            action = "update skipped, training goes on (nan guard skip)"
            status = RuleStatus.NO_ISSUES_FOUND
            update.discard_gradients()
        text = (
            f"{self.bad_updates} non-finite update(s), latest at step {update.step}: "
            f"{what}; {action}"
        )
        if self.worker is not None:
            text = f"{self.worker}: {text}"
        if self.status_dir is not None:
            self._write_status(status, update.step, text)
        print(f"nan guard: {text}", flush=True)
        if stop:
            self.stopped = True
            request_stop()
            raise StopTraining(f"nan guard: non-finite update at step {update.step}")

    def _write_status(self, status: RuleStatus, step: int, text: str) -> None:
        assert self.status_dir is not None
        if self.worker is None:
            write_rule_status(self.status_dir, status, step, text, bad_batches=self.bad_updates)
            return
        # Every rank writes the one NonFiniteGradient status: under a lock, and a rank's
        # "skipped, training goes on" never replaces another rank's stop.
        self.status_dir.mkdir(parents=True, exist_ok=True)
        with open(self.status_dir / f".{RULE_NAME}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = store.read_json(status_path(self.status_dir, RULE_NAME)) or {}
            stopped = current.get("RuleEvaluationStatus") == RuleStatus.ISSUES_FOUND.value
            if status is RuleStatus.ISSUES_FOUND or not stopped:
                write_rule_status(self.status_dir, status, step, text, bad_batches=self.bad_updates)


def _diverged(update: Update) -> bool:
    """A step the GradScaler skipped: a divergence rather than its calibration?"""
    collapsed = update.loss_scale is not None and update.loss_scale <= MIN_LOSS_SCALE
    return collapsed or (update.loss is not None and not math.isfinite(update.loss))


def _what(update: Update, scaler_skips: int) -> str:
    parts = []
    if update.loss is not None and not math.isfinite(update.loss):
        parts.append(f"loss {update.loss}")
    if update.scaler_skipped:
        scale = "?" if update.loss_scale is None else f"{update.loss_scale:g}"
        parts.append(
            f"non-finite gradients: the GradScaler skipped {scaler_skips} update(s) in a row, "
            f"loss scale {scale} (collapsed at {MIN_LOSS_SCALE:g} or below)"
        )
    elif update.grad_norm is not None and not math.isfinite(update.grad_norm):
        names = update.nonfinite_gradients()
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        parts.append(f"non-finite gradients ({shown or 'gradient norm overflows'})")
    return " and ".join(parts)
