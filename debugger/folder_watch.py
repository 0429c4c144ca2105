"""Waking when a file lands in a local store, instead of at the next poll (Linux inotify).

A fast job's finding becomes a stop only as soon as the evaluator sees the step: with a
poll every 0.05 s, half of that on average, which is ten updates of a 3 ms job. The writer
renames every file into place (debugger/store.py), so a rename into a watched folder is the
event that says "new steps"; a new folder (steps/, steps/TRAIN, a worker's part) is
watched as soon as it appears. Where inotify is missing (not Linux) FolderWatch.open()
returns None and the caller polls as before.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from remedy.debugger import store

_IN_CREATE = 0x100
_IN_MOVED_TO = 0x80
_IN_ISDIR = 0x40000000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


class FolderWatch:
    """Folders of a local store, watched for files renamed into them and new folders."""

    def __init__(self, fd: int, add_watch: Callable[[int, bytes, int], int]) -> None:
        self._fd = fd
        self._add_watch = add_watch
        self._watched: set[str] = set()

    @classmethod
    def open(cls) -> FolderWatch | None:
        """A watch, or None where the system has no inotify (the caller polls)."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:  # e.g. the per-user limit of inotify instances reached
            return None
        return cls(fd, libc.inotify_add_watch)

    def watch(self, folders: Iterable[str | os.PathLike[str]]) -> None:
        """Watch each folder that exists and is not watched yet (call again as they appear)."""
        for path in folders:
            folder = os.fspath(path)
            if folder not in self._watched and os.path.isdir(folder):
                if self._add_watch(self._fd, os.fsencode(folder), _IN_MOVED_TO | _IN_CREATE) >= 0:
                    self._watched.add(folder)

    def wait(self, timeout: float) -> bool:
        """Block until a file is renamed into a watched folder or a folder is created in
        one (True), or `timeout` seconds pass (False)."""
        ready, _, _ = select.select([self._fd], [], [], max(0.0, timeout))
        return bool(ready) and self._landed()

    def close(self) -> None:
        os.close(self._fd)

    def _landed(self) -> bool:
        """Drain the queued events: whether one of them is a rename into place or a new
        folder (a temp file being created is not news)."""
        landed = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return landed
            offset = 0
            while offset + _EVENT.size <= len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + length
                if mask & _IN_MOVED_TO or (mask & _IN_CREATE and mask & _IN_ISDIR):
                    landed = True


def store_folders(location: str) -> list[Path]:
    """The folders a local store's new files land in: its own (end.json, meta.json), its
    steps folders, and those of each worker's part."""
    root = Path(location)
    parts = [root]
    workers = root / store.WORKERS_DIR
    if workers.is_dir():
        parts += [workers, *sorted(p for p in workers.iterdir() if p.is_dir())]
    folders = []
    for part in parts:
        steps = part / store.STEPS_DIR
        folders += [part, steps]
        if steps.is_dir():
            folders += sorted(p for p in steps.iterdir() if p.is_dir())
    return folders
