"""The launcher's NaN guard, for any script: the shared policy over a zero-code update.

At each update the zero-code capture reports (before the update is applied), the guard
follows the policy every job's guard does (training/nan_guard.py): the loss and the L2 norm
of all gradients must be finite; "stop" writes NonFiniteGradient IssuesFound, creates the
stop file and raises StopTraining (the update is not applied, result.json says "Stopped");
"skip" counts the bad update, writes NoIssuesFound and goes on, stopping after
MAX_SKIPPED_UPDATES; "off" does nothing; `close` at the end of a "skip" run says it ended.
What the launcher adds:
  - "skip" discards the update's gradients, so that the script's optimizer step changes
    nothing (the launcher cannot keep the script from calling it);
  - a GradScaler's own skips are let be (below);
  - in a job of several processes every rank writes the one status, under a lock, and a
    rank's "skipped, training goes on" never replaces another rank's stop.
Unlike the built-in job's guard, it writes no repro bundle: the launcher does not know the
script's batch, data or model layout.
On a GPU with "stop" or "off" the launcher has the capture report each update one update
late (debugger/zero_code.py, "One-step lag"): a non-finite update is then applied, and the
job stops before the next one (its status says "update applied (read one update late)");
"skip" always sees an update before it is applied.

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
from remedy.training.nan_guard import RULE_NAME, Evidence, NanGuardPolicy, finite
from remedy.training.stopping import StopTraining

# A GradScaler skipping an update at this scale or below is a divergence (see above).
MIN_LOSS_SCALE = 1.0


class ScriptNanGuard(NanGuardPolicy):
    """The policy (training/nan_guard.py) with the launcher's scaler and workers."""

    def __init__(
        self, mode: NanGuardMode, status_dir: Path | None, worker: str | None = None
    ) -> None:
        """`worker`: this process's name in a job of several (they share the status)."""
        super().__init__(mode, status_dir, worker)
        self.scaler_skips = 0  # updates a GradScaler skipped in a row

    def check(self, update: Update) -> None:
        """Raises StopTraining ("stop"), or discards the update ("skip"), when non-finite
        (an overflow a GradScaler handles is not; see the module docstring)."""
        if self.mode == "off":
            return
        self.scaler_skips = self.scaler_skips + 1 if update.scaler_skipped else 0
        if finite(update.loss, update.grad_norm) or (
            update.scaler_skipped and not _diverged(update)
        ):
            return
        evidence = Evidence(what=_what(update, self.scaler_skips))
        if self.record_bad(update.step, evidence, applied=update.applied):
            raise StopTraining(f"nan guard: non-finite update at step {update.step}")
        update.discard_gradients()

    def _write_status(
        self, status: RuleStatus, text: str, evidence: Evidence, steps_evaluated: int
    ) -> None:
        if self.worker is None or self.status_dir is None:
            super()._write_status(status, text, evidence, steps_evaluated)
            return
        # Every rank writes the one NonFiniteGradient status: under a lock, and a rank's
        # "skipped, training goes on" never replaces another rank's stop.
        self.status_dir.mkdir(parents=True, exist_ok=True)
        with open(self.status_dir / f".{RULE_NAME}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = store.read_json(status_path(self.status_dir, RULE_NAME)) or {}
            stopped = current.get("RuleEvaluationStatus") == RuleStatus.ISSUES_FOUND.value
            if status is RuleStatus.ISSUES_FOUND or not stopped:
                super()._write_status(status, text, evidence, steps_evaluated)


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
