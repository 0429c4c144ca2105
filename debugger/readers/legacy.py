"""Reader for stores written by the legacy debugger library (read-only, local folders).

Its layout: index/<NNNNNNNNN>/<global step>_worker_0.json (mode, mode_step, event file and
per-tensor byte ranges), events/<global step>/<global step>_worker_0.tfevents (TFRecord
Event records), collections/000000000/worker_0_collections.json, training_job_end.ts.
This reader maps it onto our StoreReader interface, so create_trial(), the rules and the
CLI work on artifacts users already have. A tensor is one positioned read of its record,
checked by its crc32c: a torn or half-written record is never decoded. Only worker 0 is
read (one process per job, as remedy's jobs are).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
from remedy.debugger import store, tfevents
from remedy.debugger.exceptions import CorruptStepFile, CorruptStoreFile, StoreFormatError
from remedy.debugger.modes import STEP_MODES, ModeKeys
from remedy.debugger.readers.base import StoreReader

INDEX_DIR = "index"
END_MARKER = "training_job_end.ts"
COLLECTIONS_FILE = "collections/000000000/worker_0_collections.json"
_INDEX_RE = re.compile(r"^(\d{12})_worker_0\.json$")


def is_legacy_store(location: str | os.PathLike[str]) -> bool:
    root = Path(location)
    return (root / INDEX_DIR).is_dir() and not (root / store.META_FILE).exists()


class LegacyStoreReader(StoreReader):
    def __init__(self, location: str | os.PathLike[str]) -> None:
        self.location = os.fspath(location)
        self._seen: set[str] = set()  # index files parsed
        # mode -> mode_step -> (global step, event file, {name: (start, length)})
        self._steps: dict[ModeKeys, dict[int, tuple[int, str, dict[str, tuple[int, int]]]]] = {
            mode: {} for mode in STEP_MODES
        }

    def read_json(self, name: str) -> Any | None:
        root = Path(self.location)
        if name == store.META_FILE:
            # The trial checks the format; a legacy store reads as ours, version 1.
            return {"format": store.FORMAT_NAME, "version": 1, "legacy": True}
        if name == store.COLLECTIONS_FILE:
            data = store.read_json(root / COLLECTIONS_FILE) or {}
            return {
                cname: {"tensor_names": entry.get("tensor_names", [])}
                for cname, entry in data.get("collections", {}).items()
            }
        if name == store.END_FILE:
            if not (root / END_MARKER).exists():
                return None
            return {"last_step": {m.value: max(s) for m, s in self._steps.items() if s}}
        return None

    def list_steps(self, mode: ModeKeys, start_after: int | None = None) -> list[int]:
        self._scan()
        floor = -1 if start_after is None else start_after
        return sorted(s for s in self._steps[mode] if s > floor)

    def read_header(self, mode: ModeKeys, mode_step: int) -> store.StepHeader:
        entry = self._steps[mode].get(mode_step)
        if entry is None:
            raise CorruptStepFile(f"{self.location}: no index for {mode.value} step {mode_step}")
        global_step, event_file, tensors = entry
        path = Path(self.location) / event_file
        return store.StepHeader(
            mode=mode,
            mode_step=mode_step,
            global_step=global_step,
            wall_time=path.stat().st_mtime if path.exists() else 0.0,
            tensor_names=tuple(sorted(tensors)),
        )

    def read_tensor(self, mode: ModeKeys, mode_step: int, name: str) -> np.ndarray:
        _, event_file, tensors = self._steps[mode][mode_step]
        start, length = tensors[name]
        path = Path(self.location) / event_file
        try:
            fd, size = store.open_regular(path)  # never a FIFO, device or symlink
            try:
                if start + length > size:
                    raise ValueError(f"truncated: {start}..{start + length} runs past its end")
                record = os.pread(fd, length, start)
            finally:
                os.close(fd)
            event = tfevents.decode_event(tfevents.unframe(record))
        except (OSError, ValueError, CorruptStoreFile) as exc:
            raise CorruptStepFile(f"{path}: cannot read {name}: {exc}") from None
        for value in event.values:
            if value.tag == name and value.tensor is not None:
                return value.tensor
        raise CorruptStepFile(f"{path}: the record at {start} does not hold {name}")

    def _scan(self) -> None:
        """Parse index files not seen yet. One that does not parse is being written: it
        and every later one wait for the next scan (listings stay gap-free)."""
        root = Path(self.location) / INDEX_DIR
        if not root.is_dir():
            return
        names = sorted(
            (folder.name, entry.name)
            for folder in root.iterdir()
            if folder.is_dir()
            for entry in folder.iterdir()
            if _INDEX_RE.match(entry.name)
        )
        for folder, name in names:
            key = f"{folder}/{name}"
            if key in self._seen:
                continue
            try:
                index = json.loads(store.read_regular(root / folder / name, store.MAX_JSON_BYTES))
                meta = index["meta"]
                mode = ModeKeys(meta["mode"])
                mode_step = int(meta["mode_step"])
                event_file = meta["event_file_name"]
                tensors = {
                    t["tensorname"]: (int(t["start_idx"]), int(t["length"]))
                    for t in index.get("tensor_payload", [])
                }
            except (OSError, ValueError, KeyError, TypeError, RecursionError):
                return
            global_step = int(_INDEX_RE.match(name).group(1))  # type: ignore[union-attr]
            index_path = f"{INDEX_DIR}/{folder}/{name}"
            self._seen.add(key)
            if mode is ModeKeys.GLOBAL:
                # The legacy hook's default without set_mode(): its steps have no TRAIN,
                # EVAL or PREDICT mode to read them in. Dropping them would read the store
                # as empty (no tensors, no steps, no error), and rules over it as clean.
                raise StoreFormatError(
                    f"{self.location}: {index_path} holds a step in mode GLOBAL (the legacy "
                    "hook's default when the script never calls set_mode); remedy reads "
                    "TRAIN, EVAL and PREDICT steps only. Re-run with hook.set_mode("
                    "smd.modes.TRAIN) (and EVAL for evaluation)"
                )
            if mode in self._steps and tensors:
                self._steps[mode][mode_step] = (global_step, event_file, tensors)
