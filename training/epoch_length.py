"""Updates per epoch of a script that trains over a torch DataLoader, measured as it runs.

A script that counts epochs (`--epochs 8`) states its length only in epochs; the updates in
one are its data's business (the dataset's size, the batch size, gradient accumulation).
The launcher measures them: the updates made while one pass over a DataLoader ran, from
its first batch to its end (the iterator's StopIteration), once such a pass made any. A
validation loader's pass makes none and is passed over; so is a pass cut short (a script
that breaks out at its own step limit never ends one). With its epochs flag mapped to the
num_epochs role, the monitor then knows the job's length (decisions/observe.py:
with_stated_length) after its first epoch, and asks at half of it whether the model has
begun to learn. A script without a DataLoader (manual batching) reports none; it may state
its epoch instead (run_spec.updates_per_epoch). Told to hold by its epochs, the launcher
says so at the first update made before any DataLoader batch (ScriptMonitor.first_update):
such an epoch will never be measured, and the flow warns rather than wait for it.

The pass is watched on DataLoader's iterator class (every loader's, single- or
multi-process), not on the script's objects, and costs a dictionary lookup a batch until
the first epoch is measured; then the iterator's own __next__ is put back.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from torch.utils.data import dataloader

Iterator = dataloader._BaseDataLoaderIter


class EpochLength:
    """Calls found(updates) once, at the end of the first DataLoader pass that made any."""

    def __init__(self, updates: Callable[[], int], found: Callable[[int], None]) -> None:
        self.updates = updates  # updates made so far in this launch
        self.found = found
        self.measured: int | None = None
        self.seen_a_batch = False  # any DataLoader has handed the script a batch
        self._started: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._original: Callable[[Any], Any] | None = None

    def install(self) -> EpochLength:
        original = Iterator.__next__
        self._original = original
        started = self._started

        def __next__(it: Any) -> Any:
            if it not in started:
                started[it] = self.updates()
                self.seen_a_batch = True
            try:
                return original(it)
            except StopIteration:
                self.pass_ended(self.updates() - started.pop(it, self.updates()))
                raise

        Iterator.__next__ = __next__  # type: ignore[method-assign, assignment]
        return self

    def pass_ended(self, updates: int) -> None:
        if updates > 0 and self.measured is None:
            self.measured = updates
            self.close()  # measured once: the batches after it cost nothing
            self.found(updates)

    def close(self) -> None:
        if self._original is not None:
            Iterator.__next__ = self._original  # type: ignore[method-assign, assignment]
            self._original = None
