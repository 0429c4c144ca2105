"""Reader for a store on a local (or mounted) file system."""

from __future__ import annotations

import mmap
import os
import stat
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from remedy.debugger import store
from remedy.debugger.exceptions import CorruptStepFile, CorruptStoreFile
from remedy.debugger.modes import ModeKeys
from remedy.debugger.readers.base import FileKey, StepFileReader

OPEN_FILES = 64  # step files kept open: reading one tensor across steps reopens none
HELD_FILES = 64  # checked step files whose bytes stay mapped (each map holds a descriptor)
HELD_BYTES = 256 * 2**20  # and at most this many of their bytes
MAPPED_BYTES = 65_536  # smaller step files are read, not mapped
_FIRST_READ = 65_536  # one read usually brings the whole header


class LocalStoreReader(StepFileReader):
    """Not thread-safe: one reader per trial, one trial per thread.

    Each step file's header is parsed once (when the trial lists the step; a pack's, when
    it is listed) and its offsets kept. The first tensor read from a file maps all its
    tensor bytes and checks every checksum (a damaged file fails whichever tensor is asked
    for, naming the damaged one); its tensors are then copied out of the map, each into an
    array of the caller's own. The maps of the last HELD_FILES checked files are kept; a
    tensor of a file checked before them is one positioned read. Files are renamed into
    place whole and never rewritten, so a kept descriptor or map stays valid (a file
    truncated in place under a reader would end it with SIGBUS, as with any mapped file;
    nothing of remedy's does that). Only regular files are opened and only real folders
    listed: a symlink, FIFO or device in the store is a CorruptStoreFile, never followed or
    read.
    """

    def __init__(self, location: str | os.PathLike[str], inner: bool = False) -> None:
        super().__init__()
        self.location = os.fspath(location)
        self._inner = inner  # a worker's part: its own folder belongs to the store too
        self._files: OrderedDict[FileKey, tuple[int, int]] = OrderedDict()
        self._verified: set[FileKey] = set()  # files whose checksums passed
        self._held: OrderedDict[FileKey, tuple[np.ndarray, int]] = OrderedDict()
        self._held_bytes = 0

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
        bound = max(file.last for file in first)
        floor = -1 if start_after is None else start_after
        return self._steps_in(mode, [f for f in self._scan(mode) if floor < f.last <= bound], floor)

    def _scan(self, mode: ModeKeys) -> list[store.StepFile]:
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
            files = [store.parse_steps_folder_name(e.name) for e in entries]
        return [f for f in files if f is not None]

    def _parse_header(self, key: FileKey) -> tuple[dict[str, str], dict[str, store.TensorEntry]]:
        fd, file_size = self._fd(key)
        try:
            head = os.pread(fd, min(_FIRST_READ, file_size), 0)
            size = store.header_size(head, file_size)  # never more than the file holds
            raw = head[8 : 8 + size]
            if len(raw) < size:
                raw = os.pread(fd, size, 8)
            if len(raw) != size:
                raise ValueError("truncated header")
            return store.parse_header(raw, file_size)
        except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
            self._discard(key)
            raise CorruptStepFile(f"{self._path(key)}: not a debugger step file ({exc})") from None

    def _file_location(self, key: FileKey) -> str:
        return str(self._path(key))

    def read_tensor(self, mode: ModeKeys, mode_step: int, name: str) -> np.ndarray:
        entries = self._step_entries(mode, mode_step)
        entry = entries[name]
        key = self._file_of(mode, mode_step)
        held = self._held.get(key)
        if held is None:
            if key in self._verified:  # checked before, its bytes let go since
                return self._read_again(key, entry, name)
            held = self._verify_file(key, self._pack_entries.get(key, entries))
        data, start = held
        raw = data[entry.start - start : entry.end - start]
        return raw.view(entry.dtype).reshape(entry.shape).copy()  # the caller's own array

    def _path(self, key: FileKey) -> Path:
        return store.step_dir(self.location, key[0]) / key[1]

    def _read_again(self, key: FileKey, entry: store.TensorEntry, name: str) -> np.ndarray:
        """A tensor of a checked file whose bytes are no longer held: one positioned read
        straight into a new array (the file was checked and is never rewritten)."""
        out = np.empty(entry.shape, dtype=entry.dtype)
        size = entry.end - entry.start
        if size:
            fd = self._fd(key)[0]
            got = os.preadv(fd, [out.reshape(-1).view(np.uint8).data], entry.start)
            if got != size:
                raise CorruptStepFile(f"{self._path(key)}: truncated tensor {name}")
        return out

    def _verify_file(
        self, key: FileKey, entries: dict[str, store.TensorEntry]
    ) -> tuple[np.ndarray, int]:
        """The first tensor read from a file: check every checksum of its tensors' bytes
        at once, then keep those bytes (read-only) to copy its tensors out of. Files are
        renamed into place whole and never rewritten, so later reads of this file need no
        check of their own."""
        path = self._path(key)
        fd, file_size = self._fd(key)
        start = min((e.start for e in entries.values()), default=file_size)
        data = _tensor_bytes(fd, file_size, start)
        if data is None:
            raise CorruptStepFile(f"{path}: truncated tensor data")
        store.check_step_data(entries, data.data, start, str(path))
        self._verified.add(key)
        self._held[key] = (data, start)
        self._held_bytes += data.nbytes
        while len(self._held) > HELD_FILES or (
            self._held_bytes > HELD_BYTES and len(self._held) > 1
        ):
            _, (oldest, _) = self._held.popitem(last=False)
            self._held_bytes -= oldest.nbytes
        return data, start

    def _fd(self, key: FileKey) -> tuple[int, int]:
        """(descriptor, size) of a step file or pack, kept open."""
        found = self._files.get(key)
        if found is not None:
            self._files.move_to_end(key)
            return found
        path = self._path(key)
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

    def _discard(self, key: FileKey) -> None:
        found = self._files.pop(key, None)
        if found is not None:
            os.close(found[0])


def _tensor_bytes(fd: int, file_size: int, start: int) -> np.ndarray | None:
    """A step file's bytes from `start` to its end, read-only; None if the file is shorter.

    Mapped rather than read: the map's pages are the page cache's own, where a read fills
    new memory first (on a 2 MB step file, about as long as the checksums take). A file
    system that cannot map is read instead.
    """
    size = file_size - start
    if size >= MAPPED_BYTES:
        try:
            flags = getattr(mmap, "MAP_POPULATE", 0)
            mapped = mmap.mmap(fd, file_size, flags=flags | mmap.MAP_SHARED, prot=mmap.PROT_READ)
        except OSError:
            pass
        else:
            return np.frombuffer(mapped, dtype=np.uint8)[start:]  # read-only: so is the map
    data = np.empty(size, dtype=np.uint8)
    if size and os.preadv(fd, [data.data], start) != size:
        return None
    data.flags.writeable = False
    return data


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
