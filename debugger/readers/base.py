"""The few operations a trial needs from a store, whatever it lives on."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

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
