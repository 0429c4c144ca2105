"""How a stop request reaches a training process that does not end by itself.

1. the stop file appears (written by the backend, or by the rule evaluator on StopTraining):
   the built-in job and the launcher end after the current step;
2. stop_grace_s later, SIGTERM to the training process (the cloud service's own stop
   signal: the built-in job and the launcher end cleanly on it, and so does any script
   that handles it);
3. kill_after_s after that, SIGKILL.
A SIGTERM to the supervisor itself (someone stopping the whole job) skips the grace.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass


@dataclass
class Escalation:
    grace_s: float
    kill_after_s: float
    requested_at: float | None = None
    terminated_at: float | None = None
    killed: bool = False

    def signal_due(self, now: float, urgent: bool = False) -> signal.Signals | None:
        """The signal to send now to a process asked to stop (once each), or None."""
        if self.requested_at is None:
            self.requested_at = now
        if self.terminated_at is None:
            if urgent or now - self.requested_at >= self.grace_s:
                self.terminated_at = now
                return signal.SIGTERM
            return None
        if not self.killed and now - self.terminated_at >= self.kill_after_s:
            self.killed = True
            return signal.SIGKILL
        return None

    @property
    def longest_s(self) -> float:
        """The longest a stop can take, from the request to SIGKILL."""
        return self.grace_s + self.kill_after_s
