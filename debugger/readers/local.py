"""Reader for a store on a local (or mounted) file system."""

from __future__ import annotations

import os
import stat
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from remedy.debugger import store
from remedy.debugger.exceptions import CorruptStepFile, CorruptStoreFile
from remedy.debugger.modes import ModeKeys
from remedy.debugger.readers.base import StoreReader

OPEN_FILES = 64  # step files kept open: reading one tensor across steps reopens none
_FIRST_READ = 65_536  # one read usually brings the whole header


class LocalStoreReader(StoreReader):
    """Not thread-safe: one reader per trial, one trial per thread.

    Each step file's header is parsed once (when the trial lists the step) and its offsets
    kept. The first tensor read from a step file reads all its tensor bytes in one go and
    checks every checksum (a damaged file fails whichever tensor is asked for, naming the
    damaged one); later tensors of that file are one positioned read straight into a new
    array each. Step files are
    renamed into place whole and never rewritten, so a kept descriptor stays valid.
    Only regular files are opened and only real folders listed: a symlink, FIFO or device
    in the store is a CorruptStoreFile, never followed or read.
    """

    def __init__(self, location: str | os.PathLike[str], inner: bool = False) -> None:
        self.location = os.fspath(location)
        self._inner = inner  # a worker's part: its own folder belongs to the store too
        self._entries: dict[tuple[ModeKeys, int], dict[str, store.TensorEntry]] = {}
        self._files: OrderedDict[tuple[ModeKeys, int], tuple[int, int]] = OrderedDict()
        self._verified: set[tuple[ModeKeys, int]] = set()  # step files whose checksums passed

    def __del__(self) -> None:
        for fd, _ in self._files.values():
            try:
                os.close(fd)
            except OSError:
                pass

    def child(self, relative: str) -> LocalStoreReader:
        return LocalStoreReader(os.path.join(self.location, relative), inner=True)

    def exists(self, relative: str) -> bool:
        return os.path.lexists(os.path.join(self.location, relative))

    def read_json(self, name: str) -> Any | None:
        root = Path(self.location)
        if self._inner and not (_is_folder(root.parent) and _is_folder(root)):
            return None  # this worker has not started writing (yet)
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
        folder = store.step_dir(self.location, mode)
        root = Path(self.location)
        folders = [root.parent, root] if self._inner else []  # workers/, workers/worker_N/
        if not all(_is_folder(f) for f in [*folders, folder.parent, folder]):
            return []  # the job has not written this mode (yet)
        try:
            entries = os.scandir(folder)
        except FileNotFoundError:  # removed since: as if never written
            return []
        except OSError as exc:
            raise CorruptStoreFile(f"{folder}: cannot be listed ({exc.strerror})") from None
        with entries:
            steps = [store.parse_step_file_name(e.name) for e in entries]
        return [s for s in steps if s is not None]

    def read_header(self, mode: ModeKeys, mode_step: int) -> store.StepHeader:
        path = store.step_path(self.location, mode, mode_step)
        fd, file_size = self._fd(mode, mode_step)
        try:
            head = os.pread(fd, min(_FIRST_READ, file_size), 0)
            size = store.header_size(head, file_size)  # never more than the file holds
            raw = head[8 : 8 + size]
            if len(raw) < size:
                raw = os.pread(fd, size, 8)
            if len(raw) != size:
                raise ValueError("truncated header")
            metadata, entries = store.parse_header(raw, file_size)
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
        key = (mode, mode_step)
        entries = self._entries.get(key)
        if entries is None:
            self.read_header(mode, mode_step)
            entries = self._entries[key]
        entry = entries[name]
        if key not in self._verified:
            return self._verify_file(key, entries, name)
        # The header was checked: this size is the entry's byte range, inside the file.
        out = np.empty(entry.shape, dtype=entry.dtype)
        size = entry.end - entry.start
        if size:
            fd = self._fd(mode, mode_step)[0]
            got = os.preadv(fd, [out.reshape(-1).view(np.uint8).data], entry.start)
            if got != size:
                path = store.step_path(self.location, mode, mode_step)
                raise CorruptStepFile(f"{path}: truncated tensor {name}")
        return out

    def _verify_file(
        self, key: tuple[ModeKeys, int], entries: dict[str, store.TensorEntry], name: str
    ) -> np.ndarray:
        """The first tensor read from a step file: read all its tensors' bytes at once and
        check every checksum, then hand out `name`. Step files are renamed into place whole
        and never rewritten, so later reads of this file need no check of their own."""
        path = store.step_path(self.location, *key)
        fd, file_size = self._fd(*key)
        start = min((e.start for e in entries.values()), default=file_size)
        data = np.empty(file_size - start, dtype=np.uint8)
        if data.size and os.preadv(fd, [data.data], start) != data.size:
            raise CorruptStepFile(f"{path}: truncated tensor data")
        store.check_step_data(entries, data.data, start, str(path))
        self._verified.add(key)
        entry = entries[name]
        raw = data[entry.start - start : entry.end - start]
        return raw.view(entry.dtype).reshape(entry.shape).copy()

    def _fd(self, mode: ModeKeys, mode_step: int) -> tuple[int, int]:
        """(descriptor, size) of a step file, kept open."""
        key = (mode, mode_step)
        found = self._files.get(key)
        if found is not None:
            self._files.move_to_end(key)
            return found
        path = store.step_path(self.location, mode, mode_step)
        try:
            found = store.open_regular(path)
        except FileNotFoundError:
            raise CorruptStepFile(f"{path}: listed, then gone") from None
        except CorruptStoreFile as exc:
            raise CorruptStepFile(str(exc)) from None
        self._files[key] = found
        if len(self._files) > OPEN_FILES:
            _, (oldest, _) = self._files.popitem(last=False)
            os.close(oldest)
        return found

    def _forget(self, mode: ModeKeys, mode_step: int) -> None:
        found = self._files.pop((mode, mode_step), None)
        if found is not None:
            os.close(found[0])


def _is_folder(path: str | os.PathLike[str]) -> bool:
    """True for a real folder, False when absent; CorruptStoreFile for a symlink (it could
    lead out of the store) or anything else."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
        raise CorruptStoreFile(f"{path}: {kind}; a store's folders are real folders")
    return True
