"""Reader for a store on a local (or mounted) file system."""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
from remedy.debugger import store
from remedy.debugger.exceptions import CorruptStepFile
from remedy.debugger.modes import ModeKeys
from remedy.debugger.readers.base import StoreReader

OPEN_FILES = 64  # step files kept open: reading one tensor across steps reopens none
_FIRST_READ = 65_536  # one read usually brings the whole header


class LocalStoreReader(StoreReader):
    """Not thread-safe: one reader per trial, one trial per thread.

    Each step file's header is parsed once (when the trial lists the step) and its offsets
    kept; a tensor is then one positioned read straight into a new array. Step files are
    renamed into place whole and never rewritten, so a kept descriptor stays valid.
    """

    def __init__(self, location: str | os.PathLike[str]) -> None:
        self.location = os.fspath(location)
        self._entries: dict[tuple[ModeKeys, int], dict[str, store.TensorEntry]] = {}
        self._files: OrderedDict[tuple[ModeKeys, int], int] = OrderedDict()

    def __del__(self) -> None:
        for fd in self._files.values():
            try:
                os.close(fd)
            except OSError:
                pass

    def child(self, relative: str) -> LocalStoreReader:
        return LocalStoreReader(os.path.join(self.location, relative))

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
        path = store.step_path(self.location, mode, mode_step)
        fd = self._fd(mode, mode_step)
        try:
            head = os.pread(fd, _FIRST_READ, 0)
            size = store.header_size(head)
            raw = head[8 : 8 + size]
            if len(raw) < size:
                raw = os.pread(fd, size, 8)
            if len(raw) != size:
                raise ValueError("truncated header")
            metadata, entries = store.parse_header(raw)
            end = max((e.end for e in entries.values()), default=8 + size)
            if os.fstat(fd).st_size < end:
                raise ValueError("truncated data")
            header = store.StepHeader.from_metadata(metadata, list(entries))
        except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
            self._forget(mode, mode_step)
            raise CorruptStepFile(f"{path}: not a debugger step file ({exc})") from None
        if header.mode is not mode or header.mode_step != mode_step:
            self._forget(mode, mode_step)
            raise CorruptStepFile(
                f"{path}: header says {header.mode.value} step {header.mode_step}"
            )
        self._entries[(mode, mode_step)] = entries
        return header

    def read_tensor(self, mode: ModeKeys, mode_step: int, name: str) -> np.ndarray:
        entries = self._entries.get((mode, mode_step))
        if entries is None:
            self.read_header(mode, mode_step)
            entries = self._entries[(mode, mode_step)]
        entry = entries[name]
        out = np.empty(entry.shape, dtype=entry.dtype)
        size = entry.end - entry.start
        if size:
            got = os.preadv(self._fd(mode, mode_step), [memoryview(out).cast("B")], entry.start)
            if got != size:
                path = store.step_path(self.location, mode, mode_step)
                raise CorruptStepFile(f"{path}: truncated tensor {name}")
        return out

    def _fd(self, mode: ModeKeys, mode_step: int) -> int:
        key = (mode, mode_step)
        fd = self._files.get(key)
        if fd is not None:
            self._files.move_to_end(key)
            return fd
        path = store.step_path(self.location, mode, mode_step)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise CorruptStepFile(f"{path}: unreadable step file ({exc})") from None
        self._files[key] = fd
        if len(self._files) > OPEN_FILES:
            _, oldest = self._files.popitem(last=False)
            os.close(oldest)
        return fd

    def _forget(self, mode: ModeKeys, mode_step: int) -> None:
        fd = self._files.pop((mode, mode_step), None)
        if fd is not None:
            os.close(fd)
