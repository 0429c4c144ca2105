"""Metric definitions on a local job: the lines of its log turned into metric records.

run_spec.metric_definitions name what a script prints (`test ppl 148.4`), as the cloud
service's MetricDefinitions do; that service reads them from the job's log itself, and here
the supervisor does: it follows the training log while the job runs, and before it reports
the job's end, and appends one record per matching line to log_metrics.jsonl (it is the
file's only writer):

    {"type": "metric", "name": "test:perplexity", "value": 148.4, "step": 640,
     "wall_time": 1767225600.0}

`step` is the latest step the job had reported in progress.json when the line was read (None
before its first), `value` null when the printed number is not finite. A regex gets
MATCH_TIMEOUT_S per line (lines are matched on their first MAX_LINE_BYTES): one that takes
longer backtracks catastrophically, is given up on for the rest of the job, and a
{"type": "metric_error", "name", "error"} record says so, so the supervisor stays responsive
whatever a line holds. The same records, written
by a script into its own metrics.jsonl, count as well. The last value of each metric is its
final value (final_values).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from remedy.jobs.local.capped_log import rotated
from remedy.jobs.local.layout import read_json_written_by_job
from remedy.state_schema.metric_definitions import (
    MATCH_TIMEOUT_S,
    MetricDefinition,
    is_finite,
)

METRIC_RECORD = "metric"  # the "type" of a metric record
METRIC_ERROR_RECORD = "metric_error"  # a definition given up on (its regex timed out)
SCAN_INTERVAL_S = 0.5  # how often the supervisor looks for new log lines
MAX_LINE_BYTES = 4096  # a longer line is matched on its first 4096 bytes
CHUNK_BYTES = 1 << 20  # read the log this much at a time
LINE_BREAK = re.compile(rb"\r\n|\r|\n")  # \r too: progress bars rewrite one line with it


class LogMetrics:
    """Follows a job's training log and appends a metric record per line a definition
    matches. Holds only the unfinished last line between scans."""

    def __init__(
        self, definitions: list[MetricDefinition], log: Path, out: Path, progress: Path
    ) -> None:
        self.definitions = list(definitions)  # a definition given up on is removed
        self.log, self.out, self.progress = log, out, progress
        self.offset = 0  # bytes of the log read so far
        self.inode: int | None = None  # of the file read so far (a rotation changes it)
        self.partial = b""  # the unfinished line at the end of what was read
        self.scanned_at = -math.inf

    def scan(self, now: float | None = None) -> None:
        """Read the lines the log gained, at most every SCAN_INTERVAL_S."""
        now = time.monotonic() if now is None else now
        if not self.definitions or now - self.scanned_at < SCAN_INTERVAL_S:
            return
        self.scanned_at = now
        self._read()

    def finish(self) -> None:
        """Everything the job logged: its last line too, when it ended without a newline."""
        if not self.definitions:
            return
        self._read()
        if self.partial:
            self._write(self._records([self.partial]))
            self.partial = b""

    def _read(self) -> None:
        try:
            handle = self.log.open("rb")
        except FileNotFoundError:
            return  # the job has not started yet
        with handle:
            inode = os.fstat(handle.fileno()).st_ino
            if self.inode is not None and inode != self.inode:
                self._rotated()  # capped_log.py rotated it: the rest of the old one first
            self.inode = inode
            self._follow(handle)

    def _rotated(self) -> None:
        try:
            old = rotated(self.log).open("rb")
        except FileNotFoundError:
            old = None
        if old is not None:
            with old:
                if os.fstat(old.fileno()).st_ino == self.inode:
                    self._follow(old)
        self.offset = 0

    def _follow(self, handle: BinaryIO) -> None:
        handle.seek(self.offset)
        while chunk := handle.read(CHUNK_BYTES):
            self.offset += len(chunk)
            *lines, self.partial = LINE_BREAK.split(self.partial + chunk)
            self.partial = self.partial[:MAX_LINE_BYTES]  # a line is matched on its start
            self._write(self._records(lines))

    def _records(self, lines: Iterable[bytes]) -> list[dict[str, Any]]:
        records = []
        step: int | None = None
        step_read = False
        for raw in lines:
            line = raw[:MAX_LINE_BYTES].decode("utf-8", errors="replace")
            for definition in list(self.definitions):
                try:
                    value = definition.value_in(line)
                except TimeoutError:
                    records.append(self._give_up(definition, line))
                    continue
                if value is None:
                    continue
                if not step_read:  # the step is read once per batch of lines, when needed
                    step, step_read = self._step(), True
                records.append(
                    {
                        "type": METRIC_RECORD,
                        "name": definition.name,
                        "value": value if math.isfinite(value) else None,  # strict JSON
                        "step": step,
                        "wall_time": time.time(),
                    }
                )
        return records

    def _give_up(self, definition: MetricDefinition, line: str) -> dict[str, Any]:
        """A regex that took longer than MATCH_TIMEOUT_S on a line (it backtracks
        catastrophically) is matched no more in this job: its error record says why."""
        self.definitions.remove(definition)
        return {
            "type": METRIC_ERROR_RECORD,
            "name": definition.name,
            "error": f"run_spec.metric_definitions {definition.name!r}: its regex "
            f"{definition.regex!r} took over {MATCH_TIMEOUT_S:g} s on one log line "
            f"({line[:80]!r}...): it backtracks catastrophically; no longer matched",
            "wall_time": time.time(),
        }

    def _step(self) -> int | None:
        progress = read_json_written_by_job(self.progress)
        step = progress.get("step") if isinstance(progress, dict) else None
        return step if isinstance(step, int) else None

    def _write(self, records: list[dict[str, Any]]) -> None:
        if records:
            with self.out.open("a") as handle:  # whole lines: a reader skips a torn last one
                handle.write("".join(json.dumps(r, allow_nan=False) + "\n" for r in records))


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of a file (one the job or the supervisor is appending to: a line being
    written is left out)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def final_values(records: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Metric name -> its last value, from metric records; a metric whose last value is not
    a finite number has none."""
    last: dict[str, Any] = {}
    for record in records:
        if record.get("type") == METRIC_RECORD and isinstance(record.get("name"), str):
            last[record["name"]] = record.get("value")
    return {name: float(value) for name, value in last.items() if is_finite(value)}
