"""The training log, capped and rotated: a job's output never fills the disk.

The training process writes into a pipe; a thread of the supervisor copies it into
training.log. Once that file holds LOG_CAP_BYTES it becomes training.log.1 (replacing the
previous one) and a new training.log begins: a job keeps at most twice the cap of log, its
latest output always. (log_metrics.py follows the log across a rotation.)
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import BinaryIO

LOG_CAP_BYTES = 64 * 1024 * 1024
CHUNK_BYTES = 64 * 1024


def rotated(log: Path) -> Path:
    return log.with_name(log.name + ".1")


class CappedLog:
    """Copies everything read from `pipe` (a file descriptor) into `log`, rotating it."""

    def __init__(self, pipe: int, log: Path, cap_bytes: int = LOG_CAP_BYTES) -> None:
        self.pipe, self.log, self.cap_bytes = pipe, log, cap_bytes
        self.error: OSError | None = None  # the first write that failed (a full disk)
        self.handle: BinaryIO | None = None
        self.size = 0  # bytes in the current training.log
        self.thread = threading.Thread(target=self._copy, name="training-log", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        try:
            while chunk := os.read(self.pipe, CHUNK_BYTES):
                try:
                    self._write(chunk)
                except OSError as error:  # keep draining: a full pipe would block the job
                    self.error = self.error or error
        finally:
            if self.handle is not None:
                self.handle.close()
            os.close(self.pipe)

    def _write(self, chunk: bytes) -> None:
        if self.handle is not None and self.size + len(chunk) > self.cap_bytes and self.size:
            self.handle.close()
            self.handle = None
            os.replace(self.log, rotated(self.log))
        if self.handle is None:
            self.handle = self.log.open("ab")
            self.size = self.handle.tell()
        self.handle.write(chunk)
        self.handle.flush()
        self.size += len(chunk)

    def join(self, timeout_s: float | None = None) -> None:
        """Until the training process's output is all copied (its pipe closed)."""
        self.thread.join(timeout_s)
