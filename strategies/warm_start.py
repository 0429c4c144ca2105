"""Which checkpoint a relaunch may start from: the last one taken before the problem began.

Pure: the plan task lists the checkpoints it can see (with the epoch and step each recorded)
and passes them in; nothing here touches the filesystem.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from remedy.state_schema import Checkpoint, Finding


def last_clean_step(
    findings: Sequence[Finding], save_interval: int, start_step: int = 0
) -> int | None:
    """The latest update count whose weights are known to be sound, or None if unknown.

    A finding's step is the debugger hook's step inside the job (0-based; hook step s is
    the gradient of update start_step + s + 1). The rule saw the gradients saved one
    interval earlier and found nothing, so the weights after start_step + s - interval
    updates were still sound; anything later may already be poisoned. With several findings
    the earliest counts. A finding without a step tells nothing: no warm start.
    """
    steps = [f.step for f in findings if f.step is not None]
    if not steps or len(steps) != len(findings):
        return None
    return start_step + min(steps) - save_interval


def pick_checkpoint(
    checkpoints: Iterable[Checkpoint],
    findings: Iterable[Finding],
    save_interval: int,
    start_step: int = 0,
) -> Checkpoint | None:
    """The last checkpoint taken at or before the last sound step, or None."""
    clean = last_clean_step(list(findings), save_interval, start_step)
    if clean is None:
        return None
    usable = [c for c in checkpoints if c.step <= clean and c.step > 0]
    return max(usable, key=lambda c: (c.step, c.epoch), default=None)
