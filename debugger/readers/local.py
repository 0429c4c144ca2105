"""Reader for a store on a local (or mounted) file system."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from debugger import store
from debugger.exceptions import CorruptStepFile
from debugger.modes import ModeKeys
from debugger.readers.base import StoreReader


class LocalStoreReader(StoreReader):
    """Not thread-safe: one reader per trial, one trial per thread."""

    def __init__(self, location: str | os.PathLike[str]) -> None:
        self.location = os.fspath(location)
        # Rules read many tensors of the same step in a row: keep that one file open.
        self._open_path: Path | None = None
        self._open_file: Any = None

    def read_json(self, name: str) -> Any | None:
        return store.read_json(Path(self.location) / name)

    def list_steps(self, mode: ModeKeys, start_after: int | None = None) -> list[int]:
        first = self._scan(mode)
        if not first:
            return []
        # readdir order is not creation order: a scan can miss a file created during it
        # yet return a later one. A second scan sees every file created before the first
        # ended, so its steps up to the first scan's highest form a gap-free prefix.
        bound = max(first)
        floor = -1 if start_after is None else start_after
        return sorted(s for s in self._scan(mode) if floor < s <= bound)

    def _scan(self, mode: ModeKeys) -> list[int]:
        try:
            entries = os.scandir(store.step_dir(self.location, mode))
        except FileNotFoundError:  # the job has not written this mode (yet)
            return []
        with entries:
            steps = [store.parse_step_file_name(e.name) for e in entries]
        return [s for s in steps if s is not None]

    def read_header(self, mode: ModeKeys, mode_step: int) -> store.StepHeader:
        handle = self._open(mode, mode_step)
        try:
            header = store.StepHeader.from_metadata(handle.metadata() or {}, list(handle.keys()))
        except (KeyError, ValueError) as exc:
            raise CorruptStepFile(f"{self._open_path}: not a debugger step file ({exc})") from None
        if header.mode is not mode or header.mode_step != mode_step:
            raise CorruptStepFile(
                f"{self._open_path}: header says {header.mode.value} step {header.mode_step}"
            )
        return header

    def read_tensor(self, mode: ModeKeys, mode_step: int, name: str) -> np.ndarray:
        return self._open(mode, mode_step).get_tensor(name)

    def _open(self, mode: ModeKeys, mode_step: int) -> Any:
        from safetensors import SafetensorError, safe_open

        path = store.step_path(self.location, mode, mode_step)
        if path != self._open_path:
            self._open_path, self._open_file = None, None
            try:
                handle = safe_open(os.fspath(path), framework="numpy")
            except (SafetensorError, OSError) as exc:
                raise CorruptStepFile(f"{path}: unreadable step file ({exc})") from None
            self._open_path, self._open_file = path, handle
        return self._open_file
