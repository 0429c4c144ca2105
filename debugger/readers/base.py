"""The few operations a trial needs from a store, whatever it lives on."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from remedy.debugger import store
from remedy.debugger.exceptions import CorruptStepFile
from remedy.debugger.modes import ModeKeys
from remedy.debugger.store import StepHeader


class StoreReader(ABC):
    """Read side of the layout described in debugger/store.py.

    Step numbers are listed in ascending order and zero-padded names sort the same way,
    so backends with sorted listings (S3 StartAfter) can list only what is new.
    A listing must be gap-free: never return a step while leaving out an earlier step of
    the same mode that exists (the trial moves its cursor past what it was given).
    """

    location: str

    def child(self, relative: str) -> StoreReader:
        """A reader of the store in a sub-folder (one worker's part of a store of several)."""
        raise NotImplementedError(f"{type(self).__name__} reads one process's store only")

    def exists(self, relative: str) -> bool:
        """Whether anything (a file, a folder, a prefix) is at `relative` in the store."""
        return False

    @abstractmethod
    def read_json(self, name: str) -> Any | None:
        """A top-level JSON file (meta.json, collections.json, end.json); None if absent.
        Raises CorruptStoreFile when it is not a regular file, too large or not JSON."""

    @abstractmethod
    def list_steps(self, mode: ModeKeys, start_after: int | None = None) -> list[int]:
        """Mode steps that have a step file, ascending, only those > start_after."""

    @abstractmethod
    def read_header(self, mode: ModeKeys, mode_step: int) -> StepHeader:
        """The step file's header only. Raises CorruptStepFile for files that are not ours."""

    @abstractmethod
    def read_tensor(self, mode: ModeKeys, mode_step: int, name: str) -> np.ndarray:
        """One tensor of one step, without reading the step's other tensors."""


FileKey = tuple[ModeKeys, str]  # (mode, name in its steps folder): a step file or a pack


class StepFileReader(StoreReader):
    """What the readers of remedy's own stores share: a step lies in a step file of its
    own or in a pack (debugger/store.py). A pack's header is read when the pack is listed,
    each of its steps' headers and entries kept; a pack found damaged then is reported when
    the trial reads its first step, after the steps before it. A subclass reads a file's
    header (_parse_header) and says where the file is (_file_location)."""

    def __init__(self) -> None:
        # (mode, step) -> offsets of its tensors; a few dozen bytes per tensor name.
        self._entries: dict[tuple[ModeKeys, int], dict[str, store.TensorEntry]] = {}
        self._packed: dict[tuple[ModeKeys, int], tuple[store.StepHeader, str]] = {}  # pack name
        self._pack_steps_read: dict[FileKey, list[int]] = {}
        self._pack_entries: dict[FileKey, dict[str, store.TensorEntry]] = {}  # a pack's all
        self._broken: dict[tuple[ModeKeys, int], CorruptStepFile] = {}  # damaged packs' first

    @abstractmethod
    def _parse_header(self, key: FileKey) -> tuple[dict[str, str], dict[str, store.TensorEntry]]:
        """(metadata, entries) of a file's header; CorruptStepFile when it is not one."""

    @abstractmethod
    def _file_location(self, key: FileKey) -> str:
        """The file's path or URI, for messages."""

    def _discard(self, key: FileKey) -> None:
        """A file found not to be ours: let go of what is held for it."""

    def _steps_in(self, mode: ModeKeys, files: list[store.StepFile], floor: int) -> list[int]:
        """The steps above `floor` that `files` (a gap-free listing) hold, in order."""
        steps: list[int] = []
        for file in sorted(files):
            if not file.packed:
                steps.append(file.first)
                continue
            try:
                steps.extend(s for s in self._pack_steps(mode, file) if s > floor)
            except CorruptStepFile as exc:  # the trial reads the steps before, then this
                self._broken[(mode, file.first)] = exc
                steps.append(file.first)
                break
        return steps

    def _pack_steps(self, mode: ModeKeys, file: store.StepFile) -> list[int]:
        key = (mode, file.name)
        steps = self._pack_steps_read.get(key)
        if steps is not None:
            return steps
        metadata, entries = self._parse_header(key)
        try:
            split = store.split_pack(metadata, entries, mode, file)
        except ValueError as exc:
            self._discard(key)
            where = self._file_location(key)
            raise CorruptStepFile(f"{where}: not a pack of steps ({exc})") from None
        for step, (header, own) in split.items():
            self._packed[(mode, step)] = (header, file.name)
            self._entries[(mode, step)] = own
        self._pack_entries[key] = entries
        self._pack_steps_read[key] = steps = list(split)
        return steps

    def read_header(self, mode: ModeKeys, mode_step: int) -> store.StepHeader:
        broken = self._broken.pop((mode, mode_step), None)
        if broken is not None:
            raise broken
        packed = self._packed.get((mode, mode_step))
        if packed is not None:
            return packed[0]
        key = (mode, store.step_file_name(mode_step))
        metadata, entries = self._parse_header(key)
        try:
            header = store.StepHeader.from_metadata(metadata, list(entries))
            if header.mode is not mode or header.mode_step != mode_step:
                raise ValueError(f"its header says {header.mode.value} step {header.mode_step}")
        except (KeyError, ValueError) as exc:
            self._discard(key)
            where = self._file_location(key)
            raise CorruptStepFile(f"{where}: not a debugger step file ({exc})") from None
        self._entries[(mode, mode_step)] = entries
        return header

    def _step_entries(self, mode: ModeKeys, mode_step: int) -> dict[str, store.TensorEntry]:
        entries = self._entries.get((mode, mode_step))
        if entries is None:
            self.read_header(mode, mode_step)
            entries = self._entries[(mode, mode_step)]
        return entries

    def _file_of(self, mode: ModeKeys, mode_step: int) -> FileKey:
        """The file holding a step: its pack, or its own step file."""
        packed = self._packed.get((mode, mode_step))
        return (mode, packed[1] if packed else store.step_file_name(mode_step))
