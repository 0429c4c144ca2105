"""Background writer: turns queued steps into step files so training never waits on disk I/O.

Back-pressure: the queue holds at most `max_pending_steps` steps. When it is full, `put`
blocks the training thread until the writer catches up; memory stays bounded at the cost
of (rare) stalls. Steps are never dropped silently.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from debugger import store
from debugger.config import SaveConfig
from debugger.modes import ModeKeys

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING_STEPS = 4


@dataclass
class StepRecord:
    """One step's tensors, already detached and copied off the device by the hook."""

    mode: ModeKeys
    mode_step: int
    global_step: int
    wall_time: float
    tensors: dict[str, Any] = field(default_factory=dict)  # name -> CPU tensor/array
    collection_of: dict[str, str] = field(default_factory=dict)  # name -> collection


@dataclass
class _End:
    last_steps: dict[ModeKeys, int]
    global_step: int


class StoreWriter:
    """Owns the store folder: meta.json and collections.json up front, then steps, then end.json."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        collection_configs: Mapping[str, SaveConfig],
        default_config: SaveConfig,
        to_numpy: Callable[[Any], np.ndarray],
        framework: str,
        framework_version: str,
        max_pending_steps: int = DEFAULT_MAX_PENDING_STEPS,
    ) -> None:
        self.root = os.fspath(root)
        self._to_numpy = to_numpy
        self._default_config = default_config
        self._collections: dict[str, dict[str, Any]] = {
            name: {"tensor_names": [], "save_config": cfg.to_dict()}
            for name, cfg in collection_configs.items()
        }
        # Written synchronously so a bad out_dir fails in the caller, not later in a thread.
        store.write_meta(self.root, framework, framework_version)
        store.write_collections(self.root, self._collections)
        self._queue: queue.Queue[StepRecord | _End] = queue.Queue(maxsize=max_pending_steps)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="debugger-writer", daemon=True)
        self._thread.start()

    def put(self, record: StepRecord) -> None:
        """Queue a step; blocks while the queue is full (see module docstring)."""
        self._queue.put(record)

    def flush(self) -> None:
        """Block until every queued step is on disk."""
        self._queue.join()

    def close(self, last_steps: dict[ModeKeys, int], global_step: int) -> None:
        """Write the remaining steps, then end.json; re-raise the first write error, if any."""
        self._queue.put(_End(dict(last_steps), global_step))
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if isinstance(item, _End):
                    store.write_end(self.root, item.last_steps, item.global_step)
                    return
                self._write_step(item)
            except Exception as exc:  # keep draining so put() never blocks forever
                if self.error is None:
                    self.error = exc
                    log.exception("debugger writer failed; later steps may be missing")
            finally:
                self._queue.task_done()

    def _write_step(self, record: StepRecord) -> None:
        arrays = {name: self._to_numpy(value) for name, value in record.tensors.items()}
        # collections.json first: a reader that sees the step also sees its names' collections.
        changed = False
        for name, collection in record.collection_of.items():
            entry = self._collections.setdefault(
                collection,
                {"tensor_names": [], "save_config": self._default_config.to_dict()},
            )
            if name not in entry["tensor_names"]:
                entry["tensor_names"] = sorted([*entry["tensor_names"], name])
                changed = True
        if changed:
            store.write_collections(self.root, self._collections)
        header = store.StepHeader(
            mode=record.mode,
            mode_step=record.mode_step,
            global_step=record.global_step,
            wall_time=record.wall_time,
            tensor_names=tuple(sorted(arrays)),
        )
        store.write_step(self.root, header, arrays)
