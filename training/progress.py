"""The files a job writes for the monitor: progress.json, metrics.jsonl, result.json.

    progress.json   after every step, replaced atomically: the latest step's record plus
                    start_step (steps done before this launch) and first_loss (the loss
                    of the first step of this launch), first_losses / last_losses (up to
                    20 finite losses of this launch's first and latest steps: "the model
                    trained" is judged by their windows, state_schema/loss_windows.py);
                    total_steps / epoch / steps_per_epoch when the job knows them.
                    Rewriting a file costs about 0.4 ms, more than a small model's whole
                    step, so steps closer together than PROGRESS_INTERVAL_S share one write:
                    the file is never more than that behind, and the last step is always
                    written (flush(), result(), close())
    metrics.jsonl   one JSON line per step ({"type": "step", ...}), and whatever else the
                    job adds (the built-in job: {"type": "epoch", ...}); flushed with
                    progress.json, not every step (a write per step costs as much)
    result.json     at the end: status Completed or Stopped, steps, final_train_loss, ...

Every file is strict JSON: non-finite numbers (NaN, +-inf) are written as null. JSON files
are written to a temporary file and renamed into place, so a reader sees the old file or
the new one, never half of one.

ProgressFiles shares the folder with the script it reports on: a script that writes these
files itself (it follows the contract by hand) keeps them. A file that appears or changes
without ProgressFiles writing it is the script's, and ProgressFiles writes it no more;
result.json is left to a script that writes its own result.json or progress.json.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, TextIO

from remedy.state_schema.job_env import METRICS_FILE, PROGRESS_FILE, RESULT_FILE
from remedy.state_schema.loss_windows import LossWindows

PROGRESS_INTERVAL_S = 0.05  # at most 20 progress.json writes a second


def finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def write_json_atomic(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, allow_nan=False) + "\n")
    os.replace(tmp, path)  # readers see the old file or the new one, never half of one


class ProgressFiles:
    """progress.json and metrics.jsonl per step, result.json at the end, in one folder."""

    def __init__(
        self, folder: Path, start_step: int = 0, interval_s: float = PROGRESS_INTERVAL_S
    ) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.start_step = start_step
        # what the job knows of itself, in progress.json only: its length (the built-in job:
        # steps_per_epoch, total_steps; a script: steps_per_epoch measured), its optimizers
        self.known: dict[str, int] = {}
        self.interval_s = interval_s
        self.first_loss: float | None = None
        self._first_seen = False
        self.loss_windows = LossWindows()
        self._pending: dict[str, Any] | None = None  # a step not yet in progress.json
        self._latest: dict[str, Any] | None = None  # the latest step, written or not
        self._written_at = -math.inf
        self._metrics: TextIO | None = None  # opened at the first step
        # each file as we last left it (or as found at the start): any other state is the
        # script's doing, and the file is then the script's
        self._expected = {n: _stat(folder / n) for n in (PROGRESS_FILE, METRICS_FILE, RESULT_FILE)}
        self.scripts_own: set[str] = set()

    def step(self, step: int, loss: float | None, **fields: Any) -> None:
        """One step: `fields` (None values omitted) go to both files as they are."""
        if not self._first_seen and loss is not None:
            self._first_seen = True  # the first step that has a loss: even a NaN one
            self.first_loss = finite_or_none(loss)
        self.loss_windows.add(loss)
        record: dict[str, Any] = {"step": step, "loss": finite_or_none(loss)}
        record |= {k: _json_number(v) for k, v in fields.items() if v is not None}
        metrics = self._open_metrics()
        if metrics is not None:
            metrics.write(json.dumps({"type": "step"} | record, allow_nan=False) + "\n")
        self._pending = self._latest = record
        if time.monotonic() - self._written_at >= self.interval_s:
            self.flush()

    def know(self, key: str, value: int) -> None:
        """What the job knows of itself (`known`), in progress.json at the next flush even
        where its latest step is there already: a job that holds after it (its hold point,
        said once its epoch was measured) writes no step until the flow has read it."""
        self.known[key] = value
        self._pending = self._latest

    def forget(self, key: str) -> None:
        """`know`'s undoing: the key gone from progress.json at the next flush."""
        if self.known.pop(key, None) is not None:
            self._pending = self._latest

    def add(self, record: dict[str, Any]) -> None:
        """Another line of metrics.jsonl (the built-in job's {"type": "epoch", ...})."""
        metrics = self._open_metrics()
        if metrics is not None:
            line = {k: _json_number(v) for k, v in record.items()}
            metrics.write(json.dumps(line, allow_nan=False) + "\n")

    def flush(self) -> None:
        """Write the latest step to progress.json now, if it is not there yet, and the
        step lines to metrics.jsonl."""
        if self._metrics is not None:
            self._metrics.flush()
        if self._pending is None or self._taken(PROGRESS_FILE):
            return
        path = self.folder / PROGRESS_FILE
        latest = self._pending | self.known
        latest |= {"start_step": self.start_step, "first_loss": self.first_loss}
        write_json_atomic(path, latest | self.loss_windows.fields())
        self._expected[PROGRESS_FILE] = _stat(path)
        self._pending = None
        self._written_at = time.monotonic()

    def result(self, status: str, steps: int, **fields: Any) -> dict[str, Any] | None:
        """Write result.json; None (nothing written) when the script reports itself."""
        self.flush()
        if self._taken(RESULT_FILE) or self._taken(PROGRESS_FILE):
            return None
        record = {"status": status, "steps": steps}
        record |= {k: _json_number(v) for k, v in fields.items()}
        write_json_atomic(self.folder / RESULT_FILE, record)
        return record

    def close(self) -> None:
        self.flush()
        if self._metrics is not None:
            self._metrics.close()

    def _open_metrics(self) -> TextIO | None:
        if self._metrics is None and not self._taken(METRICS_FILE):
            self._metrics = (self.folder / METRICS_FILE).open("w")
        return self._metrics

    def _taken(self, name: str) -> bool:
        """True once the script has written the file itself."""
        if name not in self.scripts_own and _stat(self.folder / name) != self._expected[name]:
            self.scripts_own.add(name)
        return name in self.scripts_own


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


def _json_number(value: Any) -> Any:
    return finite_or_none(value) if isinstance(value, float) else value
