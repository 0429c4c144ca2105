"""Which checkpoint a relaunch may start from: the last one taken before the problem began.

Pure: the plan task lists the checkpoints it can see (with the epoch and step each recorded)
and passes them in; nothing here touches the filesystem.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from remedy.state_schema import VERDICT_FINDINGS, Checkpoint, Finding
from remedy.state_schema.hyperparameters import StepWindow


def update_of(hook_step: int, start_step: int = 0, skipped: Sequence[StepWindow] = ()) -> int:
    """The update (counted from 1 over the whole run) whose gradient a job's hook step is.

    The hook counts from 0 in each launch (hook step s is update start_step + s + 1), and
    it does not count the updates a launch passes over (skip_steps after its start)."""
    update = start_step + hook_step + 1
    for window in sorted(skipped, key=lambda w: w.first):
        first = max(window.first, start_step + 1)
        if first <= update and first <= window.last:
            update += window.last - first + 1
    return update


def last_clean_step(
    findings: Sequence[Finding],
    save_interval: int,
    start_step: int = 0,
    skipped: Sequence[StepWindow] = (),
) -> int | None:
    """The latest update count whose weights are known to be sound, or None if unknown.

    A finding's step is the debugger hook's step inside the job (update_of). The rule saw
    the gradients saved one interval earlier and found nothing, so the weights before
    that interval were still sound; anything later may already be poisoned. With several
    findings the earliest counts. A finding without a step tells nothing: no warm start.
    A verdict's finding (VERDICT_FINDINGS, at the run's end: a model that learned nothing,
    or too slowly) leaves nothing worth keeping, and its checkpoints leave a relaunch no
    updates to learn in: no warm start either.
    """
    steps = [f.step for f in findings if f.step is not None]
    if not steps or len(steps) != len(findings):
        return None
    if any(f.rule_class in VERDICT_FINDINGS for f in findings):
        return None
    return update_of(min(steps), start_step, skipped) - 1 - save_interval


def pick_checkpoint(
    checkpoints: Iterable[Checkpoint],
    findings: Iterable[Finding],
    save_interval: int,
    start_step: int = 0,
    skipped: Sequence[StepWindow] = (),
) -> Checkpoint | None:
    """The last checkpoint taken at or before the last sound step, or None."""
    clean = last_clean_step(list(findings), save_interval, start_step, skipped)
    if clean is None:
        return None
    usable = [c for c in checkpoints if c.step <= clean and c.step > 0]
    return max(usable, key=lambda c: (c.step, c.epoch), default=None)
