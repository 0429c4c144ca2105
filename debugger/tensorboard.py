"""Optional TensorBoard export of what the hook saves: scalars and histograms.

    Hook(out_dir, ..., tensorboard_dir="runs/tb")    # or "tensorboard_dir" in the JSON config

One event file per mode (<dir>/<MODE>/events.out.tfevents.<time>.remedy, TensorBoard's
naming, so `tensorboard --logdir <dir>` shows TRAIN and EVAL as two runs), x axis = the
mode's step. A one-value tensor or a saved reduction becomes a scalar; any other tensor a
histogram. Written by the hook's writer thread after each step file, appended record by
record and flushed per step, so TensorBoard can follow a running job.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

import numpy as np

from remedy.debugger import tfevents
from remedy.debugger.modes import ModeKeys


class TensorBoardExporter:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._files: dict[ModeKeys, IO[bytes]] = {}

    def write_step(
        self, mode: ModeKeys, step: int, wall_time: float, arrays: Mapping[str, np.ndarray]
    ) -> None:
        handle = self._file(mode)
        for name in sorted(arrays):
            value = np.asarray(arrays[name])
            if value.dtype.kind not in "biuf":
                continue
            if value.size == 1:
                event = tfevents.encode_scalar_event(
                    step, wall_time, name, float(value.reshape(()))
                )
            else:
                event = tfevents.encode_histogram_event(step, wall_time, name, value)
            handle.write(tfevents.frame(event))
        handle.flush()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def _file(self, mode: ModeKeys) -> IO[bytes]:
        handle = self._files.get(mode)
        if handle is None:
            folder = self.root / mode.value
            folder.mkdir(parents=True, exist_ok=True)
            now = time.time()
            handle = open(folder / f"events.out.tfevents.{int(now)}.remedy", "ab")
            handle.write(tfevents.frame(tfevents.file_version_event(now)))
            self._files[mode] = handle
        return handle
