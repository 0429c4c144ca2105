"""Errors raised by the debugger: configuration, the trial (analysis API) and the store."""

from __future__ import annotations

from remedy.debugger.modes import ModeKeys


class ConfigError(ValueError):
    """A config value is invalid; the message starts with the key path, e.g. `save_config.x`."""


class DebuggerError(Exception):
    """Base class, so callers can catch everything from this package at once."""


class StoreWriteError(DebuggerError):
    """The writer could not write the store (a full disk, a lost folder): the job must end."""


class StepNotYetAvailable(DebuggerError):
    """The job is still running and has not written this step yet; it may come later."""

    def __init__(self, step: int, mode: ModeKeys) -> None:
        super().__init__(f"{mode.value} step {step} is not yet available")
        self.step = step
        self.mode = mode


class StepUnavailable(DebuggerError):
    """This step was never written and never will be (skipped by the save config, or job ended)."""

    def __init__(self, step: int, mode: ModeKeys) -> None:
        super().__init__(f"{mode.value} step {step} is unavailable (never saved)")
        self.step = step
        self.mode = mode


class TensorUnavailable(DebuggerError):
    """No step in the store holds a tensor of this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"tensor {name!r} was not saved at any step")
        self.name = name


class TensorUnavailableForStep(DebuggerError):
    """The step exists but this tensor was not saved at it."""

    def __init__(self, name: str, step: int, mode: ModeKeys) -> None:
        super().__init__(f"tensor {name!r} was not saved at {mode.value} step {step}")
        self.name = name
        self.step = step
        self.mode = mode


class InvalidWorker(DebuggerError):
    """A worker name the store does not have (the legacy library's InvalidWorker)."""

    def __init__(self, worker: str, known: list[str]) -> None:
        super().__init__(f"no worker {worker!r} in this store; its workers: {', '.join(known)}")
        self.worker = worker


class StoreFormatError(DebuggerError):
    """The folder holds a store of a format or version this reader does not understand."""


class DebuggerWarning(UserWarning):
    """Something was skipped (a foreign step file, a tensor saved too late); nothing crashed."""


class CorruptStoreFile(DebuggerError):
    """A file of a store is not what the layout says it is: not a regular file (a symlink,
    a folder, a FIFO, a device), not valid JSON or not an object, out of bounds, or its
    checksum does not match. The message starts with the file's path."""


class CorruptStepFile(CorruptStoreFile):
    """A file named like a step file that is not one of ours (truncated, garbage, foreign,
    a tensor whose bytes do not match their checksum)."""


class IncompleteStore(CorruptStoreFile):
    """The store's end marker names steps whose step files are missing (or the store holds
    step files the end marker does not name): a reader would otherwise skip them silently."""
